#include "io/zoo/attention.h"
#include "io/zoo/families.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/knobcheck.h"
#include "ir/validate.h"

#include <optional>

namespace tapestry::io::zoo {

namespace {

constexpr double kLayerNormEpsilon = 1e-6;
// T5's relative_attention_num_buckets; the same in every published size.
constexpr std::int64_t kRelativeBuckets = 32;

struct T5Dims {
    std::int64_t hidden, heads, headDim, ffn;
    bool gated;  // T5 v1.1, Flan-T5, mT5: wo(gelu(wi_0(x)) · wi_1(x))
};

// Multi-head attention module `module` (SelfAttention, EncDecAttention): q
// from x, k and v from `memory`; T5 neither scales the scores nor biases the
// projections.
ir::TensorId t5Attention(GraphBuilder &g, const std::string &module, ir::TensorId x,
                         ir::TensorId memory, ir::TensorId bias, const T5Dims &dims)
{
    const std::int64_t inner = dims.heads * dims.headDim;
    g.push(module);
    auto q = g.linear("q", x, inner, false);
    auto k = g.linear("k", memory, inner, false);
    auto v = g.linear("v", memory, inner, false);
    AttentionSpec spec;
    spec.heads = spec.kvHeads = dims.heads;
    spec.headDim = dims.headDim;
    spec.mask = bias;
    auto o = g.linear("o", attentionCore(g, q, k, v, spec), dims.hidden, false);
    g.pop();
    return o;
}

// Sub-layer `layer.N`: x + f(layer_norm(x)).
template <typename F>
ir::TensorId residual(GraphBuilder &g, const std::string &layer, ir::TensorId x, F f)
{
    g.push(layer);
    auto y = f(g.rmsNorm("layer_norm", x, kLayerNormEpsilon));
    y = g.op("Add", {x, y}, g.shape(x));
    g.pop();
    return y;
}

// Hugging Face names the gated form's module DenseReluDense too.
ir::TensorId denseReluDense(GraphBuilder &g, ir::TensorId x, const T5Dims &dims)
{
    g.push("DenseReluDense");
    ir::TensorId u;
    if (dims.gated) {
        auto gate = g.linear("wi_0", x, dims.ffn, false);
        gate = g.op("Gelu", {gate}, g.shape(gate), {{"approximate", std::string("tanh")}});
        auto linear = g.linear("wi_1", x, dims.ffn, false);
        u = g.op("Mul", {gate, linear}, g.shape(linear));
    } else {
        u = g.linear("wi", x, dims.ffn, false);
        u = g.op("Relu", {u}, g.shape(u));
    }
    auto y = g.linear("wo", u, dims.hidden, false);
    g.pop();
    return y;
}

// The stack's relative position bias, computed once outside the blocks (so
// that every block, block 0 included, has the same structure) and added to the
// attention mask: Gather(bias table [buckets, heads], buckets [s, s]) ->
// [1, heads, s, s] + mask.
ir::TensorId positionBias(GraphBuilder &g, ir::TensorId buckets, ir::TensorId mask, std::int64_t heads)
{
    const std::int64_t s = g.shape(buckets)[0];
    // Named as Hugging Face's T5 holds it: in the first block's self-attention.
    for (const char *scope : {"block.0", "layer.0", "SelfAttention", "relative_attention_bias"})
        g.push(scope);
    auto table = g.parameter("weight", {kRelativeBuckets, heads});
    for (int i = 0; i < 4; ++i)
        g.pop();
    auto bias = g.embedding("relative_attention_bias", table, buckets);
    g.push("relative_attention_bias");
    bias = g.reshape(g.transpose(bias, {2, 0, 1}), {1, heads, s, s});
    g.pop();
    ir::Shape biased = *ir::broadcastShapes(g.shape(bias), g.shape(mask));
    return g.op("Add", {bias, mask}, biased);
}

} // namespace

// T5 v1.0 (t5-small ... t5-11b): encoder-decoder, RMS layer norms, ReLU FFNs,
// relative position bias, embeddings shared by encoder, decoder and the LM
// head (scaled by hidden^-0.5 before it). fp32, as T5 was released. Optional
// knobs: gated (non-zero: gated-GELU FFNs, T5 v1.1, Flan-T5 and mT5) and
// tied_embeddings (0: an LM head of its own, unscaled, as those have).
ir::Graph buildT5(const std::string &name, const Knobs &knobs)
{
    const KnobCheck check(name, knobs);
    const bool gated = check.has("gated") && check["gated"] != 0;
    const bool tied = !check.has("tied_embeddings") || check["tied_embeddings"] != 0;
    const T5Dims dims{check["hidden"], check["heads"], check["head_dim"], check["ffn"], gated};
    const std::int64_t b = check["batch"], s = check["seq"], t = check["target_seq"];

    GraphBuilder g(name, ir::DType::F32);
    auto inputIds = g.input("input_ids", {b, s}, ir::DType::I64);
    auto decoderInputIds = g.input("decoder_input_ids", {b, t}, ir::DType::I64);
    auto labels = g.input("labels", {b, t}, ir::DType::I64);
    auto mask = g.input("attention_mask", {b, 1, 1, s}, ir::DType::F32);  // padding
    auto causalMask = g.input("decoder_attention_mask", {1, 1, t, t}, ir::DType::F32);
    auto buckets = g.input("relative_position_bucket", {s, s}, ir::DType::I64);
    auto decoderBuckets = g.input("decoder_relative_position_bucket", {t, t}, ir::DType::I64);
    std::optional<ir::TensorId> headScale;
    if (tied)
        headScale = g.input("lm_head_scale", {}, ir::DType::F32);

    g.push("shared");
    auto shared = g.parameter("weight", {check["vocab"], dims.hidden});
    g.pop();

    g.push("encoder");
    auto x = g.embedding("embed_tokens", shared, inputIds);
    auto bias = positionBias(g, buckets, mask, dims.heads);
    for (std::int64_t i = 0; i < check["layers"]; ++i) {
        g.push("block." + std::to_string(i));
        x = residual(g, "layer.0", x, [&](ir::TensorId n) {
            return t5Attention(g, "SelfAttention", n, n, bias, dims);
        });
        x = residual(g, "layer.1", x, [&](ir::TensorId n) { return denseReluDense(g, n, dims); });
        g.pop();
    }
    const auto encoded = g.rmsNorm("final_layer_norm", x, kLayerNormEpsilon);
    g.pop();

    g.push("decoder");
    auto y = g.embedding("embed_tokens", shared, decoderInputIds);
    auto decoderBias = positionBias(g, decoderBuckets, causalMask, dims.heads);
    for (std::int64_t i = 0; i < check["decoder_layers"]; ++i) {
        g.push("block." + std::to_string(i));
        y = residual(g, "layer.0", y, [&](ir::TensorId n) {
            return t5Attention(g, "SelfAttention", n, n, decoderBias, dims);
        });
        y = residual(g, "layer.1", y, [&](ir::TensorId n) {
            return t5Attention(g, "EncDecAttention", n, encoded, mask, dims);
        });
        y = residual(g, "layer.2", y, [&](ir::TensorId n) { return denseReluDense(g, n, dims); });
        g.pop();
    }
    y = g.rmsNorm("final_layer_norm", y, kLayerNormEpsilon);
    g.pop();

    ir::TensorId logits;
    if (tied) {
        g.push("lm_head");
        y = g.op("Mul", {y, *headScale}, g.shape(y));
        logits = g.matmul(y, g.transpose(shared, {1, 0}));
        g.pop();
    } else {
        logits = g.linear("lm_head", y, check["vocab"], false);
    }
    g.markOutput(g.crossEntropyLoss(logits, labels));
    return g.take();
}

} // namespace tapestry::io::zoo
