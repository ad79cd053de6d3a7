#include "sharding/oprule.h"

namespace tapestry::sharding {

// Concat and Split keep every dim but their axis, which stays whole (a split
// of it would interleave the pieces).
std::optional<DimMap> concatRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    if (y.empty())
        return std::nullopt;
    const std::size_t axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(0), y.size());
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < y.size(); ++d)
        m.outputs[0].push_back(m.addLoop(d != axis));
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (graph.tensor(op.inputs[i]).shape.size() != y.size())
            return std::nullopt;
        m.inputs[i] = m.outputs[0];
        // Each input's part of the axis is its own, never split either.
        m.inputs[i][axis] = m.addLoop(false);
    }
    m.outputs[0][axis] = m.addLoop(false);
    m.partial = PartialRule::AllOperands;
    return m;
}

std::optional<DimMap> splitRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape;
    if (x.empty())
        return std::nullopt;
    const std::size_t axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(0), x.size());
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < x.size(); ++d)
        m.inputs[0].push_back(m.addLoop(d != axis));
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;  // split sizes given as an input
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        if (graph.tensor(op.outputs[o]).shape.size() != x.size())
            return std::nullopt;
        m.outputs[o] = m.inputs[0];
        m.outputs[o][axis] = m.addLoop(false);
    }
    m.partial = PartialRule::Unary;
    return m;
}

// Slice keeps every dim it does not slice (BERT's pooler takes token 0 of
// [b, s, h]: the batch and hidden dims stay split); a sliced dim stays
// whole. The sliced axes are the "axes" attribute (ONNX's constant input,
// read into it), by default the first len(starts); starts, ends, axes and
// steps given as tensors are shape operands.
std::optional<DimMap> sliceRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    const auto starts = ir::intsAttr(op.attributes, "starts");
    if (x.empty() || x.size() != y.size() || !starts)
        return std::nullopt;
    std::vector<bool> sliced(x.size(), false);
    std::vector<std::int64_t> axes(starts->size());
    for (std::size_t i = 0; i < axes.size(); ++i)
        axes[i] = static_cast<std::int64_t>(i);
    axes = ir::intsAttr(op.attributes, "axes").value_or(axes);
    for (auto a : axes) {
        if (a < -static_cast<std::int64_t>(x.size()) || a >= static_cast<std::int64_t>(x.size()))
            return std::nullopt;
        sliced[normaliseAxis(a, x.size())] = true;
    }
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < x.size(); ++d) {
        if (sliced[d]) {
            m.inputs[0].push_back(m.addLoop(false));
            m.outputs[0].push_back(m.addLoop(false));
        } else {
            const int loop = m.addLoop(x[d] == y[d]);
            m.inputs[0].push_back(loop);
            m.outputs[0].push_back(loop);
        }
    }
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    m.partial = PartialRule::Unary;
    return m;
}

} // namespace tapestry::sharding
