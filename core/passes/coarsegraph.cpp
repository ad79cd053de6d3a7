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

CoarseGraph::CoarseGraph(const CoarseGraph &other)
    : m_nodes(other.m_nodes), m_extents(other.m_extents), m_names(other.m_names), m_ops(other.m_ops),
      m_tensors(other.m_tensors), m_nodeEdges(other.m_nodeEdges), m_edges(other.m_edges),
      m_edgeDimStart(other.m_edgeDimStart), m_dims(other.m_dims), m_nodeOfOp(other.m_nodeOfOp),
      m_index(other.m_index)
{
    bind();  // the copied views still point into `other`
}

CoarseGraph &CoarseGraph::operator=(const CoarseGraph &other)
{
    if (this != &other) {
        CoarseGraph copy(other);
        *this = std::move(copy);
    }
    return *this;
}

void CoarseGraph::reserve(std::size_t nodes, std::size_t ops)
{
    m_nodes.reserve(nodes);
    m_extents.reserve(nodes);
    m_ops.reserve(ops);
}

NodeId CoarseGraph::addNode(NodeKind kind, std::string_view name, ir::OpId anchor, std::span<const ir::OpId> ops)
{
    NodeId id(static_cast<std::int32_t>(m_nodes.size()));
    for (ir::OpId op : ops) {
        if (m_nodeOfOp.size() <= op.index())
            m_nodeOfOp.resize(op.index() + 1);
        m_nodeOfOp[op.index()] = id;
    }
    Extent extent;
    extent.nameBegin = static_cast<std::uint32_t>(m_names.size());
    m_names.insert(m_names.end(), name.begin(), name.end());
    extent.nameEnd = static_cast<std::uint32_t>(m_names.size());
    extent.opBegin = static_cast<std::uint32_t>(m_ops.size());
    m_ops.insert(m_ops.end(), ops.begin(), ops.end());
    extent.opEnd = static_cast<std::uint32_t>(m_ops.size());
    m_extents.push_back(extent);
    CoarseNode node;
    node.id = id;
    node.kind = kind;
    node.anchor = anchor;
    m_nodes.push_back(node);
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
    std::vector<std::int32_t> listed(index.tensorCount(), -1);
    std::vector<ir::TensorId> inputs, parameters, outputs;
    auto once = [&](std::vector<ir::TensorId> &list, ir::TensorId t, std::int32_t mark) {
        if (listed[t.index()] == mark)
            return;
        listed[t.index()] = mark;
        list.push_back(t);
    };

    m_edges.clear();
    m_tensors.clear();
    m_tensors.reserve(m_ops.size() * 2);
    std::vector<std::tuple<NodeId, ir::TensorId, NodeId>> links;
    links.reserve(m_nodes.size() * 2);
    for (std::size_t n = 0; n < m_nodes.size(); ++n) {
        const NodeId id(static_cast<std::int32_t>(n));
        Extent &extent = m_extents[n];
        const auto first = m_ops.begin() + extent.opBegin, last = m_ops.begin() + extent.opEnd;
        if (!std::is_sorted(first, last, byRank))
            std::sort(first, last, byRank);
        inputs.clear();
        parameters.clear();
        outputs.clear();
        const std::int32_t mark = 3 * id.value;  // one mark per list of this node
        for (auto it = first; it != last; ++it) {
            for (ir::TensorId t : index.inputs(*it)) {
                if (!t.valid())
                    continue;
                const ir::OpId producer = index.producer(t);
                if (index.role(t) == ir::Role::Parameter) {
                    once(parameters, t, mark + 1);
                } else if (nodeOf(producer) != id) {
                    once(inputs, t, mark);
                    if (producer.valid() && nodeOf(producer).valid())
                        links.emplace_back(nodeOf(producer), t, id);
                }
            }
            for (ir::TensorId t : index.outputs(*it)) {
                if (!t.valid())
                    continue;
                bool leaves = index.role(t) == ir::Role::Output;
                for (ir::OpId c : index.consumers(t))
                    leaves = leaves || nodeOf(c) != id;
                if (leaves)
                    once(outputs, t, mark + 2);
            }
        }
        extent.tensorBegin = static_cast<std::uint32_t>(m_tensors.size());
        m_tensors.insert(m_tensors.end(), inputs.begin(), inputs.end());
        extent.parametersBegin = static_cast<std::uint32_t>(m_tensors.size());
        m_tensors.insert(m_tensors.end(), parameters.begin(), parameters.end());
        extent.outputsBegin = static_cast<std::uint32_t>(m_tensors.size());
        m_tensors.insert(m_tensors.end(), outputs.begin(), outputs.end());
        extent.tensorEnd = static_cast<std::uint32_t>(m_tensors.size());
    }
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());

    // Each node's edges, in then out, each in edge-id order.
    std::vector<std::uint32_t> inCount(m_nodes.size(), 0), outCount(m_nodes.size(), 0);
    for (const auto &[from, tensor, to] : links) {
        ++outCount[from.index()];
        ++inCount[to.index()];
    }
    std::vector<std::uint32_t> inNext(m_nodes.size()), outNext(m_nodes.size());
    std::uint32_t at = 0;
    for (std::size_t n = 0; n < m_nodes.size(); ++n) {
        Extent &extent = m_extents[n];
        extent.edgeBegin = inNext[n] = at;
        extent.outEdgesBegin = outNext[n] = at + inCount[n];
        extent.edgeEnd = at = extent.outEdgesBegin + outCount[n];
    }
    m_nodeEdges.assign(at, EdgeId());
    m_edges.reserve(links.size());
    m_edgeDimStart.assign(1, 0);
    m_edgeDimStart.reserve(links.size() + 1);
    m_dims.clear();
    for (const auto &[from, tensor, to] : links) {
        EdgeId id(static_cast<std::int32_t>(m_edges.size()));
        const auto shape = index.shape(tensor);  // from the graph's arrays, through the index
        m_dims.insert(m_dims.end(), shape.begin(), shape.end());
        m_edgeDimStart.push_back(static_cast<std::int32_t>(m_dims.size()));
        m_edges.push_back(CoarseEdge{id, from, to, tensor, {}});
        m_nodeEdges[outNext[from.index()]++] = id;
        m_nodeEdges[inNext[to.index()]++] = id;
    }
    bind();
}

