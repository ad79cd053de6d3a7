#pragma once

#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tapestry::analysis {

// A tensor stored differently by two plans.
struct SpecChange {
    std::string tensor;
    sharding::ShardingSpec a;
    sharding::ShardingSpec b;
};

// One group's cost in both plans (a subgraph class, a collective kind).
struct GroupDelta {
    cost::CostTotals a;
    cost::CostTotals b;
    double delta() const { return b.total() - a.total(); }
};

// Where two plans of one model differ and what it costs: deltas are b - a.
struct PlanDiff {
    std::vector<SpecChange> specs;  // by tensor name
    double stepTimeA = 0, stepTimeB = 0;
    double stepTimeDelta = 0;  // s
    double commDelta = 0;      // s
    double computeDelta = 0;   // s
    std::int64_t memoryDelta = 0;  // bytes per device
    // Compute and communication per subgraph class ("transformer/h.0 x12",
    // ops outside classes as "(outside classes)") and per collective kind.
    std::map<std::string, GroupDelta> byClass;
    std::map<std::string, GroupDelta> byCollective;
    // The memory techniques of each plan (cost::Techniques).
    cost::Techniques techniquesA, techniquesB;

    bool identical() const { return specs.empty() && techniquesA == techniquesB; }
};

// Throws TapestryError naming `inputB` when the plans were made for
// different models (fingerprints): cheap, so callers check before loading
// the model.
void checkSameModel(const plan::Plan &a, const plan::Plan &b, const std::string &inputA, const std::string &inputB);

// Both plans are validated against `graph` and costed again on their own
// meshes, so that hand-edited files compare by what they say. Throws
// TapestryError as checkSameModel does, or naming the plan and tensor when
// one does not fit the graph.
PlanDiff diffPlans(const ir::Graph &graph, const plan::Plan &a, const plan::Plan &b,
                   const std::string &inputA = "a", const std::string &inputB = "b");

} // namespace tapestry::analysis
