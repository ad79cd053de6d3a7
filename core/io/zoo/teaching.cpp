#include "io/zoo/families.h"
#include "io/zoo/graphbuilder.h"

namespace tapestry::io::zoo {

// The two-layer MLP of the sharding tutorials: Z = relu(X·A)·B, with
// X[batch, h1], A[h1, h2], B[h2, h1] (LESSONS.md, cases 2 and 3).
ir::Graph buildMlp(const std::string &name, const Knobs &knobs)
{
    const auto b = knobs.at("batch"), h1 = knobs.at("hidden"), h2 = knobs.at("ffn");
    GraphBuilder g(name);
    auto x = g.input("x", {b, h1}, ir::DType::F32);
    g.push("mlp");
    g.push("fc1");
    auto a = g.parameter("weight", {h1, h2});
    auto u = g.matmul(x, a);
    g.pop();
    g.push("act");
    auto r = g.op("Relu", {u}, g.shape(u));
    g.pop();
    g.push("fc2");
    auto w2 = g.parameter("weight", {h2, h1});
    auto z = g.matmul(r, w2);
    g.pop();
    g.pop();
    g.markOutput(z);
    return g.take();
}

// Y = X·B·C: two chained matmuls (LESSONS.md, cases 1 and 2).
ir::Graph buildAbc(const std::string &name, const Knobs &knobs)
{
    const auto b = knobs.at("batch"), k = knobs.at("hidden"), n = knobs.at("ffn");
    GraphBuilder g(name);
    auto x = g.input("x", {b, k}, ir::DType::F32);
    g.push("first");
    auto w1 = g.parameter("weight", {k, n});
    auto t = g.matmul(x, w1);
    g.pop();
    g.push("second");
    auto w2 = g.parameter("weight", {n, k});
    auto y = g.matmul(t, w2);
    g.pop();
    g.markOutput(y);
    return g.take();
}

} // namespace tapestry::io::zoo
