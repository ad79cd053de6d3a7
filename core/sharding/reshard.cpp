#include "sharding/reshard.h"

namespace tapestry::sharding {

Reshard reshard(const ir::Tensor &tensor, const ShardingSpec &from, const ShardingSpec &to, const Mesh &mesh)
{
    Reshard r;
    if (auto p = to.problem(tensor.shape, mesh)) {
        r.problem = "cannot reshard '" + tensor.name + "' to " + to.toPlacements() + ": " + *p;
        return r;
    }
    if (auto p = from.problem(tensor.shape, mesh)) {
        r.problem = "cannot reshard '" + tensor.name + "' from " + from.toPlacements() + ": " + *p;
        return r;
    }
    const std::int64_t elementBytes = ir::byteSize(tensor.dtype);
    ShardingSpec current = from;
    for (std::size_t a = 0; a < to.placements.size(); ++a) {
        const Placement src = current.placements[a], dst = to.placements[a];
        if (src == dst)
            continue;
        const int axis = static_cast<int>(a);
        // Bytes of the buffer with this axis undone, the other axes as they stand.
        ShardingSpec whole = current;
        whole.placements[a] = Placement::replicate();
        const std::int64_t wholeBytes = whole.localElements(tensor.shape, mesh) * elementBytes;
        const std::int64_t localBytes = current.localElements(tensor.shape, mesh) * elementBytes;
        current.placements[a] = dst;
        if (mesh.axes[a].size == 1 || dst.isPartial() || src.isReplicate())
            continue;
        if (src.isPartial())
            r.collectives.push_back({dst.isShard() ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, axis,
                                     wholeBytes, tensor.name,
                                     dst.isShard() ? "partial sum to " + dst.toString() : "partial sum to replicated"});
        else if (dst.isReplicate())
            r.collectives.push_back({CollectiveKind::AllGather, axis, wholeBytes, tensor.name,
                                     src.toString() + " to replicated"});
        else
            r.collectives.push_back({CollectiveKind::AllToAll, axis, localBytes, tensor.name,
                                     src.toString() + " to " + dst.toString()});
    }
    return r;
}

ShardingSpec gradientSpec(const ShardingSpec &spec)
{
    ShardingSpec g = spec;
    for (auto &p : g.placements)
        if (p.isPartial())
            p = Placement::replicate();
    return g;
}

} // namespace tapestry::sharding
