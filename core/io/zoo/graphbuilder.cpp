#include "io/zoo/graphbuilder.h"

#include "ir/error.h"
#include "ir/sizes.h"

#include <algorithm>

namespace tapestry::io::zoo {

GraphBuilder::GraphBuilder(std::string modelName, ir::DType dtype) : m_dtype(dtype)
{
    m_graph.name = std::move(modelName);
}

void GraphBuilder::push(const std::string &scope)
{
    m_scope.push_back(scope);
    m_prefix += scope + "/";
}

void GraphBuilder::pop()
{
    m_prefix.resize(m_prefix.size() - m_scope.back().size() - 1);
    m_scope.pop_back();
}

std::string GraphBuilder::scoped(const std::string &leaf) const
{
    return m_prefix + leaf;
}

void GraphBuilder::fail(const std::string &where, const std::string &problem) const
{
    throw TapestryError(Error{"zoo:" + m_graph.name, where, problem});
}

ir::TensorId GraphBuilder::addTensor(const std::string &name, ir::Shape shape, ir::DType dtype, ir::Role role)
{
    // Checked as the model grows, so that sizes past the limits are refused
    // before they are built, and before any count of them overflows.
    std::int64_t bytes = 0;
    if (auto problem = ir::tensorSizeProblem(shape, ir::byteSize(dtype), bytes))
        fail("tensor '" + name + "'", *problem);
    m_bytes += bytes;
    if (m_bytes > ir::kMaxModelBytes)
        fail("tensor '" + name + "'", "the model's tensors hold more than " + ir::limitBytesText(ir::kMaxModelBytes) +
                                          " together, the most a model may hold");
    return m_graph.addTensor(name, std::move(shape), dtype, role);
}

ir::TensorId GraphBuilder::input(const std::string &name, ir::Shape shape, ir::DType dtype)
{
    return addTensor(name, std::move(shape), dtype, ir::Role::Input);
}

ir::TensorId GraphBuilder::parameter(const std::string &leaf, ir::Shape shape)
{
    // Parameters take PyTorch's dotted state-dict names: "h.3.attn.c_attn.weight".
    std::string name;
    for (const auto &s : m_scope)
        name += s + ".";
    return addTensor(name + leaf, std::move(shape), m_dtype, ir::Role::Parameter);
}

std::vector<ir::TensorId> GraphBuilder::opMulti(const std::string &type,
                                                std::vector<ir::TensorId> inputs,
                                                std::vector<ir::Shape> shapes,
                                                ir::Attributes attributes)
{
    if (static_cast<std::int64_t>(m_graph.opCount()) >= ir::kMaxOps)
        fail({}, "the model has more than " + std::to_string(ir::kMaxOps) + " ops, the most Tapestry plans");
    std::string name = scoped(type);
    if (m_graph.findOp(name)) {
        const std::string base = name + '_';
        int &k = m_lastSuffix[name];
        do
            ++k;
        while (m_graph.findOp(base + std::to_string(k)));
        name = base + std::to_string(k);
    }
    std::vector<ir::TensorId> outputs;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        std::string tensorName = name;
        tensorName += ':';
        tensorName += std::to_string(i);
        outputs.push_back(addTensor(tensorName, std::move(shapes[i]), m_dtype, ir::Role::Activation));
    }
    m_graph.addOp(type, name, std::move(inputs), outputs, std::move(attributes));
    return outputs;
}

ir::TensorId GraphBuilder::op(const std::string &type, std::vector<ir::TensorId> inputs,
                              ir::Shape shape, ir::Attributes attributes)
{
    return opMulti(type, std::move(inputs), {std::move(shape)}, std::move(attributes))[0];
}

ir::TensorId GraphBuilder::matmul(ir::TensorId a, ir::TensorId b)
{
    // numpy broadcasting of the batch dims, as ONNX's MatMul does.
    const ir::Shape &x = shape(a), &y = shape(b);
    ir::Shape s = x.size() >= y.size() ? x : y;
    const std::size_t batch = s.size() - 2;
    for (std::size_t i = 0; i < batch && x.size() >= 2 && y.size() >= 2; ++i) {
        const std::size_t fromEnd = s.size() - i;  // position counted from the end
        const std::int64_t dx = fromEnd <= x.size() ? x[x.size() - fromEnd] : 1;
        const std::int64_t dy = fromEnd <= y.size() ? y[y.size() - fromEnd] : 1;
        s[i] = std::max(dx, dy);
    }
    s[s.size() - 2] = x.size() >= 2 ? x[x.size() - 2] : 1;
    s.back() = y.back();
    return op("MatMul", {a, b}, s);
}

ir::TensorId GraphBuilder::linear(const std::string &module, ir::TensorId x, std::int64_t out,
                                  bool bias)
{
    push(module);
    const std::int64_t in = shape(x).back();
    auto w = parameter("weight", {in, out});
    auto y = matmul(x, w);
    if (bias) {
        auto b = parameter("bias", {out});
        y = op("Add", {y, b}, shape(y));
    }
    pop();
    return y;
}

ir::TensorId GraphBuilder::reshape(ir::TensorId x, ir::Shape s)
{
    return op("Reshape", {x}, s, {{"shape", s}});
}

ir::TensorId GraphBuilder::transpose(ir::TensorId x, std::vector<std::int64_t> perm)
{
    ir::Shape s;
    for (auto p : perm)
        s.push_back(shape(x)[static_cast<std::size_t>(p)]);
    return op("Transpose", {x}, s, {{"perm", perm}});
}

ir::TensorId GraphBuilder::layerNorm(const std::string &module, ir::TensorId x, double epsilon)
{
    push(module);
    const std::int64_t h = shape(x).back();
    auto w = parameter("weight", {h});
    auto b = parameter("bias", {h});
    auto y = op("LayerNormalization", {x, w, b}, shape(x),
                {{"axis", std::int64_t{-1}}, {"epsilon", epsilon}});
    pop();
    return y;
}

ir::TensorId GraphBuilder::rmsNorm(const std::string &module, ir::TensorId x, double epsilon)
{
    push(module);
    auto w = parameter("weight", {shape(x).back()});
    auto y = op("RMSNorm", {x, w}, shape(x), {{"axis", std::int64_t{-1}}, {"epsilon", epsilon}});
    pop();
    return y;
}

ir::TensorId GraphBuilder::embedding(const std::string &module, ir::TensorId table, ir::TensorId ids)
{
    push(module);
    ir::Shape s = shape(ids);
    s.push_back(shape(table).back());
    auto y = op("Gather", {table, ids}, s, {{"axis", std::int64_t{0}}});
    pop();
    return y;
}

ir::TensorId GraphBuilder::crossEntropyLoss(ir::TensorId logits, ir::TensorId labels)
{
    push("loss");
    auto loss = op("SoftmaxCrossEntropyLoss", {logits, labels}, {},
                   {{"reduction", std::string("mean")}});
    pop();
    return loss;
}

ir::Graph GraphBuilder::take()
{
    return std::move(m_graph);
}

} // namespace tapestry::io::zoo
