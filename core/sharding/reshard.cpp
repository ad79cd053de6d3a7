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
    forEachReshardStep(tensor, from, to, mesh, [&](const ReshardStep &s) {
        std::string reason = s.from.isPartial() ? (s.to.isShard() ? "partial sum to " + s.to.toString()
                                                                  : std::string("partial sum to replicated"))
                             : s.to.isReplicate() ? s.from.toString() + " to replicated"
                                                  : s.from.toString() + " to " + s.to.toString();
        r.collectives.push_back({s.kind, s.axis, s.bytes, tensor.name, std::move(reason)});
    });
    return r;
}

std::vector<std::size_t> reshardAxisOrder(const ShardingSpec &from, const ShardingSpec &to)
{
    const std::size_t axes = std::min(from.placements.size(), to.placements.size());
    // A slice or a reduce-scatter: the buffer shrinks by the axis.
    auto cuts = [&](std::size_t b) {
        const Placement &s = from.placements[b], &d = to.placements[b];
        return (s.isReplicate() || s.isPartial()) && d.isShard();
    };
    auto freeSlice = [&](std::size_t a) {
        if (!cuts(a))
            return false;
        const Placement &dst = to.placements[a];
        for (std::size_t b = 0; b < axes; ++b) {
            const Placement &s = from.placements[b], &d = to.placements[b];
            if (b == a || s == d || cuts(b))
                continue;
            if ((s.isShard() && s.dim == dst.dim) || (d.isShard() && d.dim == dst.dim))
                return false;
        }
        return true;
    };
    auto reduces = [&](std::size_t b) { return from.placements[b].isPartial() && to.placements[b].isReplicate(); };
    std::vector<std::size_t> order;
    order.reserve(to.placements.size());
    for (std::size_t a = 0; a < axes; ++a)
        if (freeSlice(a))
            order.push_back(a);
    for (std::size_t a = 0; a < axes; ++a)
        if (reduces(a))
            order.push_back(a);
    for (std::size_t a = 0; a < to.placements.size(); ++a)
        if (a >= axes || (!freeSlice(a) && !reduces(a)))
            order.push_back(a);
    return order;
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
