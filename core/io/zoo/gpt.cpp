#include "io/zoo/attention.h"
#include "io/zoo/families.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/knobcheck.h"

namespace tapestry::io::zoo {

namespace {

constexpr double kLayerNormEpsilon = 1e-5;

// One pre-LayerNorm block: x + attn(ln_1(x)), then + mlp(ln_2(·)).
ir::TensorId gptBlock(GraphBuilder &g, ir::TensorId x, const AttentionSpec &spec, std::int64_t ffn)
{
    const std::int64_t h = g.shape(x).back();
    auto a = g.layerNorm("ln_1", x, kLayerNormEpsilon);
    g.push("attn");
    auto q = g.linear("q_proj", a, h, true);
    auto k = g.linear("k_proj", a, h, true);
    auto v = g.linear("v_proj", a, h, true);
    auto context = attentionCore(g, q, k, v, spec);
    auto o = g.linear("out_proj", context, h, true);
    g.pop();
    x = g.op("Add", {x, o}, g.shape(x));
    auto m = g.layerNorm("ln_2", x, kLayerNormEpsilon);
    g.push("mlp");
    auto u = g.linear("fc_in", m, ffn, true);
    u = g.op("Gelu", {u}, g.shape(u), {{"approximate", std::string("tanh")}});
    auto d = g.linear("fc_out", u, h, true);
    g.pop();
    return g.op("Add", {x, d}, g.shape(x));
}

// GPT-2 and GPT-3 share the architecture: learned positions, pre-LayerNorm
// blocks, LM head tied to the token embedding. GPT-3's alternating locally
// banded attention changes the mask's values, not the graph, so dense
// attention stands for both.
ir::Graph buildGpt(const std::string &name, const Knobs &knobs, ir::DType dtype)
{
    const KnobCheck check(name, knobs);
    check.divides("heads", "hidden");
    check.atMost("seq", "positions");
    const std::int64_t layers = check["layers"], h = check["hidden"], heads = check["heads"],
                       b = check["batch"], s = check["seq"];

    GraphBuilder g(name, dtype);
    auto inputIds = g.input("input_ids", {b, s}, ir::DType::I64);
    auto positionIds = g.input("position_ids", {1, s}, ir::DType::I64);
    auto labels = g.input("labels", {b, s}, ir::DType::I64);
    AttentionSpec spec;
    spec.heads = spec.kvHeads = heads;
    spec.headDim = h / heads;
    spec.scale = g.input("attention_scale", {}, dtype);
    spec.mask = g.input("attention_mask", {1, 1, s, s}, dtype);  // causal: -inf above the diagonal

    g.push("transformer");
    g.push("wte");
    auto wte = g.parameter("weight", {check["vocab"], h});
    g.pop();
    g.push("wpe");
    auto wpe = g.parameter("weight", {check["positions"], h});
    g.pop();
    auto tokens = g.embedding("wte", wte, inputIds);
    auto positions = g.embedding("wpe", wpe, positionIds);
    auto x = g.op("Add", {tokens, positions}, g.shape(tokens));
    for (std::int64_t i = 0; i < layers; ++i) {
        g.push("h." + std::to_string(i));
        x = gptBlock(g, x, spec, check["ffn"]);
        g.pop();
    }
    x = g.layerNorm("ln_f", x, kLayerNormEpsilon);
    g.pop();

    g.push("lm_head");
    auto logits = g.matmul(x, g.transpose(wte, {1, 0}));
    g.pop();
    g.markOutput(g.crossEntropyLoss(logits, labels));
    return g.take();
}

} // namespace

// GPT-2 trains in fp32 (as released); GPT-3 in bf16, as large models do now.
ir::Graph buildGpt2(const std::string &name, const Knobs &knobs)
{
    return buildGpt(name, knobs, ir::DType::F32);
}

ir::Graph buildGpt3(const std::string &name, const Knobs &knobs)
{
    return buildGpt(name, knobs, ir::DType::BF16);
}

} // namespace tapestry::io::zoo
