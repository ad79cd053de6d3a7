#pragma once

#include "cost/plancost.h"
#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "plan/plan.h"
#include "search/segmentcost.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tapestry::analysis {

// One way a tensor could have been stored instead, with the rest of the
// plan kept: what the step would cost more (positive) or less (negative)
// than the plan's own choice, and the collectives that would change.
struct Alternative {
    sharding::ShardingSpec spec;
    bool chosen = false;  // the plan's own spec (all deltas zero)
    double stepTimeDelta = 0;  // s
    double commDelta = 0;      // s
    double computeDelta = 0;   // s, optimizer update included
    std::int64_t memoryDelta = 0;  // bytes per device
    bool fits = true;              // the plan with this spec fits in device memory
    std::vector<cost::CollectiveCost> collectivesAdded;
    std::vector<cost::CollectiveCost> collectivesRemoved;
    // Every tensor whose spec differs from the plan's under this
    // alternative: the tensor itself and what its coarse node derives from
    // it (a bias, the activations inside the node). Applying these to the
    // plan gives the plan the deltas describe.
    std::map<std::string, sharding::ShardingSpec> changes;
    // "Shard(1) (split columns on model): +3.1 ms step (+3.1 ms comm), +0 B memory;
    //  adds all-gather of 96 MB on model"
    std::string summary;
};

// The alternatives of one tensor: the plan's choice first, then every
// other legal spec (per mesh axis replicated or one dim split), cheapest
// step first.
struct Explanation {
    std::string tensor;
    std::string node;  // the coarse node whose ops follow the tensor's spec
    sharding::ShardingSpec chosen;
    std::vector<Alternative> alternatives;
};

// Answers "why this spec and not another" for the tensors of one plan.
// Built once per plan (it validates and costs the plan); each question then
// costs only the ops an alternative changes: the tensor's coarse node is
// propagated again from the tensor (its biases and the activations inside
// it follow, its boundary tensors stay as planned), and cost::evaluateOps
// re-costs the ops that read or write a changed tensor together with every
// other reader of their inputs, so that shared reshards and gradient sums
// come out as the whole-plan cost has them. Memory and the optimizer update
// are re-derived for the whole graph, which is cheap next to costing ops.
class Explainer {
public:
    // Throws TapestryError naming `planInput` when the plan does not fit the
    // graph (plan::planSpecs).
    Explainer(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput = "plan");
    ~Explainer();
    // Its coster refers to the mesh it holds, so an Explainer stays where
    // it was made.
    Explainer(const Explainer &) = delete;
    Explainer &operator=(const Explainer &) = delete;

    // Explains another plan of the same graph on the same mesh with the same
    // cost options, keeping what depends on them alone (the studio, after
    // every edit): `specs` by tensor id as plan::planSpecs gives them and
    // `cost` as cost::evaluatePlan gives it for them. Throws TapestryError
    // for a plan on another mesh or with other cost options.
    void setPlan(const sharding::Mesh &mesh, const cost::CostOptions &options,
                 std::vector<sharding::ShardingSpec> specs, cost::PlanCost cost);
    bool explains(const sharding::Mesh &mesh, const cost::CostOptions &options) const
    {
        return mesh == m_mesh && options == m_options;
    }

    // Throws TapestryError naming the tensor when the model has none of
    // that name.
    Explanation explainTensor(const std::string &tensorName);
    // A coarse node is explained by its largest parameter, or by its first
    // output when it has none.
    Explanation explainNode(passes::NodeId node);

    const passes::CoarseGraph &coarse() const { return m_coarse; }
    const cost::PlanCost &planCost() const { return m_cost; }

private:
    Explanation explain(ir::TensorId tensor);
    Alternative alternative(ir::TensorId tensor, passes::NodeId node, const sharding::ShardingSpec &spec);
    std::int64_t activationBytes(const std::vector<sharding::ShardingSpec> &specs) const;

    const ir::Graph &m_graph;
    sharding::Mesh m_mesh;
    cost::CostOptions m_options;
    passes::CoarseGraph m_coarse;
    std::vector<sharding::ShardingSpec> m_specs;  // the plan's, by tensor id
    std::vector<bool> m_flow;
    std::vector<std::uint8_t> m_roles;  // cost::recomputeRoles()
    std::vector<cost::Recompute> m_modes;  // cost::recomputeModes()
    std::vector<double> m_parameterShares;  // cost::parameterShares()
    std::vector<std::size_t> m_position;  // of each op in topological order
    cost::PlanCost m_cost;
    // Propagates a coarse node again from a changed tensor.
    std::unique_ptr<search::SegmentCoster> m_coster;
};

} // namespace tapestry::analysis
