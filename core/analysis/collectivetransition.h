#pragma once

#include "cost/plancost.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <optional>
#include <vector>

namespace tapestry::analysis {

// How a collective moves its tensor on its mesh axis: the spec before it
// ran (partial sums, or split on a dim) and after, the other axes as the
// plan has them.
struct CollectiveTransition {
    int axis = 0;  // index into the mesh's axes
    ir::TensorId tensor;
    sharding::ShardingSpec before;
    sharding::ShardingSpec after;
};

// The transition of `collective` under a plan on `mesh` whose specs by
// tensor id are `specs` (plan::planSpecs); none when the collective's axis
// or tensor is not the plan's, or the tensor's spec is not for this mesh.
std::optional<CollectiveTransition> collectiveTransition(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                         const std::vector<sharding::ShardingSpec> &specs,
                                                         const cost::CollectiveCost &collective);

} // namespace tapestry::analysis
