#include "sharding/oprule.h"

namespace tapestry::sharding {

// Softmax normalises over one axis, LayerNormalization and RMSNorm over the
// dims from `axis` on: those dims must stay whole (a split would need the
// statistics of the other devices), every other dim maps through.
std::optional<DimMap> normRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape;
    if (x.empty())
        return std::nullopt;
    const bool softmax = op.type == "Softmax" || op.type == "LogSoftmax";
    const std::size_t axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(-1), x.size());
    if (axis >= x.size())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < x.size(); ++d) {
        const bool normalised = softmax ? d == axis : d >= axis;
        m.inputs[0].push_back(m.addLoop(!normalised));
    }
    // Scale and bias cover the normalised dims, right-aligned.
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        const ir::Shape &s = graph.tensor(op.inputs[i]).shape;
        if (s.size() > x.size())
            return std::nullopt;
        for (std::size_t d = 0; d < s.size(); ++d) {
            const std::size_t xd = x.size() - s.size() + d;
            m.inputs[i].push_back(s[d] == x[xd] ? m.inputs[0][xd] : -1);
        }
    }
    // The output has x's shape; saved statistics (mean, inverse std) have
    // size 1 in the normalised dims.
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        const ir::Shape &s = graph.tensor(op.outputs[o]).shape;
        if (s.size() != x.size())
            return std::nullopt;
        for (std::size_t d = 0; d < s.size(); ++d)
            m.outputs[o].push_back(s[d] == x[d] ? m.inputs[0][d] : -1);
    }
    // Rough FLOPs per element: max, exp, sum, divide; mean, variance, scale.
    const double perElement = softmax ? 5.0 : op.type == "LayerNormalization" ? 8.0 : 6.0;
    m.forwardFlops = perElement * static_cast<double>(elementCount(x));
    return m;
}

} // namespace tapestry::sharding
