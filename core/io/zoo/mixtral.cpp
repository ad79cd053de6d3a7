#include "io/zoo/families.h"
#include "io/zoo/knobcheck.h"
#include "io/zoo/llamastack.h"

namespace tapestry::io::zoo {

namespace {

struct MoeDims {
    std::int64_t experts, topK, ffn;
};

// Sparse mixture of experts: the router picks top_k experts per token
// (Softmax, TopK, weights renormalised over the chosen k as Mixtral does),
// MoEDispatch sends each expert its tokens (a fixed capacity per expert, so
// that shapes are static), each expert is a SwiGLU FFN, and MoECombine sums
// the weighted expert outputs back per token.
ir::TensorId sparseMoe(GraphBuilder &g, ir::TensorId x, const MoeDims &dims)
{
    const ir::Shape xs = g.shape(x);
    const std::int64_t b = xs[0], s = xs[1], h = xs[2], tokens = b * s;
    const std::int64_t capacity = (tokens * dims.topK + dims.experts - 1) / dims.experts;
    g.push("block_sparse_moe");
    auto flat = g.reshape(x, {tokens, h});
    auto routerLogits = g.linear("gate", flat, dims.experts, false);
    auto probs = g.op("Softmax", {routerLogits}, g.shape(routerLogits), {{"axis", std::int64_t{-1}}});
    auto top = g.opMulti("TopK", {probs}, {{tokens, dims.topK}, {tokens, dims.topK}},
                         {{"axis", std::int64_t{-1}}, {"k", dims.topK}});
    g.setDType(top[1], ir::DType::I64);
    auto sum = g.op("ReduceSum", {top[0]}, {tokens, 1},
                    {{"axes", std::vector<std::int64_t>{-1}}, {"keepdims", std::int64_t{1}}});
    auto weights = g.op("Div", {top[0], sum}, {tokens, dims.topK});
    const ir::Attributes routing{{"experts", dims.experts}, {"top_k", dims.topK}, {"capacity", capacity}};
    auto dispatched = g.opMulti("MoEDispatch", {flat, top[1]},
                                std::vector<ir::Shape>(static_cast<std::size_t>(dims.experts),
                                                       ir::Shape{capacity, h}),
                                routing);
    std::vector<ir::TensorId> combineInputs;
    for (std::int64_t e = 0; e < dims.experts; ++e) {
        g.push("experts." + std::to_string(e));
        combineInputs.push_back(swiGlu(g, dispatched[static_cast<std::size_t>(e)], dims.ffn, "w1", "w3", "w2"));
        g.pop();
    }
    combineInputs.push_back(weights);
    combineInputs.push_back(top[1]);
    auto combined = g.op("MoECombine", std::move(combineInputs), {tokens, h}, routing);
    auto y = g.reshape(combined, {b, s, h});
    g.pop();
    return y;
}

} // namespace

// Mixtral: the LLaMA decoder with a sparse mixture of SwiGLU experts in place
// of the MLP.
ir::Graph buildMixtral(const std::string &name, const Knobs &knobs)
{
    const KnobCheck check(name, knobs);
    check.atMost("top_k", "experts");
    const MoeDims dims{check["experts"], check["top_k"], check["ffn"]};
    return buildLlamaStack(name, knobs, [dims](GraphBuilder &g, ir::TensorId x) {
        return sparseMoe(g, x, dims);
    });
}

} // namespace tapestry::io::zoo
