#include "passes/coarsegraph.h"

#include <algorithm>
#include <queue>
#include <tuple>

namespace tapestry::passes {

std::string_view toString(NodeKind kind)
{
    switch (kind) {
    case NodeKind::Linear:
        return "linear";
    case NodeKind::MatMul:
        return "matmul";
    case NodeKind::Conv:
        return "conv";
    case NodeKind::Norm:
        return "norm";
    case NodeKind::Attention:
        return "attention";
    case NodeKind::Embedding:
        return "embedding";
    case NodeKind::Elementwise:
        return "elementwise";
    case NodeKind::Loss:
        return "loss";
    case NodeKind::Other:
        return "other";
    }
    return "other";
}

NodeId CoarseGraph::addNode(NodeKind kind, std::string name, ir::OpId anchor,
                            std::vector<ir::OpId> ops)
{
    NodeId id(static_cast<std::int32_t>(m_nodes.size()));
    for (ir::OpId op : ops) {
        if (m_nodeOfOp.size() <= op.index())
            m_nodeOfOp.resize(op.index() + 1);
        m_nodeOfOp[op.index()] = id;
    }
    CoarseNode node;
    node.id = id;
    node.kind = kind;
    node.name = std::move(name);
    node.anchor = anchor;
    node.ops = std::move(ops);
    m_nodes.push_back(std::move(node));
    return id;
}

NodeId CoarseGraph::nodeOf(ir::OpId op) const
{
    if (!op.valid() || op.index() >= m_nodeOfOp.size())
        return NodeId();
    return m_nodeOfOp[op.index()];
}

void CoarseGraph::connect(const ir::Graph &graph)
{
    // Rank ops by the graph's topological order so member lists and edges
    // come out the same way for every copy of a block.
    std::vector<std::int32_t> rank(graph.opCount(), 0);
    if (auto order = graph.topologicalOrder())
        for (std::size_t i = 0; i < order->size(); ++i)
            rank[(*order)[i].index()] = static_cast<std::int32_t>(i);
    else
        for (std::size_t i = 0; i < rank.size(); ++i)
            rank[i] = static_cast<std::int32_t>(i);

    m_edges.clear();
    std::vector<std::tuple<NodeId, ir::TensorId, NodeId>> links;
    for (auto &node : m_nodes) {
        std::sort(node.ops.begin(), node.ops.end(),
                  [&](ir::OpId a, ir::OpId b) { return rank[a.index()] < rank[b.index()]; });
        node.inputs.clear();
        node.parameters.clear();
        node.outputs.clear();
        node.inEdges.clear();
        node.outEdges.clear();
        for (ir::OpId op : node.ops) {
            for (ir::TensorId t : graph.op(op).inputs) {
                if (!t.valid())
                    continue;
                const ir::Tensor &tensor = graph.tensor(t);
                if (tensor.role == ir::Role::Parameter) {
                    node.parameters.push_back(t);
                } else if (nodeOf(tensor.producer) != node.id) {
                    node.inputs.push_back(t);
                    if (tensor.producer.valid() && nodeOf(tensor.producer).valid())
                        links.emplace_back(nodeOf(tensor.producer), t, node.id);
                }
            }
            for (ir::TensorId t : graph.op(op).outputs) {
                if (!t.valid())
                    continue;
                const ir::Tensor &tensor = graph.tensor(t);
                bool leaves = tensor.role == ir::Role::Output;
                for (ir::OpId c : tensor.consumers)
                    leaves = leaves || nodeOf(c) != node.id;
                if (leaves)
                    node.outputs.push_back(t);
            }
        }
        for (auto *list : {&node.inputs, &node.parameters, &node.outputs}) {
            std::vector<ir::TensorId> seen;
            for (ir::TensorId t : *list)
                if (std::find(seen.begin(), seen.end(), t) == seen.end())
                    seen.push_back(t);
            *list = std::move(seen);
        }
    }
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());
    for (const auto &[from, tensor, to] : links) {
        EdgeId id(static_cast<std::int32_t>(m_edges.size()));
        m_edges.push_back(CoarseEdge{id, from, to, tensor, graph.tensor(tensor).shape});
        m_nodes[from.index()].outEdges.push_back(id);
        m_nodes[to.index()].inEdges.push_back(id);
    }
}

std::vector<NodeId> CoarseGraph::topologicalOrder() const
{
    std::vector<int> pending(m_nodes.size(), 0);
    for (const auto &e : m_edges)
        ++pending[e.to.index()];
    std::priority_queue<std::int32_t, std::vector<std::int32_t>, std::greater<>> ready;
    for (std::size_t i = 0; i < m_nodes.size(); ++i)
        if (pending[i] == 0)
            ready.push(static_cast<std::int32_t>(i));
    std::vector<NodeId> order;
    order.reserve(m_nodes.size());
    while (!ready.empty()) {
        NodeId id(ready.top());
        ready.pop();
        order.push_back(id);
        for (EdgeId e : m_nodes[id.index()].outEdges)
            if (--pending[m_edges[e.index()].to.index()] == 0)
                ready.push(m_edges[e.index()].to.value);
    }
    return order;
}

} // namespace tapestry::passes
