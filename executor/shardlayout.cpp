#include "shardlayout.h"

namespace tapestry::exec {

ir::Shape shardShape(const sharding::ShardingSpec &spec, const ir::Shape &full,
                     const std::vector<std::int64_t> &meshShape)
{
    ir::Shape local = full;
    for (std::size_t a = 0; a < spec.placements.size(); ++a) {
        const sharding::Placement &p = spec.placements[a];
        if (p.isShard())
            local[static_cast<std::size_t>(p.dim)] /= meshShape[a];
    }
    return local;
}

std::vector<std::int64_t> shardOffset(const sharding::ShardingSpec &spec, const ir::Shape &full,
                                      const std::vector<std::int64_t> &meshShape,
                                      const std::vector<std::int64_t> &coordinates)
{
    const ir::Shape local = shardShape(spec, full, meshShape);
    std::vector<std::int64_t> block(full.size(), 0);
    for (std::size_t a = 0; a < spec.placements.size(); ++a) {
        const sharding::Placement &p = spec.placements[a];
        if (!p.isShard())
            continue;
        auto &b = block[static_cast<std::size_t>(p.dim)];
        b = b * meshShape[a] + coordinates[a];
    }
    for (std::size_t d = 0; d < full.size(); ++d)
        block[d] *= local[d];
    return block;
}

bool isMinorSplit(const sharding::ShardingSpec &spec, std::size_t axis, int dim)
{
    for (std::size_t b = axis + 1; b < spec.placements.size(); ++b)
        if (spec.placements[b] == sharding::Placement::shard(dim))
            return false;
    return true;
}

} // namespace tapestry::exec
