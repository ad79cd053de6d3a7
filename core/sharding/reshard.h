#pragma once

#include "ir/graph.h"
#include "sharding/collective.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::sharding {

// The collectives that turn a tensor stored as `from` into `to`, axis by
// axis: partial to replicated all-reduce, partial to shard reduce-scatter,
// shard to replicated all-gather, shard of dim i to shard of dim j all-to-all;
// replicated to shard (a local slice) and anything to partial (keep the
// value on one device, zeros elsewhere) move nothing. Illegal when `to`
// cannot hold the tensor (an indivisible split, a dim out of range).
struct Reshard {
    std::vector<Collective> collectives;
    std::optional<std::string> problem;

    bool legal() const { return !problem; }
};

Reshard reshard(const ir::Tensor &tensor, const ShardingSpec &from, const ShardingSpec &to, const Mesh &mesh);

// One collective of a reshard, unnamed: what cost figures need of it.
struct ReshardStep {
    CollectiveKind kind;
    int axis;
    std::int64_t bytes;
    Placement from, to;  // on `axis`
};

// The order a reshard from `from` to `to` undoes the mesh axes in: first
// the axes where it cuts the buffer (slices a replica, which is free, or
// reduce-scatters a partial sum) along a dim no other axis gathers or
// exchanges, so that what the other axes move is already cut; then the
// axes that all-reduce a partial sum, before any gather grows the buffer;
// then every other axis. Each step takes its axes in the order of the
// mesh; cuts of one dim keep the mesh's order among themselves, so every
// dim split by several axes keeps its block order. The executor takes its
// moves in this order too (exec::planReshard). `visit` is called with each
// axis in turn; reshardAxisOrder() lists them.
template <typename Visit>
void forEachReshardAxis(const ShardingSpec &from, const ShardingSpec &to, Visit visit)
{
    const std::size_t axes = std::min(from.placements.size(), to.placements.size());
    // A slice or a reduce-scatter: the buffer shrinks by the axis.
    auto cuts = [&](std::size_t b) {
        const Placement &s = from.placements[b], &d = to.placements[b];
        return (s.isReplicate() || s.isPartial()) && d.isShard();
    };
    auto cutsFirst = [&](std::size_t a) {
        if (!cuts(a))
            return false;
        const int dim = to.placements[a].dim;
        for (std::size_t b = 0; b < axes; ++b) {
            const Placement &s = from.placements[b], &d = to.placements[b];
            if (b == a || s == d || cuts(b))
                continue;
            if ((s.isShard() && s.dim == dim) || (d.isShard() && d.dim == dim))
                return false;
        }
        return true;
    };
    auto reduces = [&](std::size_t b) { return from.placements[b].isPartial() && to.placements[b].isReplicate(); };
    for (std::size_t a = 0; a < axes; ++a)
        if (cutsFirst(a))
            visit(a);
    for (std::size_t a = 0; a < axes; ++a)
        if (reduces(a))
            visit(a);
    for (std::size_t a = 0; a < to.placements.size(); ++a)
        if (a >= axes || (!cutsFirst(a) && !reduces(a)))
            visit(a);
}
std::vector<std::size_t> reshardAxisOrder(const ShardingSpec &from, const ShardingSpec &to);

// reshard()'s collectives without their names and reasons, handed to
// `step` one by one: the searches cost thousands of reshards and need only
// kinds, axes and bytes. False, with no step taken, where reshard() would
// say the reshard is illegal.
template <typename Step>
bool forEachReshardStep(const ir::Tensor &tensor, const ShardingSpec &from, const ShardingSpec &to, const Mesh &mesh,
                        Step step)
{
    if (!to.holds(tensor.shape, mesh) || !from.holds(tensor.shape, mesh))
        return false;
    const std::int64_t elementBytes = ir::byteSize(tensor.dtype);
    ShardingSpec current = from;
    forEachReshardAxis(from, to, [&](std::size_t a) {
        const Placement src = current.placements[a], dst = to.placements[a];
        if (src == dst)
            return;
        // Bytes of the buffer with this axis undone, the other axes as they stand.
        ShardingSpec whole = current;
        whole.placements[a] = Placement::replicate();
        const std::int64_t wholeBytes = whole.localElements(tensor.shape, mesh) * elementBytes;
        const std::int64_t localBytes = current.localElements(tensor.shape, mesh) * elementBytes;
        current.placements[a] = dst;
        if (mesh.axes[a].size == 1 || dst.isPartial() || src.isReplicate())
            return;
        const int axis = static_cast<int>(a);
        if (src.isPartial())
            step(ReshardStep{dst.isShard() ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, axis,
                             wholeBytes, src, dst});
        else if (dst.isReplicate())
            step(ReshardStep{CollectiveKind::AllGather, axis, wholeBytes, src, dst});
        else
            step(ReshardStep{CollectiveKind::AllToAll, axis, localBytes, src, dst});
    });
    return true;
}

// What the gradient of a tensor stored as `spec` must end up as: the same
// spec with partial sums replaced by replicas (each summand's gradient is the
// whole gradient of the sum).
ShardingSpec gradientSpec(const ShardingSpec &spec);

} // namespace tapestry::sharding
