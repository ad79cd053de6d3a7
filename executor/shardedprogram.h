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

#include "cost/costoptions.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tapestry::exec {

class Watchdog;

struct ShardedProgramOptions {
    InterpreterOptions training;  // seed, optimizer, learning rate: as the reference's
    // Test aid: skip the N-th all-reduce (1-based, in step order) of the
    // plan's collectives, so that verification has a wrong plan to catch.
    int dropAllReduce = 0;
    // Reserve whole-tensor buffers to gather every weight gradient (--verify).
    bool gatherGradients = false;
    // The plan's memory techniques. With micro-batches the program's graph
    // is one micro-batch's (the model bound to batch / microBatches): every
    // input whose dim 0 is the batch holds the rows of micro-batch k of the
    // whole batch in turn, and the loss is averaged over the whole batch.
    cost::Techniques techniques;
    // Per tensor of the graph: its dim 0 is the batch, cut into the
    // micro-batches (empty: none is).
    std::vector<bool> microBatched;
    // Told which tensor or op the rank works on, for the message of a stall (may be null).
    Watchdog *watchdog = nullptr;
};

// Bytes one rank holds, as laid out in its arena (BufferTable): the model
// states (parameters, their gradients, optimizer state) as the ZeRO stage
// leaves them on the rank, and the arena's whole size, which adds the
// activations kept for the backward pass and every other buffer live at the
// step's peak (activation gradients, collective staging, ZeRO-3's gathered
// parameters). `liveBytes` is the largest sum of the buffers live at once,
// which the arena reaches unless its layout leaves gaps.
struct MemoryHeld {
    std::int64_t parameters = 0, gradients = 0, optimizer = 0;
    std::int64_t arena = 0, liveBytes = 0;
    std::int64_t indices = 0;  // token ids and labels, outside the arena
    std::int64_t peak() const { return arena + indices; }
    std::int64_t modelStates() const { return parameters + gradients + optimizer; }
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
//
// The memory techniques of the plan (ShardedProgramOptions::techniques):
// - micro-batches: forward() runs micro-batches 1..m-1 forward and backward
//   and the last one's forward, backward() the last one's backward; the
//   parameters' gradients accumulate over them, and are synchronised once
//   per step (ZeRO 2 and 3: once per micro-batch, as soon as each is
//   complete). One update per step.
// - ZeRO 1-3: each trained parameter's local shard, flattened (padded to a
//   multiple of the degree), is cut over the mesh axes its spec replicates
//   it on (cost::zeroDegree). The gradient is reduce-scattered to this
//   rank's piece on those axes' communicators where it is a pending sum
//   there, sliced where it is not; the optimizer updates that piece. Stage 1
//   keeps the whole local gradient until the step's synchronisation, 2
//   only the piece (the whole one lives from its first contribution to its
//   reduce-scatter), and both all-gather the updated parameter. Stage 3
//   stores only the piece of the parameter, and all-gathers it before its
//   first reader in the forward pass and again in the backward pass.
// - recomputation: full keeps each transformer layer's ops' outputs only
//   through the forward pass and runs the layer's forward again (its input
//   reshards and collectives too) just before its backward pass; selective,
//   and flash attention, do so for the attention core's scores and softmax
//   (cost::recomputeRoles), before the backward pass of its context MatMul.
//   Flash attention runs as that recomputation with the same kernels: no
//   s x s tensor is kept, nothing is fused.
// Buffers share memory where their lifetimes allow (BufferTable), so what
// is not kept is really given back. Two layouts hold less than the graph
// says and issue the same collectives: an activation gradient whose one
// contribution only needs its pending sums made whole is all-reduced in
// place; a transpose of a parameter that only MatMuls read (a tied LM head
// reading the embedding) is left out, the MatMuls reading the parameter in
// place (transB) and giving its gradient in its own layout.
class ShardedProgram final : public StepProgram {
public:
    // Throws TapestryError naming `input` when an op has no kernel or a
    // sharded form the kernels do not cover.
    ShardedProgram(ir::Graph graph, const std::vector<sharding::ShardingSpec> &specs,
                   const sharding::Mesh &mesh, RankMesh &plan, RankMesh &aux, Device &device,
                   ShardedProgramOptions options, const std::string &input);
    ShardedProgram(const ShardedProgram &) = delete;
    ShardedProgram &operator=(const ShardedProgram &) = delete;
    // With TAPESTRY_PROFILE_KERNELS set, prints the time each op kind took
    // (forward and backward apart, every step together) to stderr.
    ~ShardedProgram() override;

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
    // The whole value of one, the same way (after an update: ZeRO's pieces
    // updated and gathered).
    TensorView gatherParameter(const std::string &parameter);

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
    MemoryHeld memoryHeld() const { return m_memory; }
    int planAllReduces() const { return m_allReduces; }        // per step, micro-batches and recomputation aside

private:
    // One op on this rank's shards, run by the kernels the device has for
    // its registry entry.
    struct OpStep {
        const OpDef *def = nullptr;
        OpAttributes attributes;
        std::vector<Slot> in, out, din, dout, saved, scratch;
        std::vector<IndexView> index;  // per micro-batch; empty without an integer input
        BackwardReads reads = BackwardReads::Inputs;
        KernelKind kind = KernelKind::Other;
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
        enum class Type { Reshard, Forward, Backward, AddInto, Fill, Scale, Update };
        Type type;
        std::size_t index = 0;  // into m_steps, m_ops or m_parameters
        Slot src = kNoSlot, dst = kNoSlot;
        float value = 0.0f;     // Fill, Scale
        std::int32_t op = -1;   // the graph op it was built for (recomputation), or −1
    };
    struct Parameter {
        std::string name;
        std::size_t tensor = 0;
        // The local value in the parameter's spec (an alias of `flat` under
        // ZeRO), and what the optimizer updates: that value, or this rank's
        // ZeRO piece `shard` of it with the gradient's piece `grad`.
        Slot value = kNoSlot, grad = kNoSlot, m = kNoSlot, v = kNoSlot, whole = kNoSlot;
        std::vector<Action> gather, valueGather;  // the whole gradient and value, for verification
        std::int64_t degree = 1;     // ZeRO's; 1: not sharded
        Slot flat = kNoSlot, shard = kNoSlot, gradFlat = kNoSlot;
        std::vector<Action> gatherShards;  // ZeRO-3: the pieces all-gathered into `flat`
        std::vector<Action> initialShard;  // ZeRO-3: this rank's piece cut from `flat` once initialised
        std::vector<Action> sync;          // the gradient's synchronisation
    };

