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
    index.requireKnownTensors();
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
    const auto N = static_cast<std::int32_t>(c.nodeCount());
    const std::int32_t P = r.run().period;
    const std::int32_t templateBegin = r.templateBegin(), templateEnd = r.templateEnd();
    auto nodeOps = [&c](std::int32_t n) { return c.m_nodes[static_cast<std::size_t>(n)].ops; };

    // Head nodes hold ops before the template only, template nodes ops of
    // the template only, and tail nodes start after it. Nodes are numbered
    // by their first op, so each part is one stretch of ids.
    std::int32_t A = 0;
    while (A < N && nodeOps(A).front().value < templateBegin) {
        if (nodeOps(A).back().value >= templateBegin)
            return std::nullopt;
        ++A;
    }
    std::int32_t T = 0;
    while (A + T < N && nodeOps(A + T).front().value < templateEnd) {
        if (nodeOps(A + T).back().value >= templateEnd)
            return std::nullopt;
        ++T;
    }
    if (T == 0)
        return std::nullopt;
    reduction->templateNodes = T;

    const std::int32_t S = r.stampedCopies();
    const std::int32_t firstCopy = ReducedGraph::kTemplate, lastCopy = firstCopy + S - 1;
    const std::int32_t tailMove = (S - 1) * T;
    auto templateNode = [&](std::int32_t local, std::int32_t copy) { return A + (copy - firstCopy) * T + local; };

    // The template's out-edges as a pattern: the reader in the same copy,
    // or in the next (a copy of a template node, or the tail's first copy
    // after the last stamped one).
    struct EdgePattern {
        std::int32_t from;  // template node, local
        ir::TensorId tensor;  // reduced
        std::int32_t to;    // local template node of the same or the next copy
        std::int32_t tail;  // the reader in the tail after the last copy; -1 within the copy
        std::int32_t edge;  // the reduced edge, for its shape
    };
    std::vector<EdgePattern> pattern;
    for (std::int32_t l = 0; l < T; ++l)
        for (EdgeId e : c.m_nodes[static_cast<std::size_t>(A + l)].outEdges) {
            const CoarseEdge &edge = c.m_edges[e.index()];
            const std::int32_t to = edge.to.value;
            if (to < A)
                return std::nullopt;
            if (to < A + T) {
                pattern.push_back({l, edge.tensor, to - A, -1, e.value});
                continue;
            }
            // A node of the copy after the template must copy a template
            // node op for op, one period on.
            const auto ops = nodeOps(to);
            if (ops.front().value >= templateEnd + P)
                return std::nullopt;
            const NodeId t = c.nodeOf(ir::OpId(ops.front().value - P));
            if (!t.valid() || t.value < A || t.value >= A + T || nodeOps(t.value).size() != ops.size())
                return std::nullopt;
            for (std::size_t i = 0; i < ops.size(); ++i)
                if (nodeOps(t.value)[i].value + P != ops[i].value)
                    return std::nullopt;
            pattern.push_back({l, edge.tensor, t.value - A, to + tailMove, e.value});
        }

    CoarseGraph out;
    const std::size_t nodeTotal = static_cast<std::size_t>(N + tailMove);
    const std::size_t templateTensors = c.m_extents[static_cast<std::size_t>(A + T - 1)].tensorEnd -
                                        c.m_extents[static_cast<std::size_t>(A)].tensorBegin;
    const std::size_t templateDims = [&] {
        std::size_t dims = 0;
        for (const EdgePattern &p : pattern)
            dims += c.m_edges[static_cast<std::size_t>(p.edge)].shape.size();
        return dims;
    }();
    const auto extra = static_cast<std::size_t>(S - 1);
    out.m_nodes.reserve(nodeTotal);
    out.m_extents.reserve(nodeTotal);
    out.m_ops.reserve(graph.opCount());
    out.m_tensors.reserve(c.m_tensors.size() + extra * templateTensors);
    out.m_names.reserve(c.m_names.size() * (nodeTotal / std::max<std::size_t>(1, c.nodeCount()) + 1));
    out.m_edges.reserve(c.m_edges.size() + extra * pattern.size());
    out.m_dims.reserve(c.m_dims.size() + extra * templateDims);
    out.m_edgeDimStart.reserve(c.m_edges.size() + extra * pattern.size() + 1);
    out.m_nodeOfOp.resize(graph.opCount());

    // Nodes: kind, anchor, name, ops and tensor lists.
    auto addNode = [&](std::int32_t n, std::int32_t id, auto &&opOf, auto &&tensorOf, bool rename) {
        const CoarseNode &from = c.m_nodes[static_cast<std::size_t>(n)];
        Extent e;
        const ir::OpId anchor = opOf(from.anchor);
        const std::string_view name = rename ? scopeOf(a.name(anchor)) : from.name;
        e.nameBegin = static_cast<std::uint32_t>(out.m_names.size());
        out.m_names.insert(out.m_names.end(), name.begin(), name.end());
        e.nameEnd = static_cast<std::uint32_t>(out.m_names.size());
        e.opBegin = static_cast<std::uint32_t>(out.m_ops.size());
        for (ir::OpId op : from.ops) {
            const ir::OpId g = opOf(op);
            out.m_ops.push_back(g);
            out.m_nodeOfOp[g.index()] = NodeId(id);
        }
        e.opEnd = static_cast<std::uint32_t>(out.m_ops.size());
        const Extent &x = c.m_extents[static_cast<std::size_t>(n)];
        e.tensorBegin = static_cast<std::uint32_t>(out.m_tensors.size());
        e.parametersBegin = e.tensorBegin + (x.parametersBegin - x.tensorBegin);
        e.outputsBegin = e.tensorBegin + (x.outputsBegin - x.tensorBegin);
        for (std::uint32_t i = x.tensorBegin; i < x.tensorEnd; ++i)
            out.m_tensors.push_back(tensorOf(c.m_tensors[i]));
        e.tensorEnd = static_cast<std::uint32_t>(out.m_tensors.size());
        out.m_extents.push_back(e);
        CoarseNode &node = out.m_nodes.emplace_back();  // nodes come in id order
        node.id = NodeId(id);
        node.kind = from.kind;
        node.anchor = anchor;
    };
    auto same = [](ir::OpId op) { return op; };
    auto headTensor = [&](ir::TensorId t) { return r.tensorOf(t); };
    // The tail's first copy reads the copy before it, which in the reduced
    // graph is the template and here the last stamped copy.
    auto tailTensor = [&](ir::TensorId t) { return r.tailTensorOf(t, a); };
    for (std::int32_t n = 0; n < A; ++n)
        addNode(n, n, same, headTensor, false);
    for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy) {
        for (std::int32_t l = 0; l < T; ++l)
            addNode(
                A + l, templateNode(l, copy), [&](ir::OpId op) { return r.opOf(op, copy); },
                [&](ir::TensorId t) { return r.tensorOf(t, copy, a); }, copy != firstCopy);
    }
    for (std::int32_t n = A + T; n < N; ++n)
        addNode(n, n + tailMove, [&](ir::OpId op) { return r.opOf(op); }, tailTensor, false);

    // Edges, from node by node in id order and, from each node, by tensor
    // and reader: the order connect() gives them.
    auto addEdge = [&](std::int32_t from, ir::TensorId tensor, std::int32_t to, std::span<const std::int64_t> shape) {
        out.m_edges.push_back(CoarseEdge{EdgeId(static_cast<std::int32_t>(out.m_edges.size())), NodeId(from),
                                         NodeId(to), tensor, {}});
        out.m_dims.insert(out.m_dims.end(), shape.begin(), shape.end());
        out.m_edgeDimStart.push_back(static_cast<std::int32_t>(out.m_dims.size()));
    };
    out.m_edgeDimStart.push_back(0);
    // Sorts the edges from one node added since `begin` by tensor and
    // reader, where the stamped ids came out of that order.
    auto settle = [&](std::size_t begin) {
        if (out.m_edges.size() - begin < 2)
            return;
        auto key = [&](std::size_t i) { return std::pair(out.m_edges[i].tensor.value, out.m_edges[i].to.value); };
        bool sorted = true;
        for (std::size_t i = begin + 1; i < out.m_edges.size() && sorted; ++i)
            sorted = key(i - 1) < key(i);
        if (sorted)
            return;
        std::vector<std::size_t> order(out.m_edges.size() - begin);
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = begin + i;
        std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return key(x) < key(y); });
        std::vector<CoarseEdge> edges;
        std::vector<std::int64_t> dims;
        std::vector<std::int32_t> starts;
        for (std::size_t i : order) {
            edges.push_back(out.m_edges[i]);
            const auto from = out.m_edgeDimStart[i], to = out.m_edgeDimStart[i + 1];
            dims.insert(dims.end(), out.m_dims.begin() + from, out.m_dims.begin() + to);
            starts.push_back(to - from);
        }
        std::size_t dimAt = static_cast<std::size_t>(out.m_edgeDimStart[begin]);
        for (std::size_t i = 0; i < edges.size(); ++i) {
            edges[i].id = EdgeId(static_cast<std::int32_t>(begin + i));
            out.m_edges[begin + i] = edges[i];
            out.m_edgeDimStart[begin + i + 1] = out.m_edgeDimStart[begin + i] + starts[i];
        }
        std::copy(dims.begin(), dims.end(), out.m_dims.begin() + static_cast<std::ptrdiff_t>(dimAt));
    };
    const std::int32_t runBegin = r.run().begin;
    const auto reduced = r.arrays().view();
    for (std::int32_t n = 0; n < A; ++n) {
        const std::size_t begin = out.m_edges.size();
        for (EdgeId e : c.m_nodes[static_cast<std::size_t>(n)].outEdges) {
            const CoarseEdge &edge = c.m_edges[e.index()];
            const std::int32_t to = edge.to.value;
            const ir::TensorId tensor = r.tensorOf(edge.tensor);
            if (to < A) {
                addEdge(n, tensor, to, edge.shape);
            } else if (to < A + T) {
                const ir::OpId producer = reduced.producer(edge.tensor);
                if (producer.value < runBegin) {  // made before the run: every copy reads it
                    for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy)
                        addEdge(n, tensor, templateNode(to - A, copy), edge.shape);
                } else if (producer.value >= templateBegin - P) {  // the copy before reads it first
                    addEdge(n, tensor, to, edge.shape);
                } else {
                    return std::nullopt;
                }
            } else {
                addEdge(n, tensor, to + tailMove, edge.shape);
            }
        }
        settle(begin);
    }
    for (std::int32_t copy = firstCopy; copy <= lastCopy; ++copy) {
        std::size_t begin = out.m_edges.size();
        std::int32_t from = -1;
        for (const EdgePattern &p : pattern) {
            if (p.from != from) {
                settle(begin);
                begin = out.m_edges.size();
                from = p.from;
            }
            const std::int32_t to = p.tail < 0 ? templateNode(p.to, copy)
                                    : copy == lastCopy ? p.tail
                                                       : templateNode(p.to, copy + 1);
            addEdge(templateNode(p.from, copy), r.tensorOf(p.tensor, copy, a), to,
                    c.m_edges[static_cast<std::size_t>(p.edge)].shape);
        }
        settle(begin);
    }
    for (std::int32_t n = A + T; n < N; ++n) {
        const std::size_t begin = out.m_edges.size();
        for (EdgeId e : c.m_nodes[static_cast<std::size_t>(n)].outEdges) {
            const CoarseEdge &edge = c.m_edges[e.index()];
            if (edge.to.value < A + T)
                return std::nullopt;
            addEdge(n + tailMove, r.tailTensorOf(edge.tensor, a), edge.to.value + tailMove, edge.shape);
        }
        settle(begin);
    }

    // Each node's edges, in then out, each in edge-id order.
    const std::size_t nodes = out.m_nodes.size();
    std::vector<std::uint32_t> inNext(nodes + 1, 0), outNext(nodes + 1, 0);
    for (const CoarseEdge &e : out.m_edges) {
        ++outNext[e.from.index()];
        ++inNext[e.to.index()];
    }
    std::uint32_t at = 0;
    for (std::size_t n = 0; n < nodes; ++n) {
        Extent &extent = out.m_extents[n];
        const std::uint32_t in = inNext[n], outs = outNext[n];
        extent.edgeBegin = inNext[n] = at;
        extent.outEdgesBegin = outNext[n] = at + in;
        extent.edgeEnd = at = extent.outEdgesBegin + outs;
    }
    out.m_nodeEdges.resize(at);
    for (const CoarseEdge &e : out.m_edges) {
        out.m_nodeEdges[outNext[e.from.index()]++] = e.id;
        out.m_nodeEdges[inNext[e.to.index()]++] = e.id;
    }
    out.m_reduction = std::move(reduction);
    out.bind();
    return out;
}

} // namespace tapestry::passes
