#pragma once

#include "plan/plan.h"

#include <cstddef>
#include <string>
#include <vector>

namespace tapestry::search {

struct SearchStats {
    std::string algorithm;           // "tap", "exact"
    double seconds = 0;              // the search alone, model loading and pruning excluded
    std::size_t plansEvaluated = 0;  // segment (tap) or strategy (exact) costings
    std::size_t classes = 0;         // unique subgraph classes searched
    std::size_t segments = 0;        // blocks searched (tap) or coarse nodes (exact)
    // tap: the most states (specs of the tensors live between two ops) the
    // per-op search of one block held at once; the search's work and
    // memory grow with it.
    std::size_t peakStates = 0;
    // The searches run, one per setting of the memory techniques tried
    // (searchTechniques); 1 when the techniques were given.
    std::size_t techniquesTried = 1;
    // Memory may have kept the search from its fastest plan: false only
    // when the plan is the fastest of the search's space memory aside
    // (tap says so when it can tell; exact never does).
    bool memoryBound = true;
    bool optimal = true;             // exact: false when the time limit stopped the solver
    // tap: every combination of the classes' boundary layouts was tried;
    // false: too many, so they were improved one class at a time.
    bool layoutsExhaustive = true;
    // tap: the classes whose copies the plan splits between two plans
    // (memory binds, or the user pinned some copies), one line each:
    // "class of model/layers.0 (3 copies): model/layers.2 apart from the
    // other 2".
    std::vector<std::string> copiesApart;
};

// What a search returns: the plan of least step time among those that fit
// in device memory (the least-memory plan, with a warning, when none fits),
// and the plan that communicates least among those that fit, as TAP's paper
// reports both.
struct SearchResult {
    plan::Plan plan;
    plan::Plan leastCommunication;
    SearchStats stats;
    // Where the search returned ranked plans (SearchOptions::rankedPlans):
    // each plan's specs by tensor id, for plan::completePlan; else empty.
    std::vector<sharding::ShardingSpec> planSpecs;
    std::vector<sharding::ShardingSpec> leastCommunicationSpecs;
};

} // namespace tapestry::search
