#include "search/pinnedplan.h"

#include "cost/objective.h"
#include "ir/error.h"

namespace tapestry::search {

bool keepPinnedPlanIfBetter(SearchResult &result, const plan::Plan &pinned, const ir::Graph &graph,
                            const std::string &pinnedInput)
{
    const sharding::Mesh &mesh = result.plan.mesh;
    if (pinned.mesh.axes.size() != mesh.axes.size())
        return false;
    for (std::size_t a = 0; a < mesh.axes.size(); ++a)
        if (pinned.mesh.axes[a].size != mesh.axes[a].size)
            return false;
    plan::Plan candidate = pinned;
    candidate.mesh = mesh;
    candidate.costOptions = result.plan.costOptions;
    try {
        plan::recostPlan(candidate, graph, pinnedInput);
    } catch (const TapestryError &) {
        return false;
    }
    if (!(cost::Objective::of(candidate.cost) < cost::Objective::of(result.plan.cost)))
        return false;
    candidate.searchWarnings.push_back(result.stats.algorithm + ": no plan around the pins beats the pinned plan (" +
                                       pinnedInput + "), which is kept as it is");
    result.plan = std::move(candidate);
    return true;
}

} // namespace tapestry::search
