#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <string>
#include <vector>

namespace tapestry::search {

// How the activations crossing a segment boundary (the residual stream
// between transformer layers, the embedding output, graph inputs) are
// stored: per mesh axis replicated, split over the batch, split over the
// sequence, or (1D meshes) split over the hidden features, as a
// column-parallel matmul writes its output and a row-parallel one reads it.
// The searches choose one per boundary; weights and the activations inside
// a segment follow from the strategy rules.
struct ActivationLayout {
    enum class Split { Replicate, Batch, Sequence, Hidden };
    std::vector<Split> axes;  // one per mesh axis

    // The spec of `tensor` under this layout. Batch is dim 0, sequence dim 1
    // (of [b, s, ...] activations and of [b, s] token ids), hidden the last
    // dim of float activations of rank 2 or 3 ([b, h], [b, s, h]; not of
    // masks and rotary tables, [b, 1, s, s] and the like); an axis whose
    // split the tensor cannot take (a broadcast dim of size 1, an
    // indivisible dim, no such dim) leaves it replicated.
    sharding::ShardingSpec specFor(const ir::Tensor &tensor, const sharding::Mesh &mesh) const;
    // "data: batch, model: replicate"
    std::string toString(const sharding::Mesh &mesh) const;
    friend bool operator==(const ActivationLayout &, const ActivationLayout &) = default;
    friend auto operator<=>(const ActivationLayout &, const ActivationLayout &) = default;
};

// Every layout of a mesh of `rank` axes, the replicated one first: 3^rank,
// and the hidden split too on a 1D mesh (four) and on the axes of
// `hiddenAxes` (indices) of larger meshes. On every axis of those the
// hidden split would take 2D meshes from 9 layouts to 16 and 3D from 27
// to 64, each multiplying the search by its layouts' count; the searches
// add it on the axes named for tensor parallelism (axisconstraint.h).
std::vector<ActivationLayout> allLayouts(int rank, const std::vector<int> &hiddenAxes = {});

} // namespace tapestry::search
