#pragma once

#include "ir/graph.h"
#include "passes/subgraphclasses.h"
#include "plan/plan.h"
#include "sharding/propagation.h"
#include "sharding/shardingspec.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tapestry::analysis {

// One choice of a subgraph class' weights, costed as tap costs it: on the
// representative instance, with the rest of the plan as it is (the specs of
// the tensors the class reads and writes held), times the instance count.
struct ClassCandidate {
    // The representative's weights and their specs, in the class' order.
    std::vector<std::pair<std::string, sharding::ShardingSpec>> weights;
    double time = 0;             // s per step, all instances: compute + communication + optimizer
    double compute = 0;          // s
    double comm = 0;             // s
    std::int64_t memory = 0;     // bytes per device, all instances
    std::int64_t planMemory = 0; // bytes per device of the whole plan with this choice
    bool fits = true;            // planMemory within the device's capacity
    bool chosen = false;         // the plan's present choice
    bool perBlock = false;       // costed block by block, the tensors between blocks held
    // How the class stores its partial sums under this choice: the plan's
    // way for the chosen one, the faster way for the others.
    sharding::PartialResolution partials = sharding::PartialResolution::Replicate;
};

struct ClassCandidates {
    std::vector<ClassCandidate> candidates;  // fastest first; the chosen one always among them
    std::size_t enumerated = 0;              // choices costed (more than listed when cut at `limit`)
    bool perBlock = false;                   // too many combinations: each block enumerated alone,
                                             // the other blocks' weights held as the plan has them
};

// Enumerates every choice of class `classIndex`'s weights (per mesh axis
// replicated or one dim split) and ranks them by step time. When the
// combinations of all its weights exceed `maxCombinations`, each block of
// the class (cut at the residual stream, as tap searches it) is enumerated
// alone; a block of more than ten times `maxCombinations` is an error. At
// most `limit` candidates are returned.
ClassCandidates classCandidates(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                                const plan::Plan &plan, std::size_t classIndex, std::size_t limit = 200,
                                std::int64_t maxCombinations = 20000);

// The plan with `candidate` applied to every instance of its class: the
// weights pinned (override), the class' other tensors as the choice
// propagates them, costed again.
plan::Plan applyCandidate(const ir::Graph &graph, const passes::SubgraphClasses &classes, const plan::Plan &plan,
                          std::size_t classIndex, const ClassCandidate &candidate);

// For instance `instance` of class `classIndex`: the tensor that plays the
// part of each representative tensor, matched op by op (instances are
// structurally identical).
std::map<ir::TensorId, ir::TensorId> counterparts(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                                                  std::size_t classIndex, std::size_t instance);

} // namespace tapestry::analysis
