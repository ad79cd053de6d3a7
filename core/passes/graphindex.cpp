#include "passes/graphindex.h"

#include <functional>
#include <queue>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <variant>

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

std::uint64_t hashString(const std::string &s)
{
    return std::hash<std::string>{}(s);
}

std::uint64_t hashAttribute(std::uint64_t h, const ir::Attribute &a)
{
    h = mix(h, a.index());
    std::visit(
        [&](const auto &v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::int64_t>) {
                h = mix(h, static_cast<std::uint64_t>(v));
            } else if constexpr (std::is_same_v<T, double>) {
                h = mix(h, std::hash<double>{}(v));
            } else if constexpr (std::is_same_v<T, std::string>) {
                h = mix(h, hashString(v));
            } else {
                h = mix(h, v.size());
                for (const auto &x : v) {
                    if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
                        h = mix(h, hashString(x));
                    else if constexpr (std::is_same_v<std::decay_t<decltype(x)>, double>)
                        h = mix(h, std::hash<double>{}(x));
                    else
                        h = mix(h, static_cast<std::uint64_t>(x));
                }
            }
        },
        a);
    return h;
}

// A model uses a few dozen attribute names: they are looked up in a short
// list instead of hashing each op's keys.
class KeyHashes {
public:
    std::uint64_t operator()(const std::string &key)
    {
        for (const auto &[name, h] : m_hashes)
            if (name == key)
                return h;
        const std::uint64_t h = hashString(key);
        if (m_hashes.size() < 64)
            m_hashes.emplace_back(key, h);
        return h;
    }

private:
    std::vector<std::pair<std::string_view, std::uint64_t>> m_hashes;
};

} // namespace

GraphIndex::GraphIndex(const ir::Graph &graph)
{
    const std::size_t ops = graph.opCount(), tensors = graph.tensorCount();
    m_producer.resize(tensors);
    m_role.resize(tensors);
    m_form.resize(tensors);
    m_dimStart.reserve(tensors + 1);
    m_dims.reserve(3 * tensors);
    for (std::size_t i = 0; i < tensors; ++i) {
        const ir::Tensor &tensor = graph.tensors()[i];
        m_dims.insert(m_dims.end(), tensor.shape.begin(), tensor.shape.end());
        m_dimStart.push_back(static_cast<std::int32_t>(m_dims.size()));
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
    m_label.reserve(ops);
    m_name.reserve(ops);
    m_scopes = ScopeIndex(ops);
    std::unordered_map<std::string_view, std::uint32_t> typeNumbers;
    std::vector<std::uint64_t> typeHash;  // by type number
    KeyHashes keyHash;
    for (const ir::Op &op : graph.ops()) {
        auto [it, fresh] = typeNumbers.try_emplace(op.type, static_cast<std::uint32_t>(m_typeNames.size()));
        if (fresh) {
            m_typeNames.push_back(op.type);
            typeHash.push_back(std::hash<std::string_view>{}(op.type));
        }
        m_type.push_back(it->second);
        // The label: type, domain, attributes, then the forms of the inputs
        // and outputs.
        std::uint64_t h = mix(typeHash[it->second], op.domain.empty() ? 0 : hashString(op.domain));
        h = mix(h, op.attributes.size());
        for (const auto &[key, value] : op.attributes)
            h = hashAttribute(mix(h, keyHash(key)), value);
        h = mix(h, op.inputs.size());
        for (ir::TensorId t : op.inputs) {
            m_inputs.push_back(t);
            h = mix(h, known(t) ? m_form[t.index()] : 0);
            if (known(t))
                ++m_consumerStart[t.index() + 1];
        }
        h = mix(h, op.outputs.size());
        for (ir::TensorId t : op.outputs) {
            m_outputs.push_back(t);
            if (known(t))
                h = mix(h, m_form[t.index()]);
        }
        m_label.push_back(h);
        m_name.push_back(op.name);
        m_scopes.add(op.name);
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
    m_scopes.finish(m_order);
}

} // namespace tapestry::passes
