#pragma once

#include "cost/activationmemory.h"
#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/reshard.h"
#include "sharding/shardingspec.h"
#include "sharding/strategy.h"

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace tapestry::cost {

// The rules that charge one training step, in one place. Whole-plan costing
// (PlanCoster, evaluatePlan), evaluateOps, the searches' segment costing
// (search/segmentcost) and the explainer all charge through these
// functions; they differ only in what they remember between calls. A new
// kind of charge (recomputation, ZeRO's collectives) is added here.
//
// A step is charged as:
// - per op: by the roofline, its local FLOPs at the device's achievable
//   peak (a GEMM's at the device's efficiency for its calls' size) or the
//   bytes it reads and writes at the device's memory
//   bandwidth, whichever is longer, plus a kernel launch; forward always
//   and backward when a gradient flows through it (opCompute);
// - per op: its internal collectives, and its outputs resharded from the
//   spec it computes to the stored one, forward; and back for their
//   gradients (chargeOp);
// - per tensor: resharded once per distinct spec its readers compute on,
//   charged to the first of them (chargeRead); its gradient contributions
//   summed per distinct spec and resharded to its gradient spec, charged to
//   the first reader producing each (chargeGradientSum);
// - per parameter: the optimizer's update of its local shard, and its model
//   states in memory (chargeParameters);
// - phases summed into a step, with backward overlap (stepSeconds);
// - memory: model states per parameter (chargeParameters); the activations
//   in cost/activationmemory.h.

// Seconds to compute `flops` of `type` on one device: at the achievable
// peak, or for a GEMM whose calls are of `gemmCallFlops` at the device's
// GEMM efficiency for that size (DeviceProfile::gemmFraction).
double computeSeconds(double flops, ir::DType type, const sharding::Mesh &mesh, double gemmCallFlops = 0);
// One kernel by the roofline: its FLOPs as computeSeconds() charges them or
// its bytes at the device's bandwidth for its `family` of kernels
// (DeviceProfile::bandwidthOf), whichever takes longer (FLOPs alone where
// the profile gives no bandwidth).
double kernelSeconds(double flops, double bytes, ir::DType type, const sharding::Mesh &mesh,
                     double gemmCallFlops = 0, std::string_view family = {});

// Whether a gradient flows through `op`: one of its data inputs carries one
// (`flow` by tensor id, see gradientFlow()).
bool gradientFlows(const ir::Op &op, const sharding::OpStrategy &s, const std::vector<bool> &flow);

// What an op computes, forward and (when a gradient flows) backward; the
// backward pass includes the forward compute it runs again
// (`recomputed.compute` times, see recomputedForward()).
struct OpCompute {
    bool flows = false;  // a gradient flows through the op: it has a backward pass
    double forwardFlops = 0;
    double forward = 0;  // s
    double backwardFlops = 0;
    double backward = 0;  // s
};
OpCompute opCompute(const sharding::OpStrategy &s, bool flows, const sharding::Mesh &mesh,
                    const Recomputed &recomputed = {});

// Reasons the gradient reshards carry, before the reshard's own.
inline constexpr std::string_view kGradientReason = "gradient: ";
inline constexpr std::string_view kWeightGradientReason = "weight gradient: ";

// What `op` is charged on its own, in step order. `stored(o)` is the spec
// output o is stored as; `sink` is called as
//   sink.collective(Phase, const sharding::Collective &)       internal ones
//   sink.reshard(Phase, ir::TensorId, from, to, reasonPrefix)  a tensor moved
// Forward: internal collectives, then each output from what the op computes
// to how it is stored. Backward, when a gradient flows: each float output's
// gradient from its stored gradient spec back to the one the op computes,
// then the internal backward collectives.
template <class Stored, class Sink>
void chargeOp(const ir::Graph &graph, const ir::Op &op, const sharding::OpStrategy &s, bool flows, Stored &&stored,
              Sink &&sink)
{
    for (const auto &c : s.internalForward)
        sink.collective(Phase::Forward, c);
    for (std::size_t o = 0; o < op.outputs.size(); ++o)
        sink.reshard(Phase::Forward, op.outputs[o], s.outputs[o], stored(o), std::string_view());
    if (!flows)
        return;
    for (std::size_t o = 0; o < op.outputs.size(); ++o)
        if (sharding::isFloat(graph.tensor(op.outputs[o]).dtype))
            sink.reshard(Phase::Backward, op.outputs[o], sharding::gradientSpec(stored(o)),
                         sharding::gradientSpec(s.outputs[o]), kGradientReason);
    for (const auto &c : s.internalBackward)
        sink.collective(Phase::Backward, c);
}

// Whether input `slot` of an op with strategy `s` is read as data (and so
// resharded to what the op computes on, and given a gradient).
inline bool readsData(const sharding::OpStrategy &s, std::size_t slot) { return s.dataInputs[slot]; }

// Tensor `t`, stored as `stored`, resharded to `need` for a reader that
// computes on it so (once per distinct need, by the first such reader).
template <class Sink>
void chargeRead(ir::TensorId t, const sharding::ShardingSpec &stored, const sharding::ShardingSpec &need, Sink &&sink)
{
    sink.reshard(Phase::Forward, t, stored, need, std::string_view());
}

// The gradient contributions of tensor `t` that come in spec `contribution`,
// summed and resharded to the tensor's gradient spec (once per distinct
// contribution, by the first reader producing it).
template <class Sink>
void chargeGradientSum(const ir::Graph &graph, ir::TensorId t, const sharding::ShardingSpec &contribution,
                       const sharding::ShardingSpec &stored, Sink &&sink)
{
    sink.reshard(Phase::Backward, t, contribution, sharding::gradientSpec(stored),
                 graph.tensor(t).role == ir::Role::Parameter ? kWeightGradientReason : kGradientReason);
}

// A reshard's collectives costed on their axes, each charged to `op`, with
// `reasonPrefix` before the reshard's reason.
void appendReshard(std::vector<CollectiveCost> &out, const ir::Tensor &tensor, const sharding::ShardingSpec &from,
                   const sharding::ShardingSpec &to, Phase phase, std::string_view reasonPrefix,
                   const std::string &op, const sharding::Mesh &mesh);
// The time of a reshard's collectives alone (no allocation).
double reshardSeconds(const ir::Tensor &tensor, const sharding::ShardingSpec &from, const sharding::ShardingSpec &to,
                      const sharding::Mesh &mesh);
// The time of one collective on its axis.
double collectiveSeconds(const sharding::Collective &c, const sharding::Mesh &mesh);

// The per-parameter charges of a step: what every parameter costs for
// being a parameter, apart from the ops that read it: Adam's update of its
// local elements, its model states (parameter, gradient, optimizer state)
// in memory, and ZeRO's collectives. Every costing path (PlanCoster, the
// search's SegmentCoster, the explainer) sums loads and charges them here.
//
// ZeRO shards a parameter's states over the mesh axes it is replicated on
// (its degree d, the product of their sizes; 1 when it is split on every
// axis): stage 1 the optimizer state, 2 the gradient too, 3 the parameter
// too, each to 1/d. Stages 1 and 2 reduce-scatter the gradient and all-
// gather the updated parameter where stage 0 all-reduces it: the same time
// (a ring all-reduce is a reduce-scatter and an all-gather), so no charge
// here (zeroGradientHalves lists the all-reduce so, the gather in the
// forward pass).
// With m micro-batches stage 2 reduce-scatters the gradient of each
// (m - 1 more), and stage 3 gathers the parameter for each micro-batch's
// forward and backward pass (2m - 1 more all-gathers, m - 1 more
// reduce-scatters).
//
// The charges are linear in the load, so a search may charge a plan's
// parameters one at a time or summed at once.
struct ParameterLoad {
    double localElements = 0;  // per device
    double zeroElements = 0;   // per device once ZeRO shards them: localElements / d
    // ZeRO-3: what one layer's parameters take gathered beyond their
    // shards while the layer computes, this parameter's share of it
    // ((localElements - zeroElements) x its layer share, parameterShares).
    double gatheredElements = 0;
    double gatherSeconds = 0;   // one all-gather of the 16-bit parameter over its replicated axes
    double scatterSeconds = 0;  // one reduce-scatter of its gradient over them
    double gatherWireBytes = 0, scatterWireBytes = 0;
    double gatherCalls = 0, scatterCalls = 0;  // collectives of one gather (one per axis)
    ParameterLoad &operator+=(const ParameterLoad &o);
    friend ParameterLoad operator-(ParameterLoad a, const ParameterLoad &b);
};
// One parameter stored in `spec`.
// `layerShare`: the parameter's cost::parameterShares() entry.
ParameterLoad parameterLoad(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                            const sharding::Mesh &mesh, const CostOptions &options, double layerShare = 0);

// ZeRO's degree for a parameter stored in `spec`: the product of the sizes
// of the mesh axes it is replicated on (of those in techniques.zeroAxes,
// where set).
std::int64_t zeroDegree(const sharding::ShardingSpec &spec, const sharding::Mesh &mesh, const Techniques &techniques);

// The collectives ZeRO adds for one parameter (see ParameterLoad), in step
// order: the gathers before each micro-batch's forward pass, then before
// each backward pass but the last, and the reduce-scatters of each
// micro-batch's gradient but the last, one per replicated axis. `op` is
// the op they are charged to (the parameter's first reader).
std::vector<CollectiveCost> zeroCollectives(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                                            const sharding::Mesh &mesh, const CostOptions &options,
                                            const std::string &op);
// The same collectives' kind, phase, wire bytes and time, in that order,
// as costCollective() gives them, without naming them (no op, tensor,
// axis or reason): for sums that keep no breakdown (PlanCoster::totals).
using CollectiveTimeVisit =
    std::function<void(sharding::CollectiveKind kind, Phase phase, std::int64_t wireBytes, double time)>;
void zeroCollectiveTimes(const ir::Tensor &parameter, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh,
                         const CostOptions &options, const CollectiveTimeVisit &visit);

// ZeRO shards a parameter's gradient over the axes it shards it on, as
// FSDP, DeepSpeed and Megatron's distributed optimizer run the step: the
// all-reduce of a weight gradient over such an axis is the gradient's
// reduce-scatter and a gather of the parameter, the two halves of a ring
// all-reduce. Stage 3 gathers the parameter again for the backward pass
// (its forward copy released), in the backward pass; stages 1 and 2 gather
// the updated parameter for the next forward pass (FSDP's fully_shard
// without resharding after forward), in the forward pass. They are listed
// so, in its place, each with half its time and wire bytes. `parameter`
// stored as `stored`; nullopt for any other collective, kept as it is.
std::optional<std::array<CollectiveCost, 2>> zeroGradientHalves(const CollectiveCost &c, const ir::Tensor &parameter,
                                                                 const sharding::ShardingSpec &stored,
                                                                 const sharding::Mesh &mesh,
                                                                 const Techniques &techniques);
// Of a weight gradient's reshard `from` -> `to`, the seconds zeroGradientHalves
// moves to the forward pass (stages 1 and 2): what a coster charging the
// reshard as one time counts as forward, not backward, communication.
double zeroForwardSeconds(const ir::Tensor &parameter, const sharding::ShardingSpec &from,
                          const sharding::ShardingSpec &to, const sharding::ShardingSpec &stored,
                          const sharding::Mesh &mesh, const Techniques &techniques);

struct ParameterCharge {
    CostTotals optimizer;       // the update: its FLOPs and seconds (the optimizer phase)
    CostTotals zero;            // ZeRO's collectives (comm, commBytes, collectives)
    double zeroBackward = 0;    // of zero.comm, the seconds in the backward pass (the rest: forward)
    MemoryCost memory;          // parameter, gradient and optimizer-state bytes, each rounded (a plan's breakdown)
    double unroundedBytes = 0;  // their sum
    std::int64_t bytes = 0;     // their sum rounded once (a segment's or a choice's memory)
    double seconds() const { return optimizer.total() + zero.comm; }
};
ParameterCharge chargeParameters(const ParameterLoad &load, const sharding::Mesh &mesh, const CostOptions &options);

// A step from its phases: compute + communication (the step's totals, as
// the caller sums them), or with overlap, forward + the larger of backward
// compute and communication + the optimizer.
double stepSeconds(double compute, double comm, const CostTotals &forward, const CostTotals &backward,
                   const CostTotals &optimizer, const CostOptions &options);

} // namespace tapestry::cost
