#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
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

// The most axes a mesh may have. Real meshes have one to three (data,
// model, and pipeline or experts); with a bound, a spec's placements live
// inline, so the searches copy and compare specs by the million without
// allocating.
inline constexpr std::size_t kMaxMeshAxes = 4;

// A spec's placements, one per mesh axis: a vector held inline.
class PlacementList {
public:
    PlacementList() = default;
    // `n` replicated axes.
    explicit PlacementList(std::size_t n) : m_size(static_cast<std::uint8_t>(checked(n))) {}
    PlacementList(std::initializer_list<Placement> ps)
    {
        for (const auto &p : ps)
            push_back(p);
    }
    PlacementList(const std::vector<Placement> &ps)
    {
        for (const auto &p : ps)
            push_back(p);
    }

    std::size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    Placement &operator[](std::size_t i) { return m_items[i]; }
    const Placement &operator[](std::size_t i) const { return m_items[i]; }
    Placement *data() { return m_items.data(); }
    const Placement *data() const { return m_items.data(); }
    Placement *begin() { return m_items.data(); }
    Placement *end() { return m_items.data() + m_size; }
    const Placement *begin() const { return m_items.data(); }
    const Placement *end() const { return m_items.data() + m_size; }
    // Throws std::length_error past kMaxMeshAxes.
    void push_back(const Placement &p)
    {
        checked(m_size + 1u);
        m_items[m_size++] = p;
    }
    void pop_back() { --m_size; }

    friend bool operator==(const PlacementList &a, const PlacementList &b)
    {
        return std::equal(a.begin(), a.end(), b.begin(), b.end());
    }
    friend auto operator<=>(const PlacementList &a, const PlacementList &b)
    {
        return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
    }

private:
    static std::size_t checked(std::size_t n)
    {
        if (n > kMaxMeshAxes)
            throw std::length_error("a mesh has at most " + std::to_string(kMaxMeshAxes) + " axes");
        return n;
    }

    std::array<Placement, kMaxMeshAxes> m_items{};
    std::uint8_t m_size = 0;
};

// A tensor's sharding over a mesh: one placement per mesh axis, in the
// mesh's axis order (DTensor's placements list).
struct ShardingSpec {
    PlacementList placements;

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
    // problem() without saying what it is: for the searches' hot loops.
    bool holds(const ir::Shape &shape, const Mesh &mesh) const;

    // DTensor placements: "[Replicate(), Shard(1)]".
    std::string toPlacements() const;
    // JAX PartitionSpec: "P(None, 'model')"; axes holding a partial sum,
    // which PartitionSpec cannot say, follow as " + partial('model')".
    std::string toPartitionSpec(int tensorRank, const Mesh &mesh) const;
};

} // namespace tapestry::sharding
