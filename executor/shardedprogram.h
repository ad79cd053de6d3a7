#pragma once

#include "buffertable.h"
#include "device.h"
#include "interpreter.h"
#include "kernels/matmul.h"
#include "opregistry.h"
#include "rankmesh.h"
#include "reshardsteps.h"
#include "steploop.h"
#include "tensorview.h"

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tapestry::exec {

struct ShardedProgramOptions {
    InterpreterOptions training;  // seed, optimizer, learning rate: as the reference's
    // Test aid: skip the N-th all-reduce (1-based, in step order) of the
    // plan's collectives, so that verification has a wrong plan to catch.
    int dropAllReduce = 0;
    // Reserve whole-tensor buffers to gather every weight gradient (--verify).
    bool gatherGradients = false;
};

// One rank's part of a training step under a plan. Built from the graph,
// every tensor's stored spec and the mesh: per op the strategy the cost
// model resolves (sharding/strategy.h), the op run on local shards, and the
// collectives of sharding::reshard() around it on the communicator of their
// mesh axis. Forward: an input is resharded once per distinct spec its
// consumers compute on, at the first of them; an output goes from the spec
// the op produces to the stored one. Backward mirrors it: output gradients
// go back to what the op produced, and each tensor's gradient contributions,
// summed per spec, are resharded to its own gradient spec once its last
// consumer has run (a replicated weight used on split data gets its
// all-reduce there). Exactly the collectives cost::evaluatePlan charges.
//
// `plan` carries those collectives; `aux` (a second set of communicators on
// the same ranks) gathers outputs for the objective and tensors for
// verification, so that their traffic stays out of the plan's statistics.
// Both run on RankMesh::collectives(), the buffers and kernels on `device`:
// the same program runs on the CPU backend and on a GPU.
class ShardedProgram final : public StepProgram {
public:
    // Throws TapestryError naming `input` when an op has no kernel or a
    // sharded form the kernels do not cover.
    ShardedProgram(ir::Graph graph, const std::vector<sharding::ShardingSpec> &specs,
                   const sharding::Mesh &mesh, RankMesh &plan, RankMesh &aux, Device &device,
                   ShardedProgramOptions options, const std::string &input);
    ShardedProgram(const ShardedProgram &) = delete;
    ShardedProgram &operator=(const ShardedProgram &) = delete;

    float forward() override;  // the whole step's objective, the same on every rank
    void backward() override;
    void update() override;
    // Waits for the device's queued work (a GPU runs asynchronously).
    void synchronize() override { m_device.synchronize(); }

    Objective objective() const { return m_objective; }
    const ir::Graph &graph() const { return m_graph; }
    // Whole values of the objective's outputs after forward(), readable on
    // the host.
    std::vector<std::pair<std::string, TensorView>> wholeOutputs();
    // Names of the trained parameters; the whole gradient of one, gathered
    // on every rank (a collective: every rank calls it in the same order),
    // readable on the host until the next call.
    std::vector<std::string> parameterNames() const;
    TensorView gatherGradient(const std::string &parameter);

    double flopsPerStep() const override { return m_flops; }  // this rank's matmuls
    // Seconds this rank spent inside op kernels since the last reset, by
    // family: the GEMMs (OpenBLAS, cuBLAS) apart from everything else (norms,
    // softmax, elementwise, layout copies), so that the GEMM rate is
    // measured on the GEMMs alone and the rest is visible to the cost model.
    // `other` includes the few scalar-per-token all-reduces inside the
    // vocab-parallel loss, which the collective statistics count too.
    // The GEMMs of one step (forward and backward), equal shapes merged.
    std::vector<kernels::GemmCall> gemmsPerStep() const;
    KernelTimes kernelTimes() override { return m_device.kernelTimes(); }
    void resetKernelTimes() override { m_device.resetKernelTimes(); }
    std::int64_t tokensPerStep() const override { return m_tokens; }  // the whole job's
    std::int64_t arenaBytes() const { return m_buffers.bytes(); }
    int planAllReduces() const { return m_allReduces; }        // per step

private:
    // One op on this rank's shards, run by the kernels the device has for
    // its registry entry.
    struct OpStep {
        const OpDef *def = nullptr;
        OpAttributes attributes;
        std::vector<Slot> in, out, din, dout, saved, scratch;
        IndexView index;
        // Vocab-parallel ops (Gather's table rows, the loss's classes): where
        // this rank's block starts, the mesh axes splitting it, and (loss)
        // the batch's token count.
        std::int64_t offset = 0;
        std::vector<std::size_t> splitAxes;
        double denominator = 1.0;
        // Filled once the buffers exist (resolve()).
        std::vector<TensorView> inView, outView, dinView, doutView, savedView, scratchView;
        std::vector<Collectives *> split;
        OpKernels kernels;
    };
    struct Action {
        enum class Type { Reshard, Forward, Backward, AddInto };
        Type type;
        std::size_t index = 0;  // into m_steps or m_ops
        Slot src = kNoSlot, dst = kNoSlot;
    };
    struct Parameter {
        std::string name;
        Slot value, grad, m = kNoSlot, v = kNoSlot, whole = kNoSlot;
        std::vector<Action> gather;
    };

    void build(const std::string &input);
    Slot variant(std::size_t tensor, const sharding::ShardingSpec &spec, std::vector<Action> &into);
    IndexView indices(std::size_t tensor, const sharding::ShardingSpec &spec);
    void appendReshard(std::size_t tensor, const sharding::ShardingSpec &from,
                       const sharding::ShardingSpec &to, Slot src, Slot dst, bool aux,
                       std::vector<Action> &into);
    void finalizeGradient(std::size_t tensor, std::vector<Action> &into);
    void initialise();
    void run(const std::vector<Action> &actions);
    void runStep(const ReshardStep &step, bool aux);
    void resolve();
    OpArgs args(const OpStep &op);

    ir::Graph m_graph;
    std::vector<sharding::ShardingSpec> m_specs;
    sharding::Mesh m_mesh;
    std::vector<std::int64_t> m_meshShape;
    RankMesh &m_plan;
    RankMesh &m_aux;
    Device &m_device;
    ShardedProgramOptions m_options;
    Objective m_objective = Objective::Loss;

    BufferTable m_buffers;
    std::map<std::pair<std::size_t, sharding::ShardingSpec>, IndexView> m_indexViews;
    std::vector<Slot> m_values, m_grads;  // per tensor, in the stored spec
    std::map<std::pair<std::size_t, sharding::ShardingSpec>, Slot> m_variants;
    // Per tensor: its gradient contributions in specs other than its own.
    std::vector<std::vector<std::pair<sharding::ShardingSpec, Slot>>> m_contributions;
    std::vector<Slot> m_zeroed;  // gradients and contributions, zeroed before backward
    std::vector<ReshardStep> m_steps;
    std::vector<bool> m_auxStep;  // per step: on the aux communicators
    std::vector<OpStep> m_ops;
    std::vector<Action> m_forward, m_backward, m_objectiveGather, m_seed;
    std::vector<std::size_t> m_objectiveTensors;
    std::vector<Slot> m_wholeObjective;
    std::vector<Parameter> m_parameters;
    std::int64_t m_updates = 0;
    double m_flops = 0.0;
    std::vector<std::vector<float>> m_hostOutputs;  // staging for wholeOutputs() off the host
    std::vector<float> m_hostGradient;              // staging for gatherGradient()
    std::int64_t m_tokens = 0;
    int m_allReduces = 0;
};

} // namespace tapestry::exec