void CoarseGraph::bind()
{
    for (std::size_t n = 0; n < m_nodes.size(); ++n) {
        const Extent &e = m_extents[n];
        CoarseNode &node = m_nodes[n];
        node.name = std::string_view(m_names.data() + e.nameBegin, e.nameEnd - e.nameBegin);
        node.ops = std::span<const ir::OpId>(m_ops.data() + e.opBegin, e.opEnd - e.opBegin);
        node.inputs = std::span<const ir::TensorId>(m_tensors.data() + e.tensorBegin, e.parametersBegin - e.tensorBegin);
        node.parameters =
            std::span<const ir::TensorId>(m_tensors.data() + e.parametersBegin, e.outputsBegin - e.parametersBegin);
        node.outputs = std::span<const ir::TensorId>(m_tensors.data() + e.outputsBegin, e.tensorEnd - e.outputsBegin);
        node.inEdges = std::span<const EdgeId>(m_nodeEdges.data() + e.edgeBegin, e.outEdgesBegin - e.edgeBegin);
        node.outEdges = std::span<const EdgeId>(m_nodeEdges.data() + e.outEdgesBegin, e.edgeEnd - e.outEdgesBegin);
    }
    for (std::size_t i = 0; i < m_edges.size(); ++i)
        m_edges[i].shape = std::span<const std::int64_t>(
            m_dims.data() + m_edgeDimStart[i], static_cast<std::size_t>(m_edgeDimStart[i + 1] - m_edgeDimStart[i]));
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
