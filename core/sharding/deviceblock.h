#pragma once

#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <string>
#include <vector>

namespace tapestry::sharding {

// Which block of a tensor one device holds under a spec: per tensor dim the
// block index and the number of blocks, plus the axes over which the block
// is still a partial sum. Devices are numbered row-major over the mesh (the
// last axis varies fastest); where several axes split one dim, the earlier
// axis picks the outer block (DTensor's order).
struct DeviceBlock {
    std::vector<int> coordinate;  // the device's position on each mesh axis
    std::vector<std::int64_t> index;   // per tensor dim
    std::vector<std::int64_t> blocks;  // per tensor dim
    std::vector<int> partialAxes;

    // Devices holding the same data share this key (replicas).
    std::int64_t linearIndex() const;
};

std::vector<int> meshCoordinate(const Mesh &mesh, int device);
DeviceBlock deviceBlock(const ShardingSpec &spec, int tensorRank, const Mesh &mesh, int device);

// The lessons' notation: "A[I_model, J]" for a tensor split on dim 0 over axis
// model, with "{U_data}" appended for a partial sum over axis data. `dims`
// names the tensor's dims (I, J, K, ... when empty).
std::string blockNotation(const std::string &tensor, const ShardingSpec &spec, int tensorRank, const Mesh &mesh,
                          const std::vector<std::string> &dims = {});

} // namespace tapestry::sharding
