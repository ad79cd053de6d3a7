#include "analysis/collectivetransition.h"

namespace tapestry::analysis {

std::optional<CollectiveTransition> collectiveTransition(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                         const std::vector<sharding::ShardingSpec> &specs,
                                                         const cost::CollectiveCost &collective)
{
    using sharding::Placement;
    const auto axis = mesh.axisIndex(collective.axis);
    const auto tensor = graph.findTensor(collective.tensor);
    if (!axis || !tensor || tensor->index() >= specs.size())
        return std::nullopt;
    const auto a = static_cast<std::size_t>(*axis);
    const sharding::ShardingSpec &planned = specs[tensor->index()];
    if (planned.placements.size() != mesh.axes.size())
        return std::nullopt;
    // The dim the tensor is split on along the axis; a collective that
    // leaves it whole on the axis is drawn on its first dim.
    int dim = planned.placements[a].isShard() ? planned.placements[a].dim : 0;
    if (dim >= static_cast<int>(graph.tensor(*tensor).shape.size()))
        dim = 0;
    CollectiveTransition step{*axis, *tensor, planned, planned};
    switch (collective.kind) {
    case sharding::CollectiveKind::AllReduce:
        step.before.placements[a] = Placement::partial();
        step.after.placements[a] = Placement::replicate();
        break;
    case sharding::CollectiveKind::AllGather:
        step.before.placements[a] = Placement::shard(dim);
        step.after.placements[a] = Placement::replicate();
        break;
    case sharding::CollectiveKind::ReduceScatter:
        step.before.placements[a] = Placement::partial();
        step.after.placements[a] = Placement::shard(dim);
        break;
    case sharding::CollectiveKind::AllToAll:
        step.before.placements[a] = Placement::shard(dim == 0 ? 1 : 0);
        step.after.placements[a] = Placement::shard(dim);
        break;
    }
    return step;
}

} // namespace tapestry::analysis
