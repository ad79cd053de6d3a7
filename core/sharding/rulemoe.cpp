#include "sharding/oprule.h"

namespace tapestry::sharding {

// TopK(x, axis): the other dims map through, the searched axis stays whole.
std::optional<DimMap> topKRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape;
    if (x.empty())
        return std::nullopt;
    const std::size_t axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(-1), x.size());
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < x.size(); ++d)
        m.inputs[0].push_back(m.addLoop(d != axis));
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;  // k given as an input
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    const int k = m.addLoop(false);
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        if (graph.tensor(op.outputs[o]).shape.size() != x.size())
            return std::nullopt;
        m.outputs[o] = m.inputs[0];
        m.outputs[o][axis] = k;
    }
    m.forwardFlops = static_cast<double>(elementCount(x));
    return m;
}

// MoEDispatch(tokens[T, h], expert_ids[T, k]) -> one [capacity, h] buffer per
// expert; MoECombine(buffers..., weights[T, k], expert_ids[T, k]) -> [T, h].
// Tokens split over an axis fill each device's share of every expert's
// capacity slots, so the token dim maps to the capacity dim and h to h; the
// k chosen experts stay whole. (Experts themselves are separate tensors: a
// plan places them by their weights' specs, not by a dim of these ops.)
std::optional<DimMap> moeRule(const ir::Graph &graph, const ir::Op &op)
{
    const bool dispatch = op.type == "MoEDispatch";
    auto rank2 = [&](ir::TensorId t) { return graph.tensor(t).shape.size() == 2; };
    for (auto t : op.inputs)
        if (!rank2(t))
            return std::nullopt;
    for (auto t : op.outputs)
        if (!rank2(t))
            return std::nullopt;
    if (op.outputs.empty() || op.inputs.size() < (dispatch ? 2u : 3u))
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    const int tokens = m.addLoop(), hidden = m.addLoop(), chosen = m.addLoop(false);
    const std::size_t routing = dispatch ? 1 : op.inputs.size() - 2;  // first [T, k] input
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
        m.inputs[i] = i >= routing ? std::vector<int>{tokens, chosen} : std::vector<int>{tokens, hidden};
    for (std::size_t o = 0; o < op.outputs.size(); ++o)
        m.outputs[o] = {tokens, hidden};
    // Dispatch is linear in the tokens; combine is a weighted sum of expert
    // outputs that are products with the routing weights.
    m.partial = dispatch ? PartialRule::Unary : PartialRule::None;
    const ir::Shape &out = graph.tensor(op.outputs[0]).shape;
    const double k = static_cast<double>(graph.tensor(op.inputs[routing]).shape[1]);
    m.forwardFlops = dispatch ? 0.0 : 2.0 * k * static_cast<double>(elementCount(out));
    return m;
}

} // namespace tapestry::sharding
