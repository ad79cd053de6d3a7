#pragma once

#include "ir/graph.h"
#include "sharding/collective.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::sharding {

// Which partial-sum inputs an op can pass through untouched, because it is
// linear in them: the output is then a partial sum too.
enum class PartialRule {
    None,         // nonlinear: partial inputs are reduced first
    Unary,        // linear in input 0 (reshape, transpose, neg, gather's table)
    AllOperands,  // a sum of its inputs: every data input partial (add, sub, concat)
    OneOperand,   // a product: exactly one non-additive input partial (mul, matmul)
    FirstOperand, // a quotient: input 0 partial, the others whole (div)
};

// A collective an op runs inside itself when one of its loop dims is split
// (vocab-parallel cross-entropy reduces max, sum and target logit per token).
struct InternalCollective {
    CollectiveKind kind = CollectiveKind::AllReduce;
    int count = 1;
    int input = 0;               // the input whose local dims size it
    std::vector<int> dims;       // those dims: elements = product of their local sizes
    int bytesPerElement = 4;
    bool backward = false;       // runs in the backward pass (else forward)
};

// The sharding rule of one op, GSPMD-style: the op iterates over loop dims;
// each tensor dim maps to one loop dim, or to none (-1: a broadcast dim of
// size 1, never split). Splitting a loop dim over a mesh axis splits every
// tensor dim mapped to it; a loop dim no output has is summed over
// (`contracted`: the outputs become partial sums), reduced with collectives
// inside the op (`internal`), or not splittable at all.
struct DimMap {
    std::vector<std::vector<int>> inputs;   // per input, per dim
    std::vector<std::vector<int>> outputs;  // per output, per dim
    std::vector<bool> splittable;           // per loop dim
    std::vector<bool> contracted;           // per loop dim
    std::map<int, std::vector<InternalCollective>> internal;  // by loop dim
    std::vector<bool> ignored;   // per input: shape operands and the like, never resharded
    std::vector<bool> additive;  // per input: added to the output (Gemm's C): partial when the contraction is split
    PartialRule partial = PartialRule::None;
    double forwardFlops = 0;     // of the whole op, unsharded
    double backwardFactor = 1;   // backward FLOPs = factor x forward

    int loopCount() const { return static_cast<int>(splittable.size()); }
    int addLoop(bool canSplit = true, bool isContracted = false);
    // The dim of input `i` (output `o`) mapped to loop `loop`, or -1.
    int inputDim(std::size_t i, int loop) const;
    int outputDim(std::size_t o, int loop) const;
    // Einsum-like: "abk,kn->abn"; loops that cannot be split in capitals,
    // unmapped dims as '1', ignored inputs as '~'.
    std::string toString() const;
};

// The rule for an op, or nothing when its type has no rule (or its shapes do
// not fit the rule): such an op is computed replicated.
std::optional<DimMap> opRule(const ir::Graph &graph, const ir::Op &op);

// Rules per op family, each in its own file (rule<family>.cpp).
std::optional<DimMap> matmulRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> gemmRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> einsumRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> convRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> elementwiseRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> reshapeRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> transposeRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> expandRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> normRule(const ir::Graph &graph, const ir::Op &op);  // Softmax, LayerNorm, RMSNorm
std::optional<DimMap> reduceRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> gatherRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> concatRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> splitRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> sliceRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> lossRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> topKRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> moeRule(const ir::Graph &graph, const ir::Op &op);  // MoEDispatch, MoECombine
std::optional<DimMap> batchNormRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> poolRule(const ir::Graph &graph, const ir::Op &op);        // MaxPool, AveragePool, LpPool
std::optional<DimMap> globalPoolRule(const ir::Graph &graph, const ir::Op &op);  // GlobalAveragePool, GlobalMaxPool
std::optional<DimMap> padRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> scatterNDRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> instanceNormRule(const ir::Graph &graph, const ir::Op &op);
std::optional<DimMap> generatorRule(const ir::Graph &graph, const ir::Op &op);  // ConstantOfShape, Range

// Shared by the rule files: a map with one empty dim list per input and
// output, nothing ignored or additive.
DimMap emptyDimMap(const ir::Op &op);
std::int64_t elementCount(const ir::Shape &shape);
std::size_t normaliseAxis(std::int64_t axis, std::size_t rank);

} // namespace tapestry::sharding
