#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::sharding {

// What one mesh axis does with a tensor: keeps a whole copy on every device
// of the axis, splits one dim across them, or holds a partial sum that still
// has to be reduced over the axis.
struct Placement {
    enum class Kind { Replicate, Shard, Partial };
    Kind kind = Kind::Replicate;
    int dim = -1;  // the split dim for Shard

    static Placement replicate() { return {}; }
    static Placement shard(int dim) { return {Kind::Shard, dim}; }
    static Placement partial() { return {Kind::Partial, -1}; }
    bool isShard() const { return kind == Kind::Shard; }
    bool isPartial() const { return kind == Kind::Partial; }
    bool isReplicate() const { return kind == Kind::Replicate; }
    friend bool operator==(const Placement &, const Placement &) = default;
    friend auto operator<=>(const Placement &, const Placement &) = default;

    // DTensor notation: "Replicate()", "Shard(1)", "Partial()".
    std::string toString() const;
    static std::optional<Placement> fromString(const std::string &s);
};

// A tensor's sharding over a mesh: one placement per mesh axis, in the
// mesh's axis order (DTensor's placements list).
struct ShardingSpec {
    std::vector<Placement> placements;

    static ShardingSpec replicated(int meshRank);
    friend bool operator==(const ShardingSpec &, const ShardingSpec &) = default;
    friend auto operator<=>(const ShardingSpec &, const ShardingSpec &) = default;

    bool isReplicated() const;
    bool hasPartial() const;
    // Number of pieces dim `dim` is cut into (product of the axes splitting it).
    std::int64_t splitFactor(int dim, const Mesh &mesh) const;
    // The shape of one device's piece.
    ir::Shape localShape(const ir::Shape &shape, const Mesh &mesh) const;
    std::int64_t localElements(const ir::Shape &shape, const Mesh &mesh) const;

    // The problem when the spec cannot hold a tensor of `shape`: a placement
    // count other than the mesh's rank, a split dim out of range, or a dim
    // the axes splitting it do not divide. Nothing when it is legal.
    std::optional<std::string> problem(const ir::Shape &shape, const Mesh &mesh) const;

    // DTensor placements: "[Replicate(), Shard(1)]".
    std::string toPlacements() const;
    // JAX PartitionSpec: "P(None, 'model')"; axes holding a partial sum,
    // which PartitionSpec cannot say, follow as " + partial('model')".
    std::string toPartitionSpec(int tensorRank, const Mesh &mesh) const;
};

} // namespace tapestry::sharding
