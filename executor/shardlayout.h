#pragma once

#include "ir/graph.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <vector>

namespace tapestry::exec {

// Where one rank's shard lies in the whole tensor. A dim split by several
// mesh axes is cut in mesh-axis order, the earlier axis major: on a 4x2 mesh
// a dim split by both axes has block index y·2 + x. Every collective and
// every local slice of the executor keeps to this order, so shards always
// concatenate back to the tensor one process computes.

// The shard's shape (ShardingSpec::localShape on the mesh's axis sizes).
ir::Shape shardShape(const sharding::ShardingSpec &spec, const ir::Shape &full,
                     const std::vector<std::int64_t> &meshShape);

// The shard's first element along each dim of the whole tensor, for the rank
// at `coordinates`.
std::vector<std::int64_t> shardOffset(const sharding::ShardingSpec &spec, const ir::Shape &full,
                                      const std::vector<std::int64_t> &meshShape,
                                      const std::vector<std::int64_t> &coordinates);

// True when no mesh axis after `axis` splits dim `dim` in `spec`: splitting
// or gathering `dim` over `axis` then keeps the mesh-axis order above.
bool isMinorSplit(const sharding::ShardingSpec &spec, std::size_t axis, int dim);

} // namespace tapestry::exec
