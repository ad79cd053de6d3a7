#include "sharding/oprule.h"

namespace tapestry::sharding {

// ScatterND(data[r dims], indices[q dims, the last k], updates[q-1 + r-k
// dims]) writes each update at the first k coordinates its index names, as
// GSPMD's scatter rule has it: the dims past those k (the slices written
// whole) split freely, data's, the updates' and the output's together; the
// indexed dims and the updates' leading dims stay whole, since an update
// may land on any row. Swin writes its shifted windows' attention mask so.
std::optional<DimMap> scatterNDRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() != 3 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &data = graph.tensor(op.inputs[0]).shape, &indices = graph.tensor(op.inputs[1]).shape,
                    &updates = graph.tensor(op.inputs[2]).shape;
    if (indices.empty() || graph.tensor(op.outputs[0]).shape != data)
        return std::nullopt;
    const auto k = static_cast<std::size_t>(indices.back());
    const std::size_t q = indices.size();
    if (k > data.size() || updates.size() != q - 1 + data.size() - k)
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t j = 0; j + 1 < q; ++j) {
        if (updates[j] != indices[j])
            return std::nullopt;
        const int loop = m.addLoop(false);
        m.inputs[1].push_back(loop);
        m.inputs[2].push_back(loop);
    }
    m.inputs[1].push_back(m.addLoop(false));
    for (std::size_t d = 0; d < data.size(); ++d) {
        if (d < k) {
            m.inputs[0].push_back(m.addLoop(false));
            continue;
        }
        if (updates[q - 1 + d - k] != data[d])
            return std::nullopt;
        const int loop = m.addLoop();
        m.inputs[0].push_back(loop);
        m.inputs[2].push_back(loop);
    }
    m.outputs[0] = m.inputs[0];
    m.forwardFlops = static_cast<double>(elementCount(updates));
    return m;
}

} // namespace tapestry::sharding
