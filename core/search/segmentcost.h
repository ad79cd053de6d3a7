#pragma once

#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "search/segment.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <map>
#include <vector>

namespace tapestry::search {

// One segment under one choice of weights and boundary specs, costed for a
// single copy.
struct SegmentCost {
    double time = 0;             // compute + communication + optimizer update, s
    double comm = 0;             // s
    std::int64_t memory = 0;     // model states and activations per device, bytes
    std::int64_t parameterMemory = 0;
    cost::PlanCost breakdown;    // by op and collective, for explanations
};

// Costs segments against one working copy of the graph's specs, so that an
// evaluation touches only the segment's tensors and takes time in
// proportion to the segment, not the graph: that is what keeps the search
// flat in layer count.
class SegmentCoster {
public:
    SegmentCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const cost::CostOptions &options);

    // Propagates specs through `segment` from `boundary` (the stored specs
    // of its inputs and of those outputs whose spec the caller fixes) and
    // `weights` (one spec per segment weight), derives its small
    // parameters, and costs it. The resulting specs stay readable through
    // spec() until the next call.
    SegmentCost evaluate(const Segment &segment, const std::map<ir::TensorId, sharding::ShardingSpec> &boundary,
                         const std::vector<sharding::ShardingSpec> &weights, bool withBreakdown = false);
    // Parameter bytes per device of `weights` alone: a lower bound of the
    // segment's memory, checked before costing.
    std::int64_t weightMemory(const Segment &segment, const std::vector<sharding::ShardingSpec> &weights) const;

    const sharding::ShardingSpec &spec(ir::TensorId t) const { return m_specs[t.index()]; }
    // The spec the last evaluate() produced `t` in (before storing it, so
    // possibly a pending sum), for outputs of the segment it costed.
    const sharding::ShardingSpec &produced(ir::TensorId t) const { return m_produced[t.index()]; }
    // The communication evaluate() charges for storing output `t` (produced
    // as produced(t) says) as `stored`: its forward reshard and its
    // gradient's. Lets a search cost one propagation under every stored
    // spec of a link tensor that nothing in the segment reads.
    SegmentCost storageCost(ir::TensorId t, const sharding::ShardingSpec &stored) const;
    std::size_t evaluations() const { return m_evaluations; }

private:
    const ir::Graph &m_graph;
    const sharding::Mesh &m_mesh;
    cost::CostOptions m_options;
    std::vector<bool> m_flow;
    bool m_attention = false;  // activations by Korthikanti's formula (else saved tensors)
    std::vector<sharding::ShardingSpec> m_specs;
    std::vector<sharding::ShardingSpec> m_produced;
    std::size_t m_evaluations = 0;
};

// Splits `ops` (topological order) into blocks at residual-stream tensors:
// an Add's output read by two or more ops, that is the only tensor written
// before it and read after it.
std::vector<std::vector<ir::OpId>> splitAtResidualCuts(const ir::Graph &graph, const std::vector<ir::OpId> &ops);

// A segment of `ops` with its weights, derived parameters, boundary tensors
// and weight choices on `mesh`.
Segment makeSegment(const ir::Graph &graph, const sharding::Mesh &mesh, std::string name, int classIndex,
                    int instances, std::vector<ir::OpId> ops);

} // namespace tapestry::search
