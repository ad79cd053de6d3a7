#include "io/zoo/llamastack.h"

#include "io/zoo/attention.h"
#include "io/zoo/knobcheck.h"

namespace tapestry::io::zoo {

namespace {
constexpr double kRmsEpsilon = 1e-5;
} // namespace

ir::TensorId swiGlu(GraphBuilder &g, ir::TensorId x, std::int64_t ffn, const std::string &gate,
                    const std::string &up, const std::string &down)
{
    const std::int64_t h = g.shape(x).back();
    auto gated = g.linear(gate, x, ffn, false);
    gated = g.op("Silu", {gated}, g.shape(gated));
    auto u = g.linear(up, x, ffn, false);
    auto product = g.op("Mul", {gated, u}, g.shape(u));
    return g.linear(down, product, h, false);
}

ir::Graph buildLlamaStack(const std::string &name, const Knobs &knobs, const FeedForward &ffn)
{
    const KnobCheck check(name, knobs);
    check.divides("heads", "hidden");
    check.divides("kv_heads", "heads");
    check.evenQuotient("hidden", "heads");
    const std::int64_t h = check["hidden"], heads = check["heads"], kvHeads = check["kv_heads"],
                       b = check["batch"], s = check["seq"], vocab = check["vocab"];
    const std::int64_t headDim = h / heads;
    const bool tied = knobs.count("tied_embeddings") && knobs.at("tied_embeddings") != 0;

    GraphBuilder g(name, ir::DType::BF16);
    auto inputIds = g.input("input_ids", {b, s}, ir::DType::I64);
    auto labels = g.input("labels", {b, s}, ir::DType::I64);
    AttentionSpec spec;
    spec.heads = heads;
    spec.kvHeads = kvHeads;
    spec.headDim = headDim;
    spec.scale = g.input("attention_scale", {}, ir::DType::BF16);
    spec.mask = g.input("attention_mask", {1, 1, s, s}, ir::DType::BF16);  // causal
    spec.rotary = Rotary{g.input("rotary_cos", {1, 1, s, headDim}, ir::DType::BF16),
                         g.input("rotary_sin", {1, 1, s, headDim}, ir::DType::BF16)};

    g.push("model");
    g.push("embed_tokens");
    auto embed = g.parameter("weight", {vocab, h});
    g.pop();
    auto x = g.embedding("embed_tokens", embed, inputIds);
    for (std::int64_t i = 0; i < check["layers"]; ++i) {
        g.push("layers." + std::to_string(i));
        auto n = g.rmsNorm("input_layernorm", x, kRmsEpsilon);
        g.push("self_attn");
        auto q = g.linear("q_proj", n, heads * headDim, false);
        auto k = g.linear("k_proj", n, kvHeads * headDim, false);
        auto v = g.linear("v_proj", n, kvHeads * headDim, false);
        auto o = g.linear("o_proj", attentionCore(g, q, k, v, spec), h, false);
        g.pop();
        x = g.op("Add", {x, o}, g.shape(x));
        auto f = ffn(g, g.rmsNorm("post_attention_layernorm", x, kRmsEpsilon));
        x = g.op("Add", {x, f}, g.shape(x));
        g.pop();
    }
    x = g.rmsNorm("norm", x, kRmsEpsilon);
    g.pop();

    ir::TensorId logits;
    if (tied) {
        g.push("lm_head");
        logits = g.matmul(x, g.transpose(embed, {1, 0}));
        g.pop();
    } else {
        logits = g.linear("lm_head", x, vocab, false);
    }
    g.markOutput(g.crossEntropyLoss(logits, labels));
    return g.take();
}

} // namespace tapestry::io::zoo
