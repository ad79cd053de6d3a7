#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <map>
#include <vector>

namespace tapestry::sharding {

// Where a partial sum an op produces is stored when nothing fixes it.
enum class PartialResolution {
    Replicate,      // all-reduce it (Megatron's g operator)
    ShardSequence,  // reduce-scatter it over the sequence dim (Megatron sequence parallelism):
                    // dim 1 of a [b, s, ...] tensor, dim 0 of a [tokens, ...] one, when divisible
};

// How a tensor an op produces in `produced` is stored: its partial sums
// resolved as `partial` says (the other placements as produced).
ShardingSpec storedSpec(ShardingSpec produced, const ir::Shape &shape, const Mesh &mesh, PartialResolution partial);

// Derives a spec for every tensor of the graph from the fixed ones, in
// topological order: an unfixed input or parameter is replicated, an unfixed
// activation takes the spec its producer's strategy gives it, with partial
// sums stored as `partial` says. Indexed by tensor id.
std::vector<ShardingSpec> propagateSpecs(const ir::Graph &graph, const Mesh &mesh,
                                         const std::map<ir::TensorId, ShardingSpec> &fixed,
                                         PartialResolution partial = PartialResolution::Replicate);
// The same with the fixed specs in place: `specs[t]` is tensor t's spec
// where `fixed[t]` is set (indexed by tensor id), anything elsewhere. Only
// the ops that write an unfixed tensor are resolved, so a plan whose search
// fixed nearly every tensor costs nearly nothing to complete.
std::vector<ShardingSpec> propagateSpecs(const ir::Graph &graph, const Mesh &mesh, std::vector<ShardingSpec> specs,
                                         const std::vector<bool> &fixed,
                                         PartialResolution partial = PartialResolution::Replicate);

} // namespace tapestry::sharding
