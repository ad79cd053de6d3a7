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
    std::vector<std::size_t> order;
    order.reserve(to.placements.size());
    forEachReshardAxis(from, to, [&](std::size_t a) { order.push_back(a); });
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
