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

} // namespace tapestry::sharding
