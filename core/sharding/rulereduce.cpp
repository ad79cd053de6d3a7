#include "sharding/oprule.h"

#include <set>

namespace tapestry::sharding {

// ReduceSum and ReduceMean are linear: a split reduced dim leaves partial
// sums. ReduceMax is not: its reduced dims stay whole.
std::optional<DimMap> reduceRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &y = graph.tensor(op.outputs[0]).shape;
    const bool keepDims = ir::intAttr(op.attributes, "keepdims").value_or(1) != 0;
    std::set<std::size_t> axes;
    if (auto a = ir::intsAttr(op.attributes, "axes"))
        for (auto v : *a)
            axes.insert(normaliseAxis(v, x.size()));
    else
        for (std::size_t d = 0; d < x.size(); ++d)
            axes.insert(d);
    const bool linear = op.type != "ReduceMax";
    DimMap m = emptyDimMap(op);
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;  // axes given as an input
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    for (std::size_t d = 0; d < x.size(); ++d) {
        const bool reduced = axes.count(d) > 0;
        const int loop = reduced ? m.addLoop(linear, linear) : m.addLoop();
        m.inputs[0].push_back(loop);
        if (!reduced)
            m.outputs[0].push_back(loop);
        else if (keepDims)
            m.outputs[0].push_back(-1);
    }
    if (m.outputs[0].size() != y.size())
        return std::nullopt;
    if (linear)
        m.partial = PartialRule::Unary;
    m.forwardFlops = static_cast<double>(elementCount(x));
    return m;
}

} // namespace tapestry::sharding
