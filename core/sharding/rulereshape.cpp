#include "sharding/oprule.h"

namespace tapestry::sharding {

// A reshape keeps a split only where the dim survives or is the major factor
// of a merged or split group: [b, s, h] -> [b, s, a, d] keeps a split of h as
// a split of a (when a divides), and the minor factor d is never split.
std::optional<DimMap> reshapeRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &y = graph.tensor(op.outputs[0]).shape;
    if (elementCount(x) != elementCount(y))
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;  // the target shape operand
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    m.inputs[0].assign(x.size(), -1);
    m.outputs[0].assign(y.size(), -1);
    // Walk both shapes, cutting them into groups of equal element count.
    std::size_t i = 0, j = 0;
    while (i < x.size() || j < y.size()) {
        const std::size_t i0 = i, j0 = j;
        std::int64_t px = 1, py = 1;
        if (i < x.size())
            px *= x[i++];
        if (j < y.size())
            py *= y[j++];
        while (px != py) {
            if (px < py && i < x.size())
                px *= x[i++];
            else if (py < px && j < y.size())
                py *= y[j++];
            else
                return std::nullopt;
        }
        // Trailing size-1 dims join the group they follow.
        while (i < x.size() && x[i] == 1 && (j >= y.size() || y[j] != 1))
            ++i;
        while (j < y.size() && y[j] == 1 && (i >= x.size() || x[i] != 1))
            ++j;
        std::size_t majorX = i0, majorY = j0;
        while (majorX < i && x[majorX] == 1)
            ++majorX;
        while (majorY < j && y[majorY] == 1)
            ++majorY;
        for (std::size_t d = i0; d < i; ++d)
            if (d != majorX && x[d] != 1)
                m.inputs[0][d] = m.addLoop(false);
        for (std::size_t d = j0; d < j; ++d)
            if (d != majorY && y[d] != 1)
                m.outputs[0][d] = m.addLoop(false);
        if (majorX < i && majorY < j) {
            const int loop = m.addLoop();
            m.inputs[0][majorX] = loop;
            m.outputs[0][majorY] = loop;
        }
    }
    m.partial = PartialRule::Unary;
    return m;
}

// Transpose: output dim j is input dim perm[j].
std::optional<DimMap> transposeRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() != 1 || op.outputs.size() != 1)
        return std::nullopt;
    const std::size_t rank = graph.tensor(op.inputs[0]).shape.size();
    std::vector<std::int64_t> perm;
    if (auto p = ir::intsAttr(op.attributes, "perm"))
        perm = *p;
    else
        for (std::size_t d = 0; d < rank; ++d)
            perm.push_back(static_cast<std::int64_t>(rank - 1 - d));
    if (perm.size() != rank)
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < rank; ++d)
        m.inputs[0].push_back(m.addLoop());
    for (auto p : perm) {
        if (p < 0 || static_cast<std::size_t>(p) >= rank)
            return std::nullopt;
        m.outputs[0].push_back(m.inputs[0][static_cast<std::size_t>(p)]);
    }
    m.partial = PartialRule::Unary;
    return m;
}

// Expand broadcasts size-1 dims (right-aligned, as numpy): kept dims map
// through, broadcast ones are whole in the input.
std::optional<DimMap> expandRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &y = graph.tensor(op.outputs[0]).shape;
    if (x.size() > y.size())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    for (std::size_t d = 0; d < y.size(); ++d)
        m.outputs[0].push_back(m.addLoop());
    for (std::size_t d = 0; d < x.size(); ++d) {
        const std::size_t yd = y.size() - x.size() + d;
        m.inputs[0].push_back(x[d] == y[yd] ? m.outputs[0][yd] : -1);
    }
    m.partial = PartialRule::Unary;
    return m;
}

} // namespace tapestry::sharding
