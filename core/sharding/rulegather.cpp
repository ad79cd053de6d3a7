#include "sharding/oprule.h"

namespace tapestry::sharding {

// Y = Gather(data, indices, axis): data's other dims and the indices' dims
// map to the output. A split of the gathered axis (a vocabulary-parallel
// embedding table) leaves each device the rows it holds and zeros for the
// rest: a partial sum, as Megatron's VocabParallelEmbedding reduces it.
std::optional<DimMap> gatherRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() != 2 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &data = graph.tensor(op.inputs[0]).shape, &idx = graph.tensor(op.inputs[1]).shape;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    if (data.empty())
        return std::nullopt;
    const std::size_t axis = normaliseAxis(ir::intAttr(op.attributes, "axis").value_or(0), data.size());
    if (axis >= data.size() || y.size() != data.size() - 1 + idx.size())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < data.size(); ++d)
        m.inputs[0].push_back(m.addLoop(true, d == axis));
    for (std::size_t d = 0; d < idx.size(); ++d)
        m.inputs[1].push_back(m.addLoop());
    for (std::size_t d = 0; d < axis; ++d)
        m.outputs[0].push_back(m.inputs[0][d]);
    for (auto loop : m.inputs[1])
        m.outputs[0].push_back(loop);
    for (std::size_t d = axis + 1; d < data.size(); ++d)
        m.outputs[0].push_back(m.inputs[0][d]);
    m.partial = PartialRule::Unary;
    m.forwardFlops = 0;
    return m;
}

} // namespace tapestry::sharding
