#include "io/zoo/attention.h"
#include "io/zoo/families.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/knobcheck.h"

#include <optional>

namespace tapestry::io::zoo {

namespace {

constexpr double kLayerNormEpsilon = 1e-5;
// BartLearnedPositionalEmbedding keeps two rows before the first position.
constexpr std::int64_t kPositionOffset = 2;

struct BartDims {
    std::int64_t hidden, heads, ffn;
    ir::TensorId scale;  // head_dim^-0.5, by which BART scales its queries
};

// BartAttention `module` (self_attn, encoder_attn): q from x, k and v from
// `memory`, every projection with a bias.
ir::TensorId bartAttention(GraphBuilder &g, const std::string &module, ir::TensorId x, ir::TensorId memory,
                           ir::TensorId mask, const BartDims &dims)
{
    g.push(module);
    auto q = g.linear("q_proj", x, dims.hidden, true);
    auto k = g.linear("k_proj", memory, dims.hidden, true);
    auto v = g.linear("v_proj", memory, dims.hidden, true);
    AttentionSpec spec;
    spec.heads = spec.kvHeads = dims.heads;
    spec.headDim = dims.hidden / dims.heads;
    spec.scale = dims.scale;
    spec.mask = mask;
    auto o = g.linear("out_proj", attentionCore(g, q, k, v, spec), dims.hidden, true);
    g.pop();
    return o;
}

// Post-LayerNorm: norm(x + f(x)), the norm named `norm`.
template <typename F>
ir::TensorId postNorm(GraphBuilder &g, const std::string &norm, ir::TensorId x, F f)
{
    auto y = f(x);
    return g.layerNorm(norm, g.op("Add", {x, y}, g.shape(x)), kLayerNormEpsilon);
}

ir::TensorId feedForward(GraphBuilder &g, ir::TensorId x, const BartDims &dims)
{
    auto u = g.linear("fc1", x, dims.ffn, true);
    u = g.op("Gelu", {u}, g.shape(u));
    return g.linear("fc2", u, dims.hidden, true);
}

// A stack's input: the shared token embeddings (times sqrt(d_model) where
// scale_embedding is set), plus its learned positions, then
// layernorm_embedding.
ir::TensorId embedded(GraphBuilder &g, ir::TensorId shared, ir::TensorId ids, ir::TensorId positionIds,
                      std::int64_t positions, std::optional<ir::TensorId> embedScale)
{
    const std::int64_t h = g.shape(shared)[1];
    auto x = g.embedding("embed_tokens", shared, ids);
    if (embedScale)
        x = g.op("Mul", {x, *embedScale}, g.shape(x));
    g.push("embed_positions");
    auto table = g.parameter("weight", {positions + kPositionOffset, h});
    g.pop();
    auto p = g.embedding("embed_positions", table, positionIds);
    x = g.op("Add", {x, p}, g.shape(x));
    return g.layerNorm("layernorm_embedding", x, kLayerNormEpsilon);
}

} // namespace

// BartForConditionalGeneration (bart-base, bart-large): a post-LayerNorm
// encoder-decoder with learned positions, GELU MLPs, biases throughout, and
// the LM head tied to the shared embeddings, plus final_logits_bias (a
// buffer: an input here, no parameter). fp32, as BART was released.
// Optional knob scale_embedding (non-zero: embeddings times sqrt(d_model)).
ir::Graph buildBart(const std::string &name, const Knobs &knobs)
{
    const KnobCheck check(name, knobs);
    check.divides("heads", "hidden");
    check.atMost("seq", "positions");
    check.atMost("target_seq", "positions");
    const std::int64_t b = check["batch"], s = check["seq"], t = check["target_seq"], vocab = check["vocab"];
    const bool scaled = check.has("scale_embedding") && check["scale_embedding"] != 0;

    GraphBuilder g(name, ir::DType::F32);
    auto inputIds = g.input("input_ids", {b, s}, ir::DType::I64);
    auto decoderInputIds = g.input("decoder_input_ids", {b, t}, ir::DType::I64);
    auto labels = g.input("labels", {b, t}, ir::DType::I64);
    auto positionIds = g.input("position_ids", {1, s}, ir::DType::I64);
    auto decoderPositionIds = g.input("decoder_position_ids", {1, t}, ir::DType::I64);
    auto mask = g.input("attention_mask", {b, 1, 1, s}, ir::DType::F32);  // padding
    auto causalMask = g.input("decoder_attention_mask", {1, 1, t, t}, ir::DType::F32);
    const BartDims dims{check["hidden"], check["heads"], check["ffn"],
                        g.input("attention_scale", {}, ir::DType::F32)};
    std::optional<ir::TensorId> embedScale;
    if (scaled)
        embedScale = g.input("embed_scale", {}, ir::DType::F32);
    auto finalLogitsBias = g.input("final_logits_bias", {1, vocab}, ir::DType::F32);

    g.push("model");
    g.push("shared");
    auto shared = g.parameter("weight", {vocab, dims.hidden});
    g.pop();

    g.push("encoder");
    auto x = embedded(g, shared, inputIds, positionIds, check["positions"], embedScale);
    for (std::int64_t i = 0; i < check["layers"]; ++i) {
        g.push("layers." + std::to_string(i));
        x = postNorm(g, "self_attn_layer_norm", x,
                     [&](ir::TensorId n) { return bartAttention(g, "self_attn", n, n, mask, dims); });
        x = postNorm(g, "final_layer_norm", x, [&](ir::TensorId n) { return feedForward(g, n, dims); });
        g.pop();
    }
    const auto encoded = x;
    g.pop();

    g.push("decoder");
    auto y = embedded(g, shared, decoderInputIds, decoderPositionIds, check["positions"], embedScale);
    for (std::int64_t i = 0; i < check["decoder_layers"]; ++i) {
        g.push("layers." + std::to_string(i));
        y = postNorm(g, "self_attn_layer_norm", y,
                     [&](ir::TensorId n) { return bartAttention(g, "self_attn", n, n, causalMask, dims); });
        y = postNorm(g, "encoder_attn_layer_norm", y,
                     [&](ir::TensorId n) { return bartAttention(g, "encoder_attn", n, encoded, mask, dims); });
        y = postNorm(g, "final_layer_norm", y, [&](ir::TensorId n) { return feedForward(g, n, dims); });
        g.pop();
    }
    g.pop();
    g.pop();

    g.push("lm_head");
    auto logits = g.matmul(y, g.transpose(shared, {1, 0}));
    logits = g.op("Add", {logits, finalLogitsBias}, g.shape(logits));
    g.pop();
    g.markOutput(g.crossEntropyLoss(logits, labels));
    return g.take();
}

} // namespace tapestry::io::zoo
