#include "sharding/opkinds.h"

#include "ir/hash.h"

#include <algorithm>
#include <unordered_map>

namespace tapestry::sharding {

namespace {

// Input i of the op, or output i - inputs when i is past its inputs.
ir::TensorId tensorAt(const ir::GraphArrays::View &arrays, ir::OpId op, std::size_t i)
{
    const auto inputs = arrays.inputs(op);
    return i < inputs.size() ? inputs[i] : arrays.outputs(op)[i - inputs.size()];
}

bool alike(const ir::Graph &graph, const ir::GraphArrays::View &arrays, ir::OpId a, ir::OpId b)
{
    const std::size_t n = arrays.inputs(a).size() + arrays.outputs(a).size();
    if (arrays.type(a) != arrays.type(b) || arrays.attributeHash(a) != arrays.attributeHash(b) ||
        arrays.inputs(a).size() != arrays.inputs(b).size() || arrays.outputs(a).size() != arrays.outputs(b).size())
        return false;
    for (std::size_t i = 0; i < n; ++i) {
        const ir::TensorId x = tensorAt(arrays, a, i), y = tensorAt(arrays, b, i);
        const auto s = arrays.shape(x), t = arrays.shape(y);
        if (arrays.dtype(x) != arrays.dtype(y) || arrays.role(x) != arrays.role(y) ||
            !std::equal(s.begin(), s.end(), t.begin(), t.end()))
            return false;
        for (std::size_t j = 0; j < i; ++j)
            if ((x == tensorAt(arrays, a, j)) != (y == tensorAt(arrays, b, j)))
                return false;
    }
    // Equal hashes of the domain and attributes: compared in full.
    const ir::Op &p = graph.op(a), &q = graph.op(b);
    return p.domain == q.domain && p.attributes == q.attributes;
}

} // namespace

OpKinds::OpKinds(const ir::Graph &graph) : m_kind(graph.opCount(), -1)
{
    const auto arrays = graph.arrays().view();
    // Kinds by a hash of what alike() compares: the last kind of each hash,
    // and before each kind the one of its hash made before it; equal hashes
    // are compared in full.
    std::unordered_map<std::uint64_t, std::int32_t> lastOfHash;
    std::vector<std::int32_t> previousOfHash;
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        const ir::OpId id(static_cast<std::int32_t>(i));
        std::uint64_t h = ir::hashMix(arrays.type(id), arrays.attributeHash(id));
        const auto inputs = arrays.inputs(id), outputs = arrays.outputs(id);
        h = ir::hashMix(h, inputs.size());
        for (const auto list : {inputs, outputs})
            for (const ir::TensorId t : list) {
                h = ir::hashMix(h, static_cast<std::uint64_t>(arrays.dtype(t)) * 8 + static_cast<std::uint64_t>(arrays.role(t)));
                for (auto d : arrays.shape(t))
                    h = ir::hashMix(h, static_cast<std::uint64_t>(d));
            }
        const auto last = lastOfHash.try_emplace(h, -1).first;
        for (std::int32_t kind = last->second; kind >= 0; kind = previousOfHash[static_cast<std::size_t>(kind)])
            if (alike(graph, arrays, first(kind), id)) {
                m_kind[i] = kind;
                break;
            }
        if (m_kind[i] < 0) {
            m_kind[i] = static_cast<std::int32_t>(m_first.size());
            m_first.push_back(id);
            previousOfHash.push_back(last->second);
            last->second = m_kind[i];
        }
    }
}

} // namespace tapestry::sharding
