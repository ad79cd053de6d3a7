#pragma once

#include "ir/graph.h"
#include "ir/ids.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tapestry::passes {

// The adjacency of an ir::Graph in flat arrays, with its topological order:
// what coarsening and pruning walk again and again. Every op and tensor of the
// graph keeps its links in vectors of its own on the heap; on a 1000-layer
// model those no longer fit in cache and each walk waits on memory. Built in
// one sweep over the graph, this index keeps the walks in a few contiguous
// arrays. It holds views of the graph's op type names: the graph outlives it.
class GraphIndex {
public:
    GraphIndex() = default;  // of an empty graph
    explicit GraphIndex(const ir::Graph &graph);

    std::size_t opCount() const { return m_inputStart.size() - 1; }
    std::size_t tensorCount() const { return m_producer.size(); }
    std::span<const ir::TensorId> inputs(ir::OpId op) const
    {
        return {m_inputs.data() + m_inputStart[op.index()], m_inputs.data() + m_inputStart[op.index() + 1]};
    }
    std::span<const ir::TensorId> outputs(ir::OpId op) const
    {
        return {m_outputs.data() + m_outputStart[op.index()], m_outputs.data() + m_outputStart[op.index() + 1]};
    }
    // As ir::Tensor::consumers: one entry per input slot that reads t, in op order.
    std::span<const ir::OpId> consumers(ir::TensorId t) const
    {
        return {m_consumers.data() + m_consumerStart[t.index()],
                m_consumers.data() + m_consumerStart[t.index() + 1]};
    }
    // The op's type as a small number, the same for every op of that type.
    std::uint32_t type(ir::OpId op) const { return m_type[op.index()]; }
    // The type names by number.
    const std::vector<std::string_view> &typeNames() const { return m_typeNames; }
    ir::OpId producer(ir::TensorId t) const { return m_producer[t.index()]; }
    ir::Role role(ir::TensorId t) const { return m_role[t.index()]; }
    // A hash of what a structural comparison sees of a tensor: its shape,
    // dtype and whether it is a parameter, never its name. Taken in the same
    // sweep that reads producer and role, so no later pass walks the
    // tensors' shapes on the heap again.
    std::uint64_t form(ir::TensorId t) const { return m_form[t.index()]; }

    // Graph::topologicalOrder's order (Kahn's algorithm, ties by id); every
    // op in id order when the graph has a cycle.
    const std::vector<ir::OpId> &order() const { return m_order; }
    // Position of each op in order().
    int rank(ir::OpId op) const { return m_rank[op.index()]; }

private:
    std::vector<std::int32_t> m_inputStart{0}, m_outputStart{0}, m_consumerStart{0};
    std::vector<ir::TensorId> m_inputs, m_outputs;
    std::vector<ir::OpId> m_consumers;
    std::vector<std::uint32_t> m_type;
    std::vector<std::string_view> m_typeNames;  // views into the graph's op types
    std::vector<ir::OpId> m_producer;
    std::vector<ir::Role> m_role;
    std::vector<std::uint64_t> m_form;
    std::vector<ir::OpId> m_order;
    std::vector<int> m_rank;
};

} // namespace tapestry::passes
