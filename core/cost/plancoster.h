#pragma once

#include "cost/activationmemory.h"
#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/opkinds.h"
#include "sharding/oprule.h"
#include "sharding/shardingspec.h"
#include "sharding/strategy.h"

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace tapestry::cost {

// evaluatePlan for one graph on one mesh, again and again, as the studio
// costs its plan on every edit. What depends on the graph alone (the
// topological order, each op's rule, the gradient flow, who reads each
// tensor) is derived once, each rule once per kind of op (OpKinds); a
// strategy is resolved once per kind and input specs, so the copies of a
// repeated layer share their ops' strategies. Each cost() after the first resolves again only
// the strategies of the ops that read a tensor whose spec changed, charges
// again only the reshards and gradient reductions of the tensors those ops
// touch, and then sums the step in evaluatePlan's order, so what it returns
// is exactly what evaluatePlan returns for the same specs. A pin applied to
// every instance of a class re-resolves the neighbourhood of the pinned
// tensors, not the graph.
//
// Holds a reference to the graph: the graph outlives the coster.
class PlanCoster {
public:
    PlanCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const CostOptions &options = {});

    // The cost of a step with every tensor stored as `specs` says (indexed
    // by tensor id; legal specs, see ShardingSpec::problem).
    PlanCost cost(const std::vector<sharding::ShardingSpec> &specs);
    // The same without the breakdowns that grow with the graph (the
    // collectives, byOp and byCollective left empty): the step time,
    // compute, communication, phases, memory and fit summed in cost()'s
    // order, to the same bits. Ranking plans (cost::Objective) reads no
    // more, and skips a string per collective and per op.
    PlanCost totals(const std::vector<sharding::ShardingSpec> &specs);
    // Costs under `options` from now on. What is charged depends on the
    // specs and the mesh alone, the options only on how it is summed
    // (recomputation, ZeRO, micro-batches, overlap): a plan costed again
    // under other techniques is summed again, not charged again.
    void setOptions(const CostOptions &options);

    // Ops whose strategy the last cost() resolved: all of them the first time.
    std::size_t resolvedOps() const { return m_resolved; }
    const sharding::Mesh &mesh() const { return m_mesh; }
    const CostOptions &options() const { return m_options; }

    // What the coster derived from the graph, for another coster of the
    // same graph and options (search::SegmentCoster) to take, not derive
    // again: gradientFlow() by tensor id; by op id recomputeRoles(),
    // recomputeModes() of the options, layerShares(); parameterShares() by
    // tensor id.
    const std::vector<bool> &flow() const { return m_flow; }
    const std::vector<std::uint8_t> &roles() const { return m_roles; }
    const std::vector<Recompute> &modes() const { return m_modes; }
    const std::vector<double> &shares() const { return m_shares; }
    const std::vector<double> &parameterShares() const { return m_parameterShares; }

private:
    // A reader of a tensor: the op's position in the topological order and
    // the input slot it reads the tensor through.
    struct Read {
        std::int32_t op;
        std::int32_t slot;
    };
    // What one op is charged, apart from the sums.
    struct OpCharge {
        std::int32_t strategy = -1;  // into m_strategies
        bool flows = false;  // a gradient flows through it
        // Reshards of its inputs to what it computes on, with the input slot
        // of each (in slot order): a tensor is resharded once per distinct
        // spec its readers need, charged to the first of them.
        std::vector<CollectiveCost> inputReshards;
        std::vector<std::int32_t> inputReshardSlot;
        // Internal forward collectives, then its outputs resharded to how
        // they are stored.
        std::vector<CollectiveCost> forward;
        // Output gradients resharded back, then internal backward
        // collectives (when a gradient flows).
        std::vector<CollectiveCost> backward;
    };
    // A gradient reduction of a tensor, charged to the first reader (by
    // position) whose input gradient comes in that spec.
    struct Reduction {
        std::int32_t op;
        CollectiveCost collective;
    };

    // Brings the charges up to `specs` (all of them the first time, else
    // by what differs from the last specs).
    void charge(const std::vector<sharding::ShardingSpec> &specs);
    void resolve(std::size_t k, const std::vector<sharding::ShardingSpec> &specs);
    void chargeOp(std::size_t k, const std::vector<sharding::ShardingSpec> &specs);
    void chargeTensor(std::size_t t, const std::vector<sharding::ShardingSpec> &specs);
    PlanCost sum(const std::vector<sharding::ShardingSpec> &specs, bool breakdowns) const;
    CollectiveCost costed(const sharding::Collective &c, std::size_t k, Phase phase) const;
    const std::string &movedTensor(const sharding::Collective &c, std::size_t k) const;
    Recomputed recomputed(std::size_t k) const
    {
        return recomputedForward(m_roles[m_order[k].index()], m_modes[m_order[k].index()],
                                 m_options.techniques.flashAttention);
    }
    const sharding::OpStrategy &strategy(std::size_t k) const
    {
        return m_strategies[static_cast<std::size_t>(m_charges[k].strategy)];
    }

    const ir::Graph &m_graph;
    sharding::Mesh m_mesh;
    CostOptions m_options;

    // Of the graph alone.
    std::vector<ir::OpId> m_order;
    std::vector<std::int32_t> m_position;  // by op id: its place in m_order
    sharding::OpKinds m_kinds;
    std::vector<std::optional<sharding::DimMap>> m_rules;  // by kind
    std::vector<bool> m_flow;                               // by tensor id
    std::vector<std::int32_t> m_readStart;                  // by tensor id, into m_reads
    std::vector<Read> m_reads;
    std::vector<std::int32_t> m_inputTensorStart;  // by position, into m_inputTensors
    std::vector<std::int32_t> m_inputTensors;      // each op's distinct input tensors, ascending
    std::vector<std::int32_t> m_byName;            // positions in the order of their ops' names, once cost() needs them
    std::vector<ir::TensorId> m_parameters;
    std::vector<std::uint8_t> m_roles;  // by op id: recomputeRoles()
    std::vector<Recompute> m_modes;     // by op id: recomputeModes()
    std::vector<double> m_shares;       // by op id: layerShares()
    std::vector<double> m_parameterShares;  // by tensor id: parameterShares()

    // Strategies as resolved for one op of their kind (their collectives
    // name that op's tensors), and which one a kind takes under given input
    // specs.
    std::vector<sharding::OpStrategy> m_strategies;
    std::vector<std::map<std::vector<sharding::ShardingSpec>, std::int32_t>> m_strategyOf;  // by kind

    // Of the last cost().
    std::vector<sharding::ShardingSpec> m_specs;
    std::vector<OpCharge> m_charges;                  // by position
    std::vector<std::vector<Reduction>> m_reductions;  // by tensor id
    std::size_t m_resolved = 0;
};

} // namespace tapestry::cost
