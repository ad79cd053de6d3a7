#pragma once

#include "ir/graph.h"
#include "sharding/collective.h"
#include "sharding/mesh.h"
#include "sharding/oprule.h"
#include "sharding/shardingspec.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::sharding {

// How one op runs on the mesh, given the specs its inputs are stored in:
// what each mesh axis splits, the specs it computes on and produces, the
// specs its input gradients come out in, the collectives, and its local
// FLOPs. Plain data; resolveStrategy() derives it from the op's rule.
struct OpStrategy {
    static constexpr int kWhole = -1;        // the axis splits nothing: replicated compute
    static constexpr int kPassPartial = -2;  // the axis carries a partial sum through a linear op

    ir::OpId op;
    bool hasRule = false;
    std::string rule;           // the rule's dim map ("abk,kn->abn"), or why there is none
    std::vector<int> axisLoop;  // per mesh axis: the loop dim it splits, kWhole or kPassPartial
    std::vector<bool> dataInputs;                // false for shape operands and the like
    std::vector<ShardingSpec> inputs;            // what the op computes on
    std::vector<ShardingSpec> outputs;           // what it produces
    std::vector<ShardingSpec> inputGradients;    // what its input gradients come out as
    // This op alone: the given inputs resharded to `inputs`, then collectives
    // inside the op (forward); its input gradients resharded to the gradient
    // specs of the given inputs, then collectives inside the op (backward).
    // The cost model shares reshards between consumers of one tensor.
    std::vector<Collective> forward;
    std::vector<Collective> backward;
    std::vector<Collective> internalForward;
    std::vector<Collective> internalBackward;
    double forwardFlops = 0;   // per device
    double backwardFlops = 0;  // per device, when gradients flow through the op
    // A GEMM (MatMul, Gemm, Einsum): the FLOPs of one of its GEMM calls on
    // a device (2 x M x N x K of its local product, batch dims apart), by
    // which the device's GEMM efficiency is looked up; 0 for other ops.
    double gemmCallFlops = 0;
    // The family of kernel the op runs ("transpose", "activation",
    // "softmax", "normalization"), by which a device's measured bandwidth
    // for it is looked up (DeviceProfile::kernelBandwidth); empty for the
    // rest, which move memory at the device's memory bandwidth.
    std::string_view kernelFamily;
    // Bytes its kernels read and write per device: its data inputs' and
    // outputs' local shards, as computed on (a view such as Reshape moves
    // none); backward, when gradients flow, twice that (the output's
    // gradient and the saved inputs read, the inputs' gradients written).
    double forwardBytes = 0;
    double backwardBytes = 0;
    ir::DType computeType = ir::DType::F32;
    std::vector<std::string> warnings;

    // "model splits n" style summary of the axis choices.
    std::string choice(const Mesh &mesh) const;
    std::string toString(const ir::Graph &graph, const Mesh &mesh) const;
};

// Resolves the op's strategy GSPMD-style, axis by axis: the candidates are
// the loop dims some input is split on, carrying a partial sum through (when
// the op is linear in it), or splitting nothing. The cheapest wins: first by
// parameter bytes moved (a plan's parameter spec is what it stores, so it is
// kept where it can be), then by activation bytes; ties go to the first
// candidate. An op without a rule is computed replicated, inputs gathered,
// with a warning.
OpStrategy resolveStrategy(const ir::Graph &graph, ir::OpId op, const std::vector<ShardingSpec> &inputSpecs,
                           const Mesh &mesh);
// The same with the op's rule (opRule()) given, for callers that resolve
// one op under many input specs.
OpStrategy resolveStrategy(const ir::Graph &graph, ir::OpId op, const std::vector<ShardingSpec> &inputSpecs,
                           const Mesh &mesh, const std::optional<DimMap> &rule);

bool isFloat(ir::DType dtype);

// The kernel family of an op type (OpStrategy::kernelFamily), or empty.
std::string_view kernelFamily(std::string_view opType);

} // namespace tapestry::sharding
