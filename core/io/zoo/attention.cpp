#include "io/zoo/attention.h"

namespace tapestry::io::zoo {

namespace {

// [b, s, n·d] -> [b, n, s, d]
ir::TensorId splitHeads(GraphBuilder &g, ir::TensorId x, std::int64_t heads, std::int64_t headDim)
{
    const auto &s = g.shape(x);
    auto r = g.reshape(x, {s[0], s[1], heads, headDim});
    return g.transpose(r, {0, 2, 1, 3});
}

// x·cos + rotate_half(x)·sin, rotate_half(x) = concat(-x2, x1) of x's halves.
ir::TensorId rotate(GraphBuilder &g, ir::TensorId x, const Rotary &rotary)
{
    const ir::Shape s = g.shape(x);
    const std::int64_t half = s.back() / 2;
    ir::Shape halfShape = s;
    halfShape.back() = half;
    auto halves = g.opMulti("Split", {x}, {halfShape, halfShape},
                            {{"axis", std::int64_t{-1}}, {"split", std::vector<std::int64_t>{half, half}}});
    auto negated = g.op("Neg", {halves[1]}, halfShape);
    auto rotated = g.op("Concat", {negated, halves[0]}, s, {{"axis", std::int64_t{-1}}});
    auto withCos = g.op("Mul", {x, rotary.cos}, s);
    auto withSin = g.op("Mul", {rotated, rotary.sin}, s);
    return g.op("Add", {withCos, withSin}, s);
}

// Rotary embedding of a head's leading `dims` dims (GPT-NeoX's rotary_pct,
// GPT-J's rotary_dim), the rest passed through: Split, rotate, Concat.
ir::TensorId rotatePartly(GraphBuilder &g, ir::TensorId x, const Rotary &rotary, std::int64_t dims)
{
    const ir::Shape s = g.shape(x);
    if (dims <= 0 || dims >= s.back())
        return rotate(g, x, rotary);
    ir::Shape turned = s, passed = s;
    turned.back() = dims;
    passed.back() = s.back() - dims;
    auto parts = g.opMulti("Split", {x}, {turned, passed},
                           {{"axis", std::int64_t{-1}}, {"split", std::vector<std::int64_t>{dims, s.back() - dims}}});
    auto rotated = rotate(g, parts[0], rotary);
    return g.op("Concat", {rotated, parts[1]}, s, {{"axis", std::int64_t{-1}}});
}

// [b, kv, s, d] -> [b, kv·groups, s, d], as Hugging Face's repeat_kv does it.
ir::TensorId repeatKv(GraphBuilder &g, ir::TensorId x, std::int64_t groups)
{
    const ir::Shape s = g.shape(x);
    auto r = g.reshape(x, {s[0], s[1], 1, s[2], s[3]});
    const ir::Shape expanded{s[0], s[1], groups, s[2], s[3]};
    auto e = g.op("Expand", {r}, expanded, {{"shape", expanded}});
    return g.reshape(e, {s[0], s[1] * groups, s[2], s[3]});
}

} // namespace

ir::TensorId attentionCore(GraphBuilder &g, ir::TensorId q, ir::TensorId k, ir::TensorId v,
                           const AttentionSpec &spec)
{
    const std::int64_t b = g.shape(q)[0], sq = g.shape(q)[1];
    auto qh = splitHeads(g, q, spec.heads, spec.headDim);
    auto kh = splitHeads(g, k, spec.kvHeads, spec.headDim);
    const std::int64_t valueDim = spec.valueDim > 0 ? spec.valueDim : spec.headDim;
    auto vh = splitHeads(g, v, spec.kvHeads, valueDim);
    if (spec.rotary) {
        g.push("rotary_emb");
        qh = rotatePartly(g, qh, *spec.rotary, spec.rotaryDim);
        kh = rotatePartly(g, kh, *spec.rotary, spec.rotaryDim);
        g.pop();
    }
    if (spec.kvHeads != spec.heads) {
        kh = repeatKv(g, kh, spec.heads / spec.kvHeads);
        vh = repeatKv(g, vh, spec.heads / spec.kvHeads);
    }
    auto kt = g.transpose(kh, {0, 1, 3, 2});
    auto scores = g.matmul(qh, kt);
    const ir::Shape scoreShape = g.shape(scores);
    if (spec.scale)
        scores = g.op("Mul", {scores, *spec.scale}, scoreShape);
    scores = g.op("Add", {scores, spec.mask}, scoreShape);
    auto probs = g.op("Softmax", {scores}, scoreShape, {{"axis", std::int64_t{-1}}});
    auto context = g.matmul(probs, vh);
    auto merged = g.transpose(context, {0, 2, 1, 3});
    return g.reshape(merged, {b, sq, spec.heads * valueDim});
}

} // namespace tapestry::io::zoo
