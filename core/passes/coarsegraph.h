#pragma once

#include "ir/graph.h"
#include "ir/ids.h"
#include "passes/graphindex.h"
#include "passes/repeats.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace tapestry::passes {

struct CoarseNodeTag {};
struct CoarseEdgeTag {};
using NodeId = ir::Id<CoarseNodeTag>;
using EdgeId = ir::Id<CoarseEdgeTag>;

// What a coarse node does, in the words the sharding rules and the GUI use.
enum class NodeKind {
    Linear,       // MatMul/Gemm with a weight, plus bias add, activation, reshapes, transposes
    MatMul,       // MatMul of two activations outside an attention core
    Conv,         // Conv with its weight and bias
    Norm,         // LayerNormalization, RMSNorm, BatchNorm, or their ONNX decomposition
    Attention,    // scores MatMul, scale, mask, softmax, context MatMul
    Embedding,    // Gather from a parameter table
    Elementwise,  // residual adds, gating products, other pointwise ops
    Loss,         // cross-entropy and friends
    Other,
};

std::string_view toString(NodeKind kind);

// The scope a node takes from its anchor op's name: the name up to its last
// '/' ("transformer/h.3/attn/c_attn" of ".../c_attn/MatMul").
std::string_view scopeOf(std::string_view opName);

struct CoarseReduction;

// A node's lists are views of arrays its CoarseGraph holds (one array for
// all nodes' ops, one for their tensors, one for their edges), so a graph of
// thousands of nodes is a handful of allocations. They stay valid while the
// coarse graph lives, moved or copied.
struct CoarseNode {
    NodeId id;
    NodeKind kind = NodeKind::Other;
    std::string_view name;                      // scope of its anchor op: "transformer/h.3/attn/c_attn"
    ir::OpId anchor;                            // the op that defines the node (the MatMul, the Softmax)
    std::span<const ir::OpId> ops;              // members, in the graph's topological order
    std::span<const ir::TensorId> inputs;       // activations and graph inputs read from outside the node
    std::span<const ir::TensorId> parameters;   // parameter tensors its ops read
    std::span<const ir::TensorId> outputs;      // written here, read by another node or a graph output
    std::span<const EdgeId> inEdges;
    std::span<const EdgeId> outEdges;
};

// One tensor flowing from the node that writes it to one node that reads it.
// Graph inputs and parameters have no producing node and so no edge; they are
// listed in the reading node's inputs and parameters.
struct CoarseEdge {
    EdgeId id;
    NodeId from;
    NodeId to;
    ir::TensorId tensor;
    std::span<const std::int64_t> shape;  // the tensor's
};

// Ops grouped into nodes that serve one function. Every op of the graph is in
// exactly one node. The op graph is not held: stages pass the ir::Graph and
// the CoarseGraph side by side and address both by id.
class CoarseGraph {
public:
    CoarseGraph() = default;
    CoarseGraph(const CoarseGraph &other);
    CoarseGraph &operator=(const CoarseGraph &other);
    CoarseGraph(CoarseGraph &&) noexcept = default;
    CoarseGraph &operator=(CoarseGraph &&) noexcept = default;

    // Room for `nodes` nodes holding `ops` ops in all.
    void reserve(std::size_t nodes, std::size_t ops);
    // Adds a node of `ops` (none of them in another node yet). The node's
    // lists are read after connect().
    NodeId addNode(NodeKind kind, std::string_view name, ir::OpId anchor, std::span<const ir::OpId> ops);
    // Orders each node's ops topologically and derives boundary tensors and
    // edges from the op graph. Call once, after the last addNode.
    void connect(const ir::Graph &graph);
    // The same over the graph's flat index (of a graph, or of a reduced
    // graph's arrays), which the coarsen pass has built anyway; the coarse
    // graph keeps it for later passes.
    void connect(GraphIndex index);

    std::size_t nodeCount() const { return m_nodes.size(); }
    std::size_t edgeCount() const { return m_edges.size(); }
    const CoarseNode &node(NodeId id) const { return m_nodes[id.index()]; }
    const CoarseEdge &edge(EdgeId id) const { return m_edges[id.index()]; }
    const std::vector<CoarseNode> &nodes() const { return m_nodes; }
    const std::vector<CoarseEdge> &edges() const { return m_edges; }
    // The node holding an op; invalid for an op no node holds.
    NodeId nodeOf(ir::OpId op) const;

    // The nodes in a topological order of the coarse edges (ties by id).
    std::vector<NodeId> topologicalOrder() const;
    // The flat index of the op graph connect() ran on, with the topological
    // order it ranked ops by, kept so later passes (prune) need not sweep the
    // op graph again.
    // Empty for a stamped coarse graph, which never swept the op graph.
    const GraphIndex &graphIndex() const { return m_index; }

    // A coarse graph of a graph with a run of like copies (repeats.h) can
    // be made from the coarse graph of the reduced graph: its head and tail
    // nodes are moved into place and the template copy's nodes are stamped
    // onto every copy between. None when the reduced coarse graph does not
    // split that way (a node holding ops of the template and of another
    // copy, an edge reaching past the next copy).
    static std::optional<CoarseGraph> stamped(const ir::GraphArrays &graph, std::shared_ptr<CoarseReduction> reduction);
    // The reduced graph and its coarse graph, for a stamped coarse graph;
    // null for one formed op by op.
    const CoarseReduction *reduction() const { return m_reduction.get(); }
    // Ops whose nodes were stamped from the template rather than formed.
    std::size_t stampedOps() const;

private:
    // Where each node's lists lie in the shared arrays; the views in
    // m_nodes and m_edges are made from these (bind()).
    struct Extent {
        std::uint32_t nameBegin = 0, nameEnd = 0;
        std::uint32_t opBegin = 0, opEnd = 0;
        std::uint32_t tensorBegin = 0, parametersBegin = 0, outputsBegin = 0, tensorEnd = 0;
        std::uint32_t edgeBegin = 0, outEdgesBegin = 0, edgeEnd = 0;
    };
    void bind();

    std::vector<CoarseNode> m_nodes;
    std::vector<Extent> m_extents;
    std::vector<char> m_names;
    std::vector<ir::OpId> m_ops;
    std::vector<ir::TensorId> m_tensors;  // per node: inputs, parameters, outputs
    std::vector<EdgeId> m_nodeEdges;      // per node: in, then out
    std::vector<CoarseEdge> m_edges;
    std::vector<std::int32_t> m_edgeDimStart;  // per edge, into m_dims
    std::vector<std::int64_t> m_dims;
    std::vector<NodeId> m_nodeOfOp;
    GraphIndex m_index;
    std::shared_ptr<const CoarseReduction> m_reduction;
};

// What a stamped coarse graph was stamped from.
struct CoarseReduction {
    CoarseReduction(const ir::GraphArrays &graph, const RepeatRun &run) : source(&graph), reduced(graph, run) {}

    const ir::GraphArrays *source;  // the graph the stamped coarse graph is of; compared, never read
    ReducedGraph reduced;
    CoarseGraph coarse;  // of reduced.arrays()
    // How many of the reduced coarse graph's nodes are the template's: its
    // nodes are those of the head, then the template's, then the tail's
    // (set by CoarseGraph::stamped).
    std::int32_t templateNodes = 0;
};

} // namespace tapestry::passes
