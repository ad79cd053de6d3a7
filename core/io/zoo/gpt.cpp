#include "io/zoo/attention.h"
#include "io/zoo/families.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/knobcheck.h"

#include <array>

namespace tapestry::io::zoo {

namespace {

constexpr double kLayerNormEpsilon = 1e-5;

// Hugging Face's Conv1D: y = x · W + b with W stored [in, out].
ir::TensorId conv1d(GraphBuilder &g, const std::string &module, ir::TensorId x, std::int64_t out)
{
    return g.linear(module, x, out, true);
}

// GPT-2's fused query/key/value projection, c_attn: one Conv1D of weight
// [h, 3h] and bias [3h], its output split into q, k and v. The weight is
// held as [3, h, h], q's, k's and v's [in, out] weights stacked (Hugging
// Face's [h, 3h] is W.view(h, 3, h).permute(1, 0, 2) of it), the bias as
// [3, 1, h] (broadcast over the sequence), so that a split of their last
// dim splits each of q, k and v by heads (a column split of [h, 3h] would
// hand one device all of q and half of k). One batched matmul, as one fused GEMM:
// [b, 1, s, h] · [3, h, h] → [b, 3, s, h], split along that dim of 3.
std::array<ir::TensorId, 3> fusedQkv(GraphBuilder &g, ir::TensorId x)
{
    const ir::Shape xs = g.shape(x);
    const std::int64_t b = xs[0], s = xs[1], h = xs[2];
    g.push("c_attn");
    auto w = g.parameter("weight", {3, h, h});
    auto bias = g.parameter("bias", {3, 1, h});
    auto y = g.matmul(g.reshape(x, {b, 1, s, h}), w);
    y = g.op("Add", {y, bias}, g.shape(y));
    auto parts = g.opMulti("Split", {y}, {{b, 1, s, h}, {b, 1, s, h}, {b, 1, s, h}},
                           {{"axis", std::int64_t{1}}, {"split", std::vector<std::int64_t>{1, 1, 1}}});
    std::array<ir::TensorId, 3> qkv;
    for (std::size_t i = 0; i < 3; ++i)
        qkv[i] = g.reshape(parts[i], {b, s, h});
    g.pop();
    return qkv;
}

// One pre-LayerNorm block: x + attn(ln_1(x)), then + mlp(ln_2(·)), with
// Hugging Face's GPT2Block module names.
ir::TensorId gptBlock(GraphBuilder &g, ir::TensorId x, const AttentionSpec &spec, std::int64_t ffn)
{
    const std::int64_t h = g.shape(x).back();
    auto a = g.layerNorm("ln_1", x, kLayerNormEpsilon);
    g.push("attn");
    const auto [q, k, v] = fusedQkv(g, a);
    auto context = attentionCore(g, q, k, v, spec);
    auto o = conv1d(g, "c_proj", context, h);
    g.pop();
    x = g.op("Add", {x, o}, g.shape(x));
    auto m = g.layerNorm("ln_2", x, kLayerNormEpsilon);
    g.push("mlp");
    auto u = conv1d(g, "c_fc", m, ffn);
    u = g.op("Gelu", {u}, g.shape(u), {{"approximate", std::string("tanh")}});
    auto d = conv1d(g, "c_proj", u, h);
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
