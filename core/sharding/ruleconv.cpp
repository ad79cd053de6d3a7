#include "sharding/oprule.h"

namespace tapestry::sharding {

// Y[N, O, out...] = conv(X[N, C, in...], W[O, C/g, kernel...]) + B[O]: batch
// and output channels split freely, input channels are summed over (only
// without groups), spatial dims never split (a split would need halos).
std::optional<DimMap> convRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() < 2 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &w = graph.tensor(op.inputs[1]).shape;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    if (x.size() < 3 || w.size() != x.size() || y.size() != x.size())
        return std::nullopt;
    const std::int64_t groups = ir::intAttr(op.attributes, "group").value_or(1);
    DimMap m = emptyDimMap(op);
    const int n = m.addLoop(), o = m.addLoop(), c = m.addLoop(groups == 1, true);
    m.inputs[0] = {n, c};
    m.inputs[1] = {o, c};
    m.outputs[0] = {n, o};
    double kernel = 1;
    for (std::size_t d = 2; d < x.size(); ++d) {
        m.inputs[0].push_back(m.addLoop(false));
        m.inputs[1].push_back(m.addLoop(false));
        m.outputs[0].push_back(m.addLoop(false));
        kernel *= static_cast<double>(w[d]);
    }
    if (op.inputs.size() > 2) {
        m.inputs[2] = {o};
        m.additive[2] = true;
    }
    m.partial = PartialRule::OneOperand;
    m.forwardFlops = 2.0 * static_cast<double>(elementCount(y)) * static_cast<double>(w[1]) * kernel;
    m.backwardFactor = 2;
    return m;
}

} // namespace tapestry::sharding
