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
    connect(graph, GraphIndex(graph));
}

void CoarseGraph::connect(const ir::Graph &graph, GraphIndex graphIndex)
{
    m_index = std::move(graphIndex);
    const GraphIndex &index = m_index;
    // Rank ops by the graph's topological order so member lists and edges
    // come out the same way for every copy of a block.
    auto byRank = [&](ir::OpId a, ir::OpId b) { return index.rank(a) < index.rank(b); };
    if (m_nodeOfOp.size() < graph.opCount())
        m_nodeOfOp.resize(graph.opCount());

    // Marks which tensors a node's lists already hold: one flat array for the
    // whole graph instead of a search per tensor, so a node costs its size.
    // Lists gather in scratch vectors and are copied once at their final
    // size: one allocation per list rather than one per doubling.
    std::vector<std::int32_t> listed(index.tensorCount(), -1);
    std::vector<ir::TensorId> inputs, parameters, outputs;
    auto once = [&](std::vector<ir::TensorId> &list, ir::TensorId t, std::int32_t mark) {
        if (listed[t.index()] == mark)
            return;
        listed[t.index()] = mark;
        list.push_back(t);
    };

    m_edges.clear();
    std::vector<std::tuple<NodeId, ir::TensorId, NodeId>> links;
    links.reserve(m_nodes.size() * 2);
    for (auto &node : m_nodes) {
        if (!std::is_sorted(node.ops.begin(), node.ops.end(), byRank))
            std::sort(node.ops.begin(), node.ops.end(), byRank);
        inputs.clear();
        parameters.clear();
        outputs.clear();
        const std::int32_t mark = 3 * node.id.value;  // one mark per list of this node
        for (ir::OpId op : node.ops) {
            for (ir::TensorId t : index.inputs(op)) {
                if (!t.valid())
                    continue;
                const ir::OpId producer = index.producer(t);
                if (index.role(t) == ir::Role::Parameter) {
                    once(parameters, t, mark + 1);
                } else if (nodeOf(producer) != node.id) {
                    once(inputs, t, mark);
                    if (producer.valid() && nodeOf(producer).valid())
                        links.emplace_back(nodeOf(producer), t, node.id);
                }
            }
            for (ir::TensorId t : index.outputs(op)) {
                if (!t.valid())
                    continue;
                bool leaves = index.role(t) == ir::Role::Output;
                for (ir::OpId c : index.consumers(t))
                    leaves = leaves || nodeOf(c) != node.id;
                if (leaves)
                    once(outputs, t, mark + 2);
            }
        }
        node.inputs.assign(inputs.begin(), inputs.end());
        node.parameters.assign(parameters.begin(), parameters.end());
        node.outputs.assign(outputs.begin(), outputs.end());
    }
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());
    std::vector<std::int32_t> inCount(m_nodes.size(), 0), outCount(m_nodes.size(), 0);
    for (const auto &[from, tensor, to] : links) {
        ++outCount[from.index()];
        ++inCount[to.index()];
    }
    for (auto &node : m_nodes) {
        node.inEdges.clear();
        node.outEdges.clear();
        node.inEdges.reserve(static_cast<std::size_t>(inCount[node.id.index()]));
        node.outEdges.reserve(static_cast<std::size_t>(outCount[node.id.index()]));
    }
    m_edges.reserve(links.size());
    for (const auto &[from, tensor, to] : links) {
        EdgeId id(static_cast<std::int32_t>(m_edges.size()));
        const auto shape = index.shape(tensor);  // the index's copy: no second read of the graph
        m_edges.push_back(CoarseEdge{id, from, to, tensor, ir::Shape(shape.begin(), shape.end())});
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
