#pragma once

#include "cost/activationmemory.h"
#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"
#include "sharding/strategy.h"

#include <vector>

namespace tapestry::cost {

// Costs one training step of `graph` with every tensor stored as `specs`
// says (indexed by tensor id; legal specs, see ShardingSpec::problem), by
// the rules of cost/chargerules.h, which every costing path shares.
//
// Forward, in topological order: each op's strategy (sharding/strategy.h);
// a tensor resharded for its consumers once per distinct spec they need
// (charged to the first such consumer); the op's internal collectives; its
// outputs resharded from the spec it produces to the stored one. Backward,
// for ops on the path from a parameter: output gradients resharded back to
// what the op needs, internal collectives, and per tensor the gradient
// contributions of its consumers summed per spec and resharded to the
// tensor's gradient spec (a replicated weight used on split data gets the
// data-parallel all-reduce here). Compute: local FLOPs / (peak x achievable
// fraction), backward from the rule's factor (2x for contractions).
// Optimizer: Adam's update of the local parameter shards. Memory: parameter,
// gradient and optimizer shards plus activations (activationmemory.h).
PlanCost evaluatePlan(const ir::Graph &graph, const sharding::Mesh &mesh,
                      const std::vector<sharding::ShardingSpec> &specs, const CostOptions &options = {});

// Which tensors carry a gradient in the backward pass (indexed by tensor
// id): float parameters and what is computed from them through data inputs.
// It depends on the graph alone, so searches compute it once.
std::vector<bool> gradientFlow(const ir::Graph &graph);

// What evaluatePlan charges to `ops` alone (some of the graph's ops in
// topological order, `strategies[i]` resolved for `ops[i]` from `specs`):
// compute, collectives and their breakdowns; no optimizer and no memory.
// Work is proportional to the ops given, not to the graph, and a graph cut
// into parts whose tensors have all their consumers in one part costs the
// sum of its parts -- which is what lets a search cost one instance of a
// repeated layer and multiply. stepTime is compute + comm.
//
// `recomputation` charges what the backward pass runs again (none when it
// names no roles): the recomputed forward compute and collectives of each
// op, as evaluatePlan charges them.
struct Recomputation {
    const std::vector<std::uint8_t> *roles = nullptr;  // recomputeRoles() of the graph
    const std::vector<Recompute> *modes = nullptr;     // recomputeModes() of the graph
    bool flashAttention = false;
};
// `techniques`, where given: ZeRO's weight gradients listed as the plan
// lists them (zeroGradientHalves), their gathers in the pass it puts them in
// (evaluateOpsTotals too).
PlanCost evaluateOps(const ir::Graph &graph, const sharding::Mesh &mesh,
                     const std::vector<sharding::ShardingSpec> &specs, const std::vector<ir::OpId> &ops,
                     const std::vector<sharding::OpStrategy> &strategies, const std::vector<bool> &flow,
                     const Recomputation &recomputation = {}, const Techniques *techniques = nullptr);

// evaluateOps' compute and communication totals alone. Searches cost
// hundreds of thousands of candidates and keep only these, so this path
// builds no breakdowns (no maps keyed by op or collective name); it charges
// exactly the same collectives and FLOPs.
struct OpsTotals {
    double compute = 0;  // s
    double comm = 0;     // s
    // Their backward-pass parts (recomputed forward work included), which
    // CostOptions::overlap runs side by side (cost::stepSeconds).
    double backwardCompute = 0;  // s
    double backwardComm = 0;     // s
};
OpsTotals evaluateOpsTotals(const ir::Graph &graph, const sharding::Mesh &mesh,
                            const std::vector<sharding::ShardingSpec> &specs, const std::vector<ir::OpId> &ops,
                            const std::vector<sharding::OpStrategy> &strategies, const std::vector<bool> &flow,
                            const Recomputation &recomputation = {},
                            const Techniques *techniques = nullptr);

} // namespace tapestry::cost
