#include "sharding/opkinds.h"

#include "ir/hash.h"

#include <unordered_map>

namespace tapestry::sharding {

namespace {

// Input i of the op, or output i - inputs when i is past its inputs.
ir::TensorId tensorAt(const ir::Op &op, std::size_t i)
{
    return i < op.inputs.size() ? op.inputs[i] : op.outputs[i - op.inputs.size()];
}

bool alike(const ir::Graph &graph, const ir::Op &a, const ir::Op &b)
{
    if (a.type != b.type || a.domain != b.domain || a.inputs.size() != b.inputs.size() ||
        a.outputs.size() != b.outputs.size() || a.attributes != b.attributes)
        return false;
    for (std::size_t i = 0; i < a.inputs.size() + a.outputs.size(); ++i) {
        const ir::TensorId x = tensorAt(a, i), y = tensorAt(b, i);
        const ir::Tensor &s = graph.tensor(x), &t = graph.tensor(y);
        if (s.shape != t.shape || s.dtype != t.dtype || s.role != t.role)
            return false;
        for (std::size_t j = 0; j < i; ++j)
            if ((x == tensorAt(a, j)) != (y == tensorAt(b, j)))
                return false;
    }
    return true;
}

} // namespace

OpKinds::OpKinds(const ir::Graph &graph) : m_kind(graph.opCount(), -1)
{
    const auto arrays = graph.arrays().view();
    // Kinds by a hash of what alike() compares; equal hashes are compared
    // in full.
    std::unordered_map<std::uint64_t, std::vector<std::int32_t>> byHash;
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        const ir::OpId id(static_cast<std::int32_t>(i));
        std::uint64_t h = ir::hashMix(arrays.type(id), arrays.attributeHash(id));
        const auto inputs = arrays.inputs(id), outputs = arrays.outputs(id);
        h = ir::hashMix(h, inputs.size());
        h = ir::hashMix(h, outputs.size());
        for (const auto list : {inputs, outputs})
            for (std::size_t k = 0; k < list.size(); ++k) {
                const ir::TensorId t = list[k];
                h = ir::hashMix(h, static_cast<std::uint64_t>(arrays.dtype(t)) * 8 + static_cast<std::uint64_t>(arrays.role(t)));
                for (auto d : arrays.shape(t))
                    h = ir::hashMix(h, static_cast<std::uint64_t>(d));
            }
        auto &candidates = byHash[h];
        for (std::int32_t kind : candidates)
            if (alike(graph, graph.op(first(kind)), graph.op(id))) {
                m_kind[i] = kind;
                break;
            }
        if (m_kind[i] < 0) {
            m_kind[i] = static_cast<std::int32_t>(m_first.size());
            candidates.push_back(m_kind[i]);
            m_first.push_back(id);
        }
    }
}

} // namespace tapestry::sharding
