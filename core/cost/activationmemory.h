#pragma once

#include "cost/costoptions.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
    // Beyond the paper's GPT layer (layerWidths): the MLP's intermediate
    // width f (0: 4h, the paper's), whether it is gated (SwiGLU, GeGLU:
    // two linears of width f, one through the activation, multiplied),
    // and the width of the keys and values (0: h; grouped-query attention
    // projects them to fewer heads than the queries).
    std::int64_t ffn = 0;
    bool gated = false;
    std::int64_t kv = 0;
};

// The widths of the layer around the score Softmax `softmax` that the
// paper takes as fixed (TransformerLayerShape::ffn, gated, kv), found by
// structure: the keys' projection where the keys are expanded to the
// queries' heads (grouped-query attention), and the MLP whose linears read
// the first norm after the attention's output (pre-LN: the layer's second
// norm; post-LN: the attention block's). Zero and false where the layer
// is not so shaped (a cross-attention follows, a mixture's experts read a
// dispatch): the paper's values then.
struct LayerWidths {
    std::int64_t ffn = 0;
    bool gated = false;
    std::int64_t kv = 0;
};
LayerWidths layerWidths(const ir::Graph &graph, ir::OpId softmax);

// Attention layers of the graph under `specs` (indexed by tensor id); empty
// when the graph has none.
std::vector<TransformerLayerShape> transformerLayers(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                     const std::vector<sharding::ShardingSpec> &specs);

// The layer whose score Softmax is `softmax`; nothing for any other op.
// `sequenceParallel`: the graph's norms run on sequence shards. `widths`:
// layerWidths(graph, softmax) where the caller keeps them, else found here.
std::optional<TransformerLayerShape> transformerLayer(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                     const std::vector<sharding::ShardingSpec> &specs, ir::OpId softmax,
                                                     bool sequenceParallel, const LayerWidths *widths = nullptr);

// Activation bytes per device of one layer, for 16-bit activations, as
// Korthikanti et al. tabulate them (b the local micro-batch: the layer's
// local batch over `techniques.microBatches`, rounded up):
//   no recomputation    34·s·b·h + 5·a·s²·b unsharded;
//                       10·s·b·h + (24·s·b·h + 5·a·s²·b)/t tensor parallel;
//                       (34·s·b·h + 5·a·s²·b)/t with sequence parallelism;
//                       where the 24·s·b·h that tensor parallelism splits
//                       are the attention's q, k, v and output-projection
//                       input (4·s·b·h + 4·s·b·kv, kv = h) and the MLP's
//                       activation input and output (4·s·b·f, f = 4h);
//                       a gated MLP holds four tensors of width f (both
//                       linears' outputs, the activation's, the product:
//                       8·s·b·f), and grouped-query attention keys and
//                       values of width kv;
//   selective           the same without the 5·a·s²·b terms;
//   full                2·s·b·h (the layer's input), /t with sequence
//                       parallelism.
// Flash attention keeps no s x s tensor either, and the softmax statistics
// instead: 4·a·s·b/t bytes (one float per row of scores).
std::int64_t korthikantiBytes(const TransformerLayerShape &layer, const Techniques &techniques = {});

// korthikantiBytes for activations of `options.activationBytes` bytes an
// element (the table is for 2): what every costing path charges a layer.
std::int64_t layerActivationBytes(const TransformerLayerShape &layer, const CostOptions &options);

// What full recomputation holds besides each layer's input: the one layer
// being recomputed, with all its activations, during its backward pass.
// Charged once per kind of layer (the layers under one scope pattern,
// "model/layers.*/": a class of repeated layers), as the mean of their
// rows without recomputation, so that each layer carries `share` of it:
// 1 / the count of its kind (layerShares), which the search charges layer
// by layer as the plan does. 0 under any other setting.
std::int64_t recomputeWorkingBytes(const TransformerLayerShape &layer, const CostOptions &options, double share);
// What the backward pass holds besides the saved activations while it runs
// one layer: the gradients in flight (the layer's output, input and
// residual branch gradients, s·b·h each, and its largest intermediate
// gradient, the MLP's 4·s·b·h/t or the attention probabilities' a·s²·b/t
// where no flash attention keeps them out), in activation bytes, of one
// micro-batch. Charged as recomputeWorkingBytes is: once per kind of
// layer, each layer carrying `share` of it. The memory a training job
// peaks at is the saved activations plus this, near the start of the
// backward pass.
std::int64_t backwardWorkingBytes(const TransformerLayerShape &layer, const CostOptions &options, double share);
// recomputeWorkingBytes + backwardWorkingBytes: what every costing path
// charges a layer besides layerActivationBytes.
std::int64_t layerWorkingBytes(const TransformerLayerShape &layer, const CostOptions &options, double share);
// By op id: for the score Softmax of an attention layer, 1 / the number of
// attention layers of its kind in the graph; 0 for any other op.
std::vector<double> layerShares(const ir::Graph &graph);
// By tensor id: for a parameter read inside an attention layer, 1 / the
// number of layers of that kind; 0 for any other tensor. ZeRO-3 holds one
// layer's parameters gathered whole while it computes: each parameter
// carries this share of its gathered bytes (ParameterLoad).
std::vector<double> parameterShares(const ir::Graph &graph);

// The local batch of one micro-batch: `localBatch` samples run as
// `microBatches` micro-batches, the last one possibly shorter.
std::int64_t microBatchOf(std::int64_t localBatch, int microBatches);

// The bytes per device of an activation kept for the backward pass, of one
// micro-batch (dim 0 taken as the batch).
std::int64_t savedBytes(const ir::Tensor &tensor, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh,
                        int microBatches);

// What each op is to recomputation (bits, indexed by op id): kScore for an
// attention core's q·kᵀ MatMul, its scale and mask, and the Softmax; kContext
// for the MatMul of the probabilities with v (and a Dropout or Cast between);
// kLayer for every op of a transformer layer (the ops under the shallowest
// numbered scope holding an attention core: "model/layers.3/...",
// "transformer/h.0/...", "encoder/block.2/...").
enum RecomputeRole : std::uint8_t { kScore = 1, kContext = 2, kLayer = 4 };
std::vector<std::uint8_t> recomputeRoles(const ir::Graph &graph);
// The scope of the layer holding the op named `name`: up to its shallowest
// path component ending in a digit ("model/layers.3/"), empty when none does.
std::string_view layerScope(std::string_view name);

// A layer's kind: the scope of the layer holding the op named `opName` with
// the number it ends in starred ("model/layers.*/"); empty outside a
// numbered scope. The layers of one kind are one class of repeated layers.
std::string layerKind(std::string_view opName);
// Per op id: its recomputation under `t` (recomputeOf its layer's kind).
std::vector<Recompute> recomputeModes(const ir::Graph &graph, const Techniques &t);
// The kinds of the graph's attention layers, in order.
std::vector<std::string> attentionLayerKinds(const ir::Graph &graph);

// How much of an op's forward pass the backward pass runs again, as
// multiples of its forward compute and of its forward collectives (input
// reshards and internal ones): full recomputation runs a layer's whole
// forward again; selective, the attention core's compute; flash attention
// computes the scores again in its backward pass, on top of either.
struct Recomputed {
    double compute = 0;
    double comm = 0;
    bool any() const { return compute > 0 || comm > 0; }
};
// `mode`: the op's recomputation (recomputeModes).
Recomputed recomputedForward(std::uint8_t role, Recompute mode, bool flashAttention);

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
                              const std::vector<sharding::ShardingSpec> &specs, int microBatches = 1);

} // namespace tapestry::cost
