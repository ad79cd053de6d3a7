#pragma once

#include "ir/graph.h"
#include "sharding/collective.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

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

// What the gradient of a tensor stored as `spec` must end up as: the same
// spec with partial sums replaced by replicas (each summand's gradient is the
// whole gradient of the sum).
ShardingSpec gradientSpec(const ShardingSpec &spec);

} // namespace tapestry::sharding
