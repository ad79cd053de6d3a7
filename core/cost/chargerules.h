#pragma once

#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/reshard.h"
#include "sharding/shardingspec.h"
#include "sharding/strategy.h"

#include <cstdint>
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
// - per op: its local FLOPs at the device's achievable peak, forward always
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

// Seconds to compute `flops` of `type` on one device.
double computeSeconds(double flops, ir::DType type, const sharding::Mesh &mesh);

// Whether a gradient flows through `op`: one of its data inputs carries one
// (`flow` by tensor id, see gradientFlow()).
bool gradientFlows(const ir::Op &op, const sharding::OpStrategy &s, const std::vector<bool> &flow);

// What an op computes, forward and (when a gradient flows) backward.
struct OpCompute {
    bool flows = false;  // a gradient flows through the op: it has a backward pass
    double forwardFlops = 0;
    double forward = 0;  // s
    double backwardFlops = 0;
    double backward = 0;  // s
};
OpCompute opCompute(const sharding::OpStrategy &s, bool flows, const sharding::Mesh &mesh);

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
// being a parameter, apart from the ops that read it. Today: Adam's update
// of its local elements and its model states (parameter, gradient,
// optimizer state) in memory. A new per-parameter charge (ZeRO's gather of
// parameter shards, its reduce-scatter of gradients) is a field of the load
// and a term of chargeParameters: every costing path (PlanCoster, the
// search's SegmentCoster, the explainer) sums loads and charges them here.
//
// The charges are linear in the load, so a search may charge a plan's
// parameters one at a time (as rates per element) or summed at once.
struct ParameterLoad {
    double localElements = 0;  // per device
    ParameterLoad &operator+=(const ParameterLoad &o)
    {
        localElements += o.localElements;
        return *this;
    }
    friend ParameterLoad operator-(ParameterLoad a, const ParameterLoad &b)
    {
        a.localElements -= b.localElements;
        return a;
    }
};
// One parameter stored in `spec`.
ParameterLoad parameterLoad(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                            const sharding::Mesh &mesh);

struct ParameterCharge {
    CostTotals optimizer;       // the update: its FLOPs and seconds (the optimizer phase)
    MemoryCost memory;          // parameter, gradient and optimizer-state bytes, each rounded (a plan's breakdown)
    double unroundedBytes = 0;  // their sum
    std::int64_t bytes = 0;     // their sum rounded once (a segment's or a choice's memory)
    double seconds() const { return optimizer.total(); }
};
ParameterCharge chargeParameters(const ParameterLoad &load, const sharding::Mesh &mesh, const CostOptions &options);

// A step from its phases: compute + communication (the step's totals, as
// the caller sums them), or with overlap, forward + the larger of backward
// compute and communication + the optimizer.
double stepSeconds(double compute, double comm, const CostTotals &forward, const CostTotals &backward,
                   const CostTotals &optimizer, const CostOptions &options);

} // namespace tapestry::cost
