#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <vector>

namespace tapestry::sharding {

// Every spec without partial sums that can hold a tensor of `shape` on
// `mesh`: replicated first, then per axis each dim split over it. The
// choices the exact search and the explainer weigh for a tensor.
std::vector<ShardingSpec> legalSpecs(const ir::Shape &shape, const Mesh &mesh);

} // namespace tapestry::sharding
