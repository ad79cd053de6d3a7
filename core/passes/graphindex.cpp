#include "passes/graphindex.h"

#include <functional>
#include <queue>
#include <unordered_map>

namespace tapestry::passes {

namespace {

// splitmix64's finaliser over a running hash.
std::uint64_t mix(std::uint64_t h, std::uint64_t v)
{
    std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

} // namespace

GraphIndex::GraphIndex(const ir::Graph &graph)
{
    const std::size_t ops = graph.opCount(), tensors = graph.tensorCount();
    m_producer.resize(tensors);
    m_role.resize(tensors);
    m_form.resize(tensors);
    for (std::size_t i = 0; i < tensors; ++i) {
        const ir::Tensor &tensor = graph.tensors()[i];
        m_producer[i] = tensor.producer;
        m_role[i] = tensor.role;
        std::uint64_t h = mix(1, static_cast<std::uint64_t>(tensor.role == ir::Role::Parameter) + 1);
        h = mix(h, tensor.shape.size());
        for (auto d : tensor.shape)
            h = mix(h, static_cast<std::uint64_t>(d));
        m_form[i] = mix(h, static_cast<std::uint64_t>(tensor.dtype));
    }
    // Ids outside the graph are dropped here, as the graph's own links drop them.
    auto known = [tensors](ir::TensorId t) { return t.valid() && t.index() < tensors; };
    m_inputStart.reserve(ops + 1);
    m_outputStart.reserve(ops + 1);
    m_inputs.reserve(2 * ops);
    m_outputs.reserve(ops);
    m_consumerStart.assign(tensors + 1, 0);
    m_type.reserve(ops);
    std::unordered_map<std::string_view, std::uint32_t> typeNumbers;
    for (const ir::Op &op : graph.ops()) {
        auto [it, fresh] = typeNumbers.try_emplace(op.type, static_cast<std::uint32_t>(m_typeNames.size()));
        if (fresh)
            m_typeNames.push_back(op.type);
        m_type.push_back(it->second);
        for (ir::TensorId t : op.inputs) {
            m_inputs.push_back(t);
            if (known(t))
                ++m_consumerStart[t.index() + 1];
        }
        for (ir::TensorId t : op.outputs)
            m_outputs.push_back(t);
        m_inputStart.push_back(static_cast<std::int32_t>(m_inputs.size()));
        m_outputStart.push_back(static_cast<std::int32_t>(m_outputs.size()));
    }
    for (std::size_t t = 0; t < tensors; ++t)
        m_consumerStart[t + 1] += m_consumerStart[t];
    m_consumers.resize(static_cast<std::size_t>(m_consumerStart[tensors]));
    std::vector<std::int32_t> fill(m_consumerStart.begin(), m_consumerStart.end() - 1);
    for (std::size_t i = 0; i < ops; ++i) {
        const ir::OpId id(static_cast<std::int32_t>(i));
        for (ir::TensorId t : inputs(id))
            if (known(t))
                m_consumers[static_cast<std::size_t>(fill[t.index()]++)] = id;
    }

    // Kahn's algorithm exactly as Graph::topologicalOrder runs it, on the
    // flat arrays.
    std::vector<int> pending(ops, 0);
    for (std::size_t i = 0; i < ops; ++i)
        for (ir::TensorId t : inputs(ir::OpId(static_cast<std::int32_t>(i))))
            if (known(t) && m_producer[t.index()].valid())
                ++pending[i];
    std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < ops; ++i)
        if (pending[i] == 0)
            ready.push(static_cast<std::int32_t>(i));
    m_order.reserve(ops);
    while (!ready.empty()) {
        const ir::OpId id(ready.top());
        ready.pop();
        m_order.push_back(id);
        for (ir::TensorId t : outputs(id)) {
            if (!known(t) || m_producer[t.index()] != id)
                continue;
            for (ir::OpId c : consumers(t))
                if (--pending[c.index()] == 0)
                    ready.push(c.value);
        }
    }
    if (m_order.size() != ops) {
        m_order.clear();
        for (std::size_t i = 0; i < ops; ++i)
            m_order.emplace_back(static_cast<std::int32_t>(i));
    }
    m_rank.assign(ops, 0);
    for (std::size_t i = 0; i < ops; ++i)
        m_rank[m_order[i].index()] = static_cast<int>(i);
}

} // namespace tapestry::passes
