#include "passes/graphindex.h"

#include "ir/error.h"
#include "ir/hash.h"

#include <string>
#include <tuple>
#include <utility>

#include <functional>
#include <queue>

namespace tapestry::passes {

using ir::hashMix;

GraphIndex::GraphIndex()
{
    static const ir::GraphArrays empty;
    m_graph = empty.view();
}

GraphIndex::GraphIndex(const ir::GraphArrays &arrays)
{
    // Everything is read from the graph's flat arrays, and links, types,
    // names and shapes are viewed there rather than copied: on a deep model
    // the graph's per-op records are scattered over tens of megabytes.
    m_graph = arrays.view();
    const ir::GraphArrays::View &a = m_graph;
    const std::size_t ops = a.opCount(), tensors = a.tensorCount();
    m_form.resize(tensors);
    for (std::size_t i = 0; i < tensors; ++i) {
        const ir::TensorId t(static_cast<std::int32_t>(i));
        const auto shape = a.shape(t);
        std::uint64_t h = hashMix(1, static_cast<std::uint64_t>(a.role(t) == ir::Role::Parameter) + 1);
        h = hashMix(h, shape.size());
        for (auto d : shape)
            h = hashMix(h, static_cast<std::uint64_t>(d));
        m_form[i] = hashMix(h, static_cast<std::uint64_t>(a.dtype(t)));
    }
    // Ids outside the graph are dropped here, as the graph's own links drop them.
    auto known = [tensors](ir::TensorId t) { return t.valid() && t.index() < tensors; };
    m_consumerStart.assign(tensors + 1, 0);
    m_label.reserve(ops);
    m_scopes = ScopeIndex(ops);
    const auto &typeNames = arrays.typeNames();
    m_typeNames.assign(typeNames.begin(), typeNames.end());
    std::vector<std::uint64_t> typeHash;  // by type number
    typeHash.reserve(m_typeNames.size());
    for (std::string_view type : m_typeNames)
        typeHash.push_back(std::hash<std::string_view>{}(type));
    for (std::size_t i = 0; i < ops; ++i) {
        const ir::OpId op(static_cast<std::int32_t>(i));
        // The label: type, domain and attributes, then the forms of the
        // inputs and outputs.
        const auto inputs = a.inputs(op), outputs = a.outputs(op);
        std::uint64_t h = hashMix(typeHash[a.type(op)], a.attributeHash(op));
        h = hashMix(h, inputs.size());
        for (ir::TensorId t : inputs) {
            h = hashMix(h, known(t) ? m_form[t.index()] : 0);
            if (known(t))
                ++m_consumerStart[t.index() + 1];
            else if (t.valid() && !m_strayOp.valid())
                std::tie(m_strayOp, m_strayTensor) = std::pair(op, t);
        }
        h = hashMix(h, outputs.size());
        for (ir::TensorId t : outputs) {
            if (known(t))
                h = hashMix(h, m_form[t.index()]);
            else if (t.valid() && !m_strayOp.valid())
                std::tie(m_strayOp, m_strayTensor) = std::pair(op, t);
        }
        m_label.push_back(h);
        m_scopes.add(a.name(op));
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
    // flat arrays; when the graph was built in order (as loaders build it)
    // that order is the id order.
    m_order.reserve(ops);
    if (!arrays.idOrderIsTopological())
        kahnOrder();
    if (m_order.size() != ops) {  // in id order, or a cycle left some ops out
        m_order.clear();
        for (std::size_t i = 0; i < ops; ++i)
            m_order.emplace_back(static_cast<std::int32_t>(i));
    }
    m_rank.assign(ops, 0);
    for (std::size_t i = 0; i < ops; ++i)
        m_rank[m_order[i].index()] = static_cast<int>(i);
    m_scopes.finish(m_order);
}

void GraphIndex::requireKnownTensors() const
{
    if (m_strayOp.valid())
        throw TapestryError(Error{{}, "op '" + std::string(name(m_strayOp)) + "'",
                                  "names tensor " + std::to_string(m_strayTensor.value) + ", which the graph does not have (" +
                                      std::to_string(tensorCount()) + " tensors)"});
}

void GraphIndex::kahnOrder()
{
    const std::size_t ops = opCount(), tensors = tensorCount();
    auto known = [tensors](ir::TensorId t) { return t.valid() && t.index() < tensors; };
    std::vector<int> pending(ops, 0);
    for (std::size_t i = 0; i < ops; ++i)
        for (ir::TensorId t : inputs(ir::OpId(static_cast<std::int32_t>(i))))
            if (known(t) && producer(t).valid())
                ++pending[i];
    std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < ops; ++i)
        if (pending[i] == 0)
            ready.push(static_cast<std::int32_t>(i));
    while (!ready.empty()) {
        const ir::OpId id(ready.top());
        ready.pop();
        m_order.push_back(id);
        for (ir::TensorId t : outputs(id)) {
            if (!known(t) || producer(t) != id)
                continue;
            for (ir::OpId c : consumers(t))
                if (--pending[c.index()] == 0)
                    ready.push(c.value);
        }
    }
}

} // namespace tapestry::passes
