#include "reshardsteps.h"

#include "shardlayout.h"
#include "sharding/reshard.h"

#include <optional>

namespace tapestry::exec {

namespace {

using sharding::Placement;
using sharding::ShardingSpec;

struct Move {
    ReshardStep::Kind kind;
    std::size_t axis;
    int dim = -1;
    int dim2 = -1;
    ShardingSpec after;
};

// The moves of sharding::reshard(), or nothing when one of them would break
// the block order of a dim split by several axes.
std::optional<std::vector<Move>> axisByAxis(const ShardingSpec &from, const ShardingSpec &to,
                                            const std::vector<std::int64_t> &meshShape)
{
    using K = ReshardStep::Kind;
    std::vector<Move> moves;
    ShardingSpec cur = from;
    for (std::size_t a : sharding::reshardAxisOrder(from, to)) {
        const Placement src = cur.placements[a], dst = to.placements[a];
        if (src == dst)
            continue;
        ShardingSpec next = cur;
        next.placements[a] = dst;
        const bool trivial = meshShape[a] == 1;
        std::optional<Move> m;
        if (dst.isPartial()) {
            if (!src.isReplicate())
                return std::nullopt;
            m = Move{K::KeepOnFirst, a, -1, -1, next};
        } else if (src.isPartial()) {
            if (dst.isShard() && !isMinorSplit(next, a, dst.dim))
                return std::nullopt;
            m = dst.isShard() ? Move{K::ReduceScatter, a, dst.dim, -1, next} : Move{K::AllReduce, a, -1, -1, next};
        } else if (src.isReplicate()) {
            if (!isMinorSplit(next, a, dst.dim))
                return std::nullopt;
            m = Move{K::Slice, a, dst.dim, -1, next};
        } else if (dst.isReplicate()) {
            if (!isMinorSplit(cur, a, src.dim))
                return std::nullopt;
            m = Move{K::AllGather, a, src.dim, -1, next};
        } else {
            if (!isMinorSplit(cur, a, src.dim) || !isMinorSplit(next, a, dst.dim))
                return std::nullopt;
            m = Move{K::AllToAll, a, dst.dim, src.dim, next};  // cut along the new split, join the old
        }
        cur = next;
        if (!trivial)
            moves.push_back(*m);
        else if (!moves.empty())
            moves.back().after = cur;
    }
    return moves;
}

// Reduce every partial sum the target does not keep, gather every split
// (minor axes first), then slice to the target (major axes first) and keep
// the target's new partial sums on one rank.
std::vector<Move> throughWhole(const ShardingSpec &from, const ShardingSpec &to,
                               const std::vector<std::int64_t> &meshShape)
{
    using K = ReshardStep::Kind;
    std::vector<Move> moves;
    ShardingSpec cur = from;
    const std::size_t axes = to.placements.size();
    auto push = [&](K kind, std::size_t a, int dim, Placement p) {
        cur.placements[a] = p;
        if (meshShape[a] > 1)
            moves.push_back({kind, a, dim, -1, cur});
        else if (!moves.empty())
            moves.back().after = cur;
    };
    for (std::size_t a = 0; a < axes; ++a)
        if (cur.placements[a].isPartial() && !to.placements[a].isPartial())
            push(K::AllReduce, a, -1, Placement::replicate());
    for (std::size_t a = axes; a-- > 0;)
        if (cur.placements[a].isShard())
            push(K::AllGather, a, cur.placements[a].dim, Placement::replicate());
    for (std::size_t a = 0; a < axes; ++a)
        if (to.placements[a].isShard())
            push(K::Slice, a, to.placements[a].dim, to.placements[a]);
    for (std::size_t a = 0; a < axes; ++a)
        if (to.placements[a].isPartial() && cur.placements[a].isReplicate())
            push(K::KeepOnFirst, a, -1, Placement::partial());
    return moves;
}

} // namespace

bool isCollective(ReshardStep::Kind kind)
{
    using K = ReshardStep::Kind;
    return kind == K::AllReduce || kind == K::AllGather || kind == K::ReduceScatter || kind == K::AllToAll;
}

void planReshard(const ir::Shape &full, const ShardingSpec &from, const ShardingSpec &to,
                 const std::vector<std::int64_t> &meshShape, Slot src, Slot dst, BufferTable &buffers,
                 std::vector<ReshardStep> &steps)
{
    std::vector<Move> moves;
    if (auto direct = axisByAxis(from, to, meshShape))
        moves = std::move(*direct);
    else
        moves = throughWhole(from, to, meshShape);
    if (moves.empty()) {
        if (src != dst)
            steps.push_back({ReshardStep::Kind::Copy, 0, -1, -1, src, dst});
        return;
    }
    Slot cur = src;
    for (std::size_t i = 0; i < moves.size(); ++i) {
        const Move &m = moves[i];
        const Slot next = i + 1 == moves.size() ? dst : buffers.reserve(shardShape(m.after, full, meshShape));
        steps.push_back({m.kind, m.axis, m.dim, m.dim2, cur, next});
        cur = next;
    }
}

} // namespace tapestry::exec
