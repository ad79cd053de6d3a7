#include "passes/coarsegraph.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <utility>

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

std::string_view scopeOf(std::string_view opName)
{
    const auto slash = opName.rfind('/');
    return slash == std::string_view::npos || slash == 0 ? opName : opName.substr(0, slash);
}

CoarseGraph::CoarseGraph(const CoarseGraph &other)
    : m_nodes(other.m_nodes), m_extents(other.m_extents), m_names(other.m_names), m_ops(other.m_ops),
      m_tensors(other.m_tensors), m_nodeEdges(other.m_nodeEdges), m_edges(other.m_edges),
      m_edgeDimStart(other.m_edgeDimStart), m_dims(other.m_dims), m_nodeOfOp(other.m_nodeOfOp),
      m_index(other.m_index), m_reduction(other.m_reduction)
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
    connect(GraphIndex(graph));
}

void CoarseGraph::connect(GraphIndex graphIndex)
{
    m_index = std::move(graphIndex);
    const GraphIndex &index = m_index;
    // Rank ops by the graph's topological order so member lists and edges
    // come out the same way for every copy of a block.
    auto byRank = [&](ir::OpId a, ir::OpId b) { return index.rank(a) < index.rank(b); };
    if (m_nodeOfOp.size() < index.opCount())
        m_nodeOfOp.resize(index.opCount());

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

namespace tapestry::passes {

std::size_t CoarseGraph::stampedOps() const
{
    if (!m_reduction)
        return 0;
    const auto &r = m_reduction->reduced;
    return static_cast<std::size_t>(r.stampedCopies() - 1) * static_cast<std::size_t>(r.run().period) +
           m_reduction->coarse.stampedOps();
}

std::optional<CoarseGraph> CoarseGraph::stamped(const ir::GraphArrays &graph, std::shared_ptr<CoarseReduction> reduction)
{
    const ReducedGraph &r = reduction->reduced;
    const CoarseGraph &c = reduction->coarse;
    const auto a = graph.view();
    const std::int32_t N = static_cast<std::int32_t>(c.nodeCount());
    const std::int32_t P = r.run().period;
    const std::int32_t templateBegin = r.templateBegin(), templateEnd = r.templateEnd();

    // Head nodes hold ops before the template only, template nodes ops of
    // the template only, and tail nodes start after it. Nodes are numbered
    // by their first op, so each part is one stretch of ids.
    std::int32_t A = 0;
    while (A < N && !c.m_nodes[static_cast<std::size_t>(A)].ops.empty() &&
           c.m_nodes[static_cast<std::size_t>(A)].ops.front().value < templateBegin) {
        if (c.m_nodes[static_cast<std::size_t>(A)].ops.back().value >= templateBegin)
            return std::nullopt;
        ++A;
    }
    std::int32_t T = 0;
    while (A + T < N && !c.m_nodes[static_cast<std::size_t>(A + T)].ops.empty() &&
           c.m_nodes[static_cast<std::size_t>(A + T)].ops.front().value < templateEnd) {
        if (c.m_nodes[static_cast<std::size_t>(A + T)].ops.back().value >= templateEnd)
            return std::nullopt;
        ++T;
    }
    for (std::int32_t n = A + T; n < N; ++n)
        if (c.m_nodes[static_cast<std::size_t>(n)].ops.empty() ||
            c.m_nodes[static_cast<std::size_t>(n)].ops.front().value < templateEnd)
            return std::nullopt;
    if (T == 0)
        return std::nullopt;
    reduction->headNodes = A;
    reduction->templateNodes = T;

    const std::int32_t S = r.stampedCopies();
    const std::int32_t firstCopy = ReducedGraph::kTemplate, lastCopy = firstCopy + S - 1;
    const std::int32_t tailMove = (S - 1) * T;
    auto templateNode = [&](std::int32_t local, std::int32_t copy) { return A + (copy - firstCopy) * T + local; };
    // The template node a node of the copy after the template copies, or
    // -1 when it does not copy one.
    auto nextToTemplate = [&](NodeId n) -> std::int32_t {
        const auto ops = c.m_nodes[n.index()].ops;
        if (ops.front().value >= templateEnd + P)
            return -1;
        const NodeId t = c.nodeOf(ir::OpId(ops.front().value - P));
        if (!t.valid() || t.value < A || t.value >= A + T)
            return -1;
        const auto tops = c.m_nodes[t.index()].ops;
        if (tops.size() != ops.size())
            return -1;
        for (std::size_t i = 0; i < ops.size(); ++i)
            if (tops[i].value + P != ops[i].value)
                return -1;
        return t.value - A;
    };

    CoarseGraph out;
    const std::size_t nodeTotal = static_cast<std::size_t>(N + tailMove);
    out.m_nodes.reserve(nodeTotal);
    out.m_extents.reserve(nodeTotal);
    out.m_ops.reserve(graph.opCount());
    out.m_tensors.reserve(c.m_tensors.size() + static_cast<std::size_t>(S - 1) * static_cast<std::size_t>(T) * 4);
    out.m_nodeOfOp.assign(graph.opCount(), NodeId());

    // One stamped or moved node: its ops, name and tensor lists.
    auto addNode = [&](const CoarseNode &from, std::int32_t copy, bool moved, auto &&opOf, auto &&tensorOf) {
        const NodeId id(static_cast<std::int32_t>(out.m_nodes.size()));
        Extent e;
        const ir::OpId anchor = opOf(from.anchor);
        const std::string_view name = copy < 0 ? from.name : scopeOf(a.name(anchor));
        e.nameBegin = static_cast<std::uint32_t>(out.m_names.size());
        out.m_names.insert(out.m_names.end(), name.begin(), name.end());
        e.nameEnd = static_cast<std::uint32_t>(out.m_names.size());
        e.opBegin = static_cast<std::uint32_t>(out.m_ops.size());
        for (ir::OpId op : from.ops) {
            const ir::OpId g = opOf(op);
            out.m_ops.push_back(g);
            out.m_nodeOfOp[g.index()] = id;
        }
        e.opEnd = static_cast<std::uint32_t>(out.m_ops.size());
        e.tensorBegin = static_cast<std::uint32_t>(out.m_tensors.size());
        for (ir::TensorId t : from.inputs)
            out.m_tensors.push_back(tensorOf(t));
        e.parametersBegin = static_cast<std::uint32_t>(out.m_tensors.size());
        for (ir::TensorId t : from.parameters)
            out.m_tensors.push_back(tensorOf(t));
        e.outputsBegin = static_cast<std::uint32_t>(out.m_tensors.size());
        for (ir::TensorId t : from.outputs)
            out.m_tensors.push_back(tensorOf(t));
        e.tensorEnd = static_cast<std::uint32_t>(out.m_tensors.size());
        out.m_extents.push_back(e);
        CoarseNode node;
        node.id = id;
        node.kind = from.kind;
        node.anchor = anchor;
        out.m_nodes.push_back(node);
        (void)moved;
    };
    auto same = [&](ir::TensorId t) { return r.tensorOf(t); };
    // The tail's first copy reads the copy before it, which in the reduced
    // graph is the template and here the last stamped copy.
    auto tailTensor = [&](ir::TensorId t) { return r.tailTensorOf(t, a); };
    for (std::int32_t n = 0; n < A; ++n)
        addNode(c.m_nodes[static_cast<std::size_t>(n)], -1, false, [](ir::OpId op) { return op; }, same);
    for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy)
        for (std::int32_t n = A; n < A + T; ++n)
            addNode(
                c.m_nodes[static_cast<std::size_t>(n)], copy == firstCopy ? -1 : copy, false,
                [&](ir::OpId op) { return r.opOf(op, copy); },
                [&](ir::TensorId t) { return r.tensorOf(t, copy, a); });
    for (std::int32_t n = A + T; n < N; ++n)
        addNode(c.m_nodes[static_cast<std::size_t>(n)], -1, true, [&](ir::OpId op) { return r.opOf(op); }, tailTensor);

    // Edges, from node by node in id order and, from each node, by tensor
    // and reader: the order connect() gives them.
    struct Link {
        std::int32_t tensor, to;
        bool operator<(const Link &o) const { return std::tie(tensor, to) < std::tie(o.tensor, o.to); }
    };
    std::vector<Link> links;
    std::vector<std::pair<std::int32_t, Link>> all;  // from, link
    all.reserve(c.m_edges.size() + static_cast<std::size_t>(S - 1) * static_cast<std::size_t>(T) * 3);
    const std::int32_t runBegin = r.run().begin;
    auto emit = [&](std::int32_t from) {
        if (!std::is_sorted(links.begin(), links.end()))
            std::sort(links.begin(), links.end());
        for (const Link &l : links)
            all.emplace_back(from, l);
        links.clear();
    };
    for (std::int32_t n = 0; n < A; ++n) {
        for (EdgeId e : c.m_nodes[static_cast<std::size_t>(n)].outEdges) {
            const CoarseEdge &edge = c.m_edges[e.index()];
            const std::int32_t to = edge.to.value, tensor = r.tensorOf(edge.tensor).value;
            if (to < A) {
                links.push_back({tensor, to});
            } else if (to < A + T) {
                const ir::OpId producer = r.arrays().view().producer(edge.tensor);
                if (producer.value < runBegin) {  // made before the run: every copy reads it
                    for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy)
                        links.push_back({tensor, templateNode(to - A, copy)});
                } else if (producer.value >= templateBegin - P) {  // the copy before reads it first
                    links.push_back({tensor, to});
                } else {
                    return std::nullopt;
                }
            } else {
                links.push_back({tensor, to + tailMove});
            }
        }
        emit(n);
    }
    for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy)
        for (std::int32_t n = A; n < A + T; ++n) {
            for (EdgeId e : c.m_nodes[static_cast<std::size_t>(n)].outEdges) {
                const CoarseEdge &edge = c.m_edges[e.index()];
                const std::int32_t tensor = r.tensorOf(edge.tensor, copy, a).value;
                if (edge.to.value < A) {
                    return std::nullopt;
                } else if (edge.to.value < A + T) {
                    links.push_back({tensor, templateNode(edge.to.value - A, copy)});
                } else {
                    const std::int32_t local = nextToTemplate(edge.to);
                    if (local < 0)
                        return std::nullopt;
                    links.push_back({tensor, copy == lastCopy ? edge.to.value + tailMove : templateNode(local, copy + 1)});
                }
            }
            emit(templateNode(n - A, copy));
        }
    for (std::int32_t n = A + T; n < N; ++n) {
        for (EdgeId e : c.m_nodes[static_cast<std::size_t>(n)].outEdges) {
            const CoarseEdge &edge = c.m_edges[e.index()];
            if (edge.to.value < A + T)
                return std::nullopt;
            links.push_back({r.tailTensorOf(edge.tensor, a).value, edge.to.value + tailMove});
        }
        emit(n + tailMove);
    }

    const std::size_t nodes = out.m_nodes.size();
    std::vector<std::uint32_t> inCount(nodes, 0), outCount(nodes, 0);
    for (const auto &[from, l] : all) {
        ++outCount[static_cast<std::size_t>(from)];
        ++inCount[static_cast<std::size_t>(l.to)];
    }
    std::vector<std::uint32_t> inNext(nodes), outNext(nodes);
    std::uint32_t at = 0;
    for (std::size_t n = 0; n < nodes; ++n) {
        Extent &extent = out.m_extents[n];
        extent.edgeBegin = inNext[n] = at;
        extent.outEdgesBegin = outNext[n] = at + inCount[n];
        extent.edgeEnd = at = extent.outEdgesBegin + outCount[n];
    }
    out.m_nodeEdges.assign(at, EdgeId());
    out.m_edges.reserve(all.size());
    out.m_edgeDimStart.assign(1, 0);
    out.m_edgeDimStart.reserve(all.size() + 1);
    for (const auto &[from, l] : all) {
        const EdgeId id(static_cast<std::int32_t>(out.m_edges.size()));
        const auto shape = a.shape(ir::TensorId(l.tensor));
        out.m_dims.insert(out.m_dims.end(), shape.begin(), shape.end());
        out.m_edgeDimStart.push_back(static_cast<std::int32_t>(out.m_dims.size()));
        out.m_edges.push_back(CoarseEdge{id, NodeId(from), NodeId(l.to), ir::TensorId(l.tensor), {}});
        out.m_nodeEdges[outNext[static_cast<std::size_t>(from)]++] = id;
        out.m_nodeEdges[inNext[static_cast<std::size_t>(l.to)]++] = id;
    }
    out.m_reduction = std::move(reduction);
    out.bind();
    return out;
}

} // namespace tapestry::passes
