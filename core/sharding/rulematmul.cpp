#include "sharding/oprule.h"

#include <algorithm>

namespace tapestry::sharding {

// Y[..., m, n] = A[..., m, k] · B[..., k, n]: batch dims map through (with
// numpy broadcasting), m and n to the output, k is summed over.
std::optional<DimMap> matmulRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() != 2 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &a = graph.tensor(op.inputs[0]).shape, &b = graph.tensor(op.inputs[1]).shape;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    if (a.empty() || b.empty())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    const std::size_t batchA = a.size() > 1 ? a.size() - 2 : 0, batchB = b.size() > 1 ? b.size() - 2 : 0;
    const std::size_t batch = std::max(batchA, batchB);
    m.inputs[0].assign(a.size(), -1);
    m.inputs[1].assign(b.size(), -1);
    for (std::size_t i = 0; i < batch; ++i) {
        const int loop = m.addLoop();
        m.outputs[0].push_back(loop);
        // Right-aligned; a dim of size 1 broadcast against a larger one stays whole.
        const std::int64_t size = y[i];
        if (i + batchA >= batch && a[i + batchA - batch] == size)
            m.inputs[0][i + batchA - batch] = loop;
        if (i + batchB >= batch && b[i + batchB - batch] == size)
            m.inputs[1][i + batchB - batch] = loop;
    }
    const int k = m.addLoop(true, true);
    m.inputs[0].back() = k;
    m.inputs[1][b.size() > 1 ? b.size() - 2 : 0] = k;
    if (a.size() > 1) {
        const int rows = m.addLoop();
        m.inputs[0][a.size() - 2] = rows;
        m.outputs[0].push_back(rows);
    }
    if (b.size() > 1) {
        const int cols = m.addLoop();
        m.inputs[1].back() = cols;
        m.outputs[0].push_back(cols);
    }
    if (m.outputs[0].size() != y.size())
        return std::nullopt;
    m.partial = PartialRule::OneOperand;
    m.forwardFlops = 2.0 * static_cast<double>(elementCount(y)) * static_cast<double>(a.back());
    m.backwardFactor = 2;  // dA = dY·Bᵀ and dB = Aᵀ·dY
    return m;
}

// Y = A'·B' + C with A' = A or Aᵀ (transA), B' likewise; C broadcasts to
// [m, n] and is added, so it must be a partial sum itself when k is split.
std::optional<DimMap> gemmRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() < 2 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &a = graph.tensor(op.inputs[0]).shape, &b = graph.tensor(op.inputs[1]).shape;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    if (a.size() != 2 || b.size() != 2 || y.size() != 2)
        return std::nullopt;
    const bool ta = ir::intAttr(op.attributes, "transA").value_or(0) != 0;
    const bool tb = ir::intAttr(op.attributes, "transB").value_or(0) != 0;
    DimMap m = emptyDimMap(op);
    const int rows = m.addLoop(), cols = m.addLoop(), k = m.addLoop(true, true);
    m.inputs[0] = ta ? std::vector<int>{k, rows} : std::vector<int>{rows, k};
    m.inputs[1] = tb ? std::vector<int>{cols, k} : std::vector<int>{k, cols};
    m.outputs[0] = {rows, cols};
    if (op.inputs.size() > 2) {
        const ir::Shape &c = graph.tensor(op.inputs[2]).shape;
        m.inputs[2].assign(c.size(), -1);
        for (std::size_t i = 0; i < c.size() && i < 2; ++i) {
            const std::size_t yd = 2 - c.size() + i;
            if (c[i] == y[yd])
                m.inputs[2][i] = m.outputs[0][yd];
        }
        m.additive[2] = true;
    }
    m.partial = PartialRule::OneOperand;
    m.forwardFlops = 2.0 * static_cast<double>(elementCount(y)) * static_cast<double>(ta ? a[0] : a[1]);
    m.backwardFactor = 2;
    return m;
}

} // namespace tapestry::sharding
