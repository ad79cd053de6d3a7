#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::cost {

// One attention layer as Korthikanti et al. ("Reducing Activation
// Recomputation in Large Transformer Models") size it, found by its score
// Softmax over [b, a, s, s]: local batch b, sequence s, hidden h = a x d,
// heads a, tensor-parallel degree t (the split of the heads), sequence
// parallel or not.
struct TransformerLayerShape {
    std::string softmaxOp;
    std::int64_t b = 0, s = 0, h = 0, a = 0;
    std::int64_t t = 1;
    bool sequenceParallel = false;
};

// Attention layers of the graph under `specs` (indexed by tensor id); empty
// when the graph has none.
std::vector<TransformerLayerShape> transformerLayers(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                     const std::vector<sharding::ShardingSpec> &specs);

// The layer whose score Softmax is `softmax`; nothing for any other op.
// `sequenceParallel`: the graph's norms run on sequence shards.
std::optional<TransformerLayerShape> transformerLayer(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                     const std::vector<sharding::ShardingSpec> &specs, ir::OpId softmax,
                                                     bool sequenceParallel);

// Activation bytes per device of one layer, for 16-bit activations:
// 34·s·b·h + 5·a·s²·b unsharded; 10·s·b·h + (24·s·b·h + 5·a·s²·b)/t with
// tensor parallelism; (34·s·b·h + 5·a·s²·b)/t with sequence parallelism too.
std::int64_t korthikantiBytes(const TransformerLayerShape &layer);

// Whether the backward pass of `op` reads its inputs: every op but plain
// sums and data movement (Add, Reshape, Transpose, ...).
bool savesInputs(const ir::Op &op);

// Whether `op` is a norm running on sequence shards (sequence parallelism):
// its [b, s, h] input, stored as `input`, split on s.
bool normOnSequenceShards(const ir::Graph &graph, const sharding::Mesh &mesh, const ir::Op &op,
                          const sharding::ShardingSpec &input);

// For graphs without attention layers: the local bytes of the tensors the
// backward pass reads (inputs of ops that are not plain sums or moves, on the
// path from a parameter), each counted once.
std::int64_t savedTensorBytes(const ir::Graph &graph, const sharding::Mesh &mesh,
                              const std::vector<sharding::ShardingSpec> &specs);

} // namespace tapestry::cost
