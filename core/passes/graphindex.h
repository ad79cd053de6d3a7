#pragma once

#include "ir/graph.h"
#include "ir/ids.h"
#include "passes/scopeindex.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tapestry::passes {

// What coarsening and pruning read of an ir::Graph, in flat arrays: the
// adjacency with its topological order, each op's structural label and the
// scope tree of the op names. Built from the graph's own flat arrays
// (ir::GraphArrays), never from its per-op records, which on a deep model
// are scattered over tens of megabytes. It holds views of the graph's type
// names and op names: the graph outlives it, unchanged.
class GraphIndex {
public:
    GraphIndex();  // of an empty graph
    explicit GraphIndex(const ir::Graph &graph) : GraphIndex(graph.arrays()) {}
    explicit GraphIndex(const ir::GraphArrays &arrays);

    std::size_t opCount() const { return m_graph.opCount(); }
    std::size_t tensorCount() const { return m_graph.tensorCount(); }
    std::span<const ir::TensorId> inputs(ir::OpId op) const { return m_graph.inputs(op); }
    std::span<const ir::TensorId> outputs(ir::OpId op) const { return m_graph.outputs(op); }
    // As ir::Tensor::consumers: one entry per input slot that reads t, in op order.
    std::span<const ir::OpId> consumers(ir::TensorId t) const
    {
        return {m_consumers.data() + m_consumerStart[t.index()],
                m_consumers.data() + m_consumerStart[t.index() + 1]};
    }
    // The op's type as a small number, the same for every op of that type.
    std::uint32_t type(ir::OpId op) const { return m_graph.type(op); }
    // The type names by number.
    const std::vector<std::string_view> &typeNames() const { return m_typeNames; }
    ir::OpId producer(ir::TensorId t) const { return m_graph.producer(t); }
    ir::Role role(ir::TensorId t) const { return m_graph.role(t); }
    // A value no op computes and no step feeds: a parameter, or a single-
    // element input (an attention scale, an exported model's constants
    // such as GELU's 0.5, which the loaders give the Input role so that
    // they take no gradient). Coarsening and pruning read such a tensor as
    // part of the op that reads it, not as data flowing in.
    bool isConstant(ir::TensorId t) const
    {
        const ir::Role r = m_graph.role(t);
        if (r == ir::Role::Parameter)
            return true;
        if (r != ir::Role::Input)
            return false;
        for (auto d : m_graph.shape(t))
            if (d != 1)
                return false;
        return true;
    }
    // A hash of what a structural comparison sees of a tensor: its shape,
    // dtype and whether it is a parameter, never its name. Taken in the same
    // sweep that reads producer and role, so no later pass walks the
    // tensors' shapes on the heap again.
    std::uint64_t form(ir::TensorId t) const { return m_form[t.index()]; }
    std::span<const std::int64_t> shape(ir::TensorId t) const { return m_graph.shape(t); }
    // The op's name (a view of the graph's).
    std::string_view name(ir::OpId op) const { return m_graph.name(op); }

    // What a structural comparison sees of an op: its type, domain,
    // attributes and the forms of what it reads and writes, never names.
    std::uint64_t label(ir::OpId op) const { return m_label[op.index()]; }
    // The module hierarchy of the op names, ops laid out scope by scope in
    // order() (scopeindex.h).
    const ScopeIndex &scopes() const { return m_scopes; }

    // Throws a TapestryError naming the first op that reads or writes a
    // tensor id past the graph's. The loaders refuse such a graph
    // (ir::validate); a graph built in code may still carry one, and the
    // passes read no further than this.
    void requireKnownTensors() const;

    // Graph::topologicalOrder's order (Kahn's algorithm, ties by id); every
    // op in id order when the graph has a cycle.
    const std::vector<ir::OpId> &order() const { return m_order; }
    // Position of each op in order().
    int rank(ir::OpId op) const { return m_rank[op.index()]; }

private:
    // Fills m_order by Kahn's algorithm, ties broken by id; leaves it short
    // when the graph has a cycle.
    void kahnOrder();

    ir::GraphArrays::View m_graph;  // links, types, names and shapes: the graph's own arrays
    std::vector<std::int32_t> m_consumerStart{0};
    std::vector<ir::OpId> m_consumers;
    std::vector<std::string_view> m_typeNames;  // views into the graph's op types
    std::vector<std::uint64_t> m_form;
    std::vector<std::uint64_t> m_label;
    ScopeIndex m_scopes;
    std::vector<ir::OpId> m_order;
    std::vector<int> m_rank;
    ir::OpId m_strayOp;          // the first op naming a tensor id past the graph's
    ir::TensorId m_strayTensor;  // and that id
};

} // namespace tapestry::passes