    void build(const std::string &input);
    void buildParameters(const std::vector<bool> &gradWritten);
    void buildRecomputation();
    void placeParameterCollectives();
    void placeZeroFills();
    void layOut();
    // Calls f(slot, access) for each slot `a` touches.
    template <class F> void forEachAccess(const Action &a, F f) const;
    sharding::ShardingSpec zeroSpec(const Parameter &p, const sharding::ShardingSpec &from, bool shard) const;
    Slot variant(std::size_t tensor, const sharding::ShardingSpec &spec, std::vector<Action> &into);
    std::vector<IndexView> indices(std::size_t tensor, const sharding::ShardingSpec &spec);
    // `tensor`: the graph tensor the steps move (or a piece of, under ZeRO).
    void appendReshard(std::size_t tensor, const ir::Shape &full, const sharding::ShardingSpec &from,
                       const sharding::ShardingSpec &to, Slot src, Slot dst, bool aux,
                       std::vector<Action> &into);
    void finalizeGradient(std::size_t tensor, std::vector<Action> &into);
    // An activation's gradient once its consumers have run. Where its one
    // contribution only needs its pending sums made whole (all-reduces), they
    // run in place and the gradient is that buffer: no landing buffer, no
    // second copy.
    void finalizeActivationGradient(std::size_t tensor, std::vector<Action> &into);
    void initialise();
    void run(const std::vector<Action> &actions);
    void runStep(const ReshardStep &step, bool aux);
    void runMicroBatchForward();
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
    // TAPESTRY_PROFILE_KERNELS: the device is synchronised around every op
    // kernel and reshard, and the host time summed by kind (calls, seconds).
    bool m_profileKernels = false;
    std::map<std::string, std::pair<std::int64_t, double>> m_kernelProfile;
    Objective m_objective = Objective::Loss;

    BufferTable m_buffers;
    std::map<std::pair<std::size_t, sharding::ShardingSpec>, std::vector<IndexView>> m_indexViews;
    std::vector<Slot> m_values, m_grads;  // per tensor, in the stored spec
    std::map<std::pair<std::size_t, sharding::ShardingSpec>, Slot> m_variants;
    // Per tensor: its gradient contributions in specs other than its own.
    std::vector<std::vector<std::pair<sharding::ShardingSpec, Slot>>> m_contributions;
    std::vector<Slot> m_zeroed;  // gradients and contributions, zeroed before their first use in backward
    std::vector<bool> m_gradWritten;  // per tensor: some op writes its gradient in its own spec
    std::vector<ReshardStep> m_steps;
    std::vector<bool> m_auxStep;  // per step: on the aux communicators
    std::vector<std::size_t> m_stepTensor;  // per step: the graph tensor it moves
    std::vector<OpStep> m_ops;
    std::vector<Action> m_forward, m_backward, m_objectiveGather, m_seed;
    std::vector<Action> m_stepStart, m_sync, m_update;
    std::vector<std::vector<Action>> m_loadInputs;  // per micro-batch
    std::vector<std::pair<std::size_t, std::vector<Slot>>> m_microInputs;  // float input, its rows per micro-batch
    std::vector<std::uint8_t> m_roles;  // cost::recomputeRoles
    std::int32_t m_building = -1;       // the op whose actions build() appends
    int m_microBatches = 1, m_micro = 0;
    MemoryHeld m_memory;
    std::vector<ir::Shape> m_wholeShapes;  // the objective's outputs over the whole batch
    std::vector<std::size_t> m_objectiveTensors;
    std::vector<Slot> m_wholeObjective;
    std::vector<Parameter> m_parameters;
    std::int64_t m_updates = 0;
    double m_flops = 0.0;
    std::vector<std::vector<float>> m_hostOutputs;  // the objective's outputs over the whole batch, on the host
    std::vector<float> m_staging;
    std::vector<float> m_hostGradient;              // staging for gatherGradient()
    std::int64_t m_tokens = 0;
    int m_allReduces = 0;
};

} // namespace tapestry::exec
