#pragma once

#include "buffertable.h"

#include "sharding/shardingspec.h"

#include <cstdint>
#include <vector>

namespace tapestry::exec {

// One move of a tensor between shardings on one mesh axis: a collective on
// that axis's communicator, or a local copy. Steps write their destination
// whole (they never accumulate).
struct ReshardStep {
    enum class Kind {
        Copy,           // dst = src
        AllReduce,      // dst = Σ over the axis of src (a partial sum made whole)
        AllGather,      // dst = src of every rank of the axis, concatenated along dim
        ReduceScatter,  // dst = this rank's block along dim of Σ src
        AllToAll,       // src cut along dim (the new split), blocks exchanged, joined
                        // along dim2 (the old split)
        Slice,          // dst = this rank's block along dim of src (no communication)
        KeepOnFirst,    // dst = src on the axis's first rank, zeros elsewhere (a whole
                        // tensor read as a partial sum)
    };
    Kind kind = Kind::Copy;
    std::size_t axis = 0;
    int dim = -1;
    int dim2 = -1;
    Slot src = kNoSlot;
    Slot dst = kNoSlot;
    bool dropped = false;  // --test-drop-collective: the collective is skipped
};

bool isCollective(ReshardStep::Kind kind);

// Appends the steps that turn `src`, this rank's shard of a tensor of shape
// `full` stored as `from`, into `dst`, its shard under `to`; intermediate
// buffers are reserved in `buffers`. Axis by axis as sharding::reshard()
// names the collectives (partial → all-reduce or reduce-scatter, shard →
// all-gather or all-to-all, replicate → slice, → partial keeps one copy)
// whenever each step keeps the mesh-axis block order (shardlayout.h);
// otherwise the tensor is reduced and gathered whole, minor axes first, and
// sliced again, which is always right and moves more bytes.
void planReshard(const ir::Shape &full, const sharding::ShardingSpec &from,
                 const sharding::ShardingSpec &to, const std::vector<std::int64_t> &meshShape,
                 Slot src, Slot dst, BufferTable &buffers, std::vector<ReshardStep> &steps);

} // namespace tapestry::exec
