#include "cost/plancoster.h"

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "cost/collectivetime.h"
#include "cost/costmodel.h"
#include "ir/error.h"
#include "sharding/reshard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>
#include <string_view>

namespace tapestry::cost {

namespace {

using sharding::ShardingSpec;

// gradientFlow() over a topological order with the rule of each kind of op
// already derived (rules[kind]).
std::vector<bool> gradientFlowOver(const ir::Graph &graph, const std::vector<ir::OpId> &order,
                                   const sharding::OpKinds &kinds,
                                   const std::vector<std::optional<sharding::DimMap>> &rules)
{
    std::vector<bool> flow(graph.tensorCount(), false);
    for (std::size_t t = 0; t < graph.tensorCount(); ++t)
        flow[t] = graph.tensors()[t].role == ir::Role::Parameter && sharding::isFloat(graph.tensors()[t].dtype);
    for (std::size_t k = 0; k < order.size(); ++k) {
        const ir::Op &op = graph.op(order[k]);
        const auto &rule = rules[static_cast<std::size_t>(kinds.of(order[k]))];
        bool flows = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            flows = flows || ((!rule || !rule->ignored[i]) && flow[op.inputs[i].index()]);
        if (!flows)
            continue;
        for (auto t : op.outputs)
            if (sharding::isFloat(graph.tensor(t).dtype))
                flow[t.index()] = true;
    }
    return flow;
}

// The rule of each kind of op.
std::vector<std::optional<sharding::DimMap>> rulesOf(const ir::Graph &graph, const sharding::OpKinds &kinds)
{
    std::vector<std::optional<sharding::DimMap>> rules;
    rules.reserve(kinds.count());
    for (std::size_t kind = 0; kind < kinds.count(); ++kind)
        rules.push_back(sharding::opRule(graph, graph.op(kinds.first(static_cast<std::int32_t>(kind)))));
    return rules;
}

std::vector<ir::OpId> orderOf(const ir::Graph &graph)
{
    auto order = graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{graph.name, {}, "the graph has a cycle; it cannot be costed"});
    return std::move(*order);
}

constexpr std::array<sharding::CollectiveKind, 4> kKinds{
    sharding::CollectiveKind::AllReduce, sharding::CollectiveKind::AllGather,
    sharding::CollectiveKind::ReduceScatter, sharding::CollectiveKind::AllToAll};

std::size_t kindIndex(sharding::CollectiveKind kind)
{
    return static_cast<std::size_t>(std::find(kKinds.begin(), kKinds.end(), kind) - kKinds.begin());
}

} // namespace

std::vector<bool> gradientFlow(const ir::Graph &graph)
{
    const sharding::OpKinds kinds(graph);
    return gradientFlowOver(graph, orderOf(graph), kinds, rulesOf(graph, kinds));
}

PlanCoster::PlanCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const CostOptions &options)
    : m_graph(graph), m_mesh(mesh), m_options(options), m_order(orderOf(graph)), m_kinds(graph)
{
    const std::size_t n = m_order.size(), tensors = graph.tensorCount();
    m_rules = rulesOf(graph, m_kinds);
    m_flow = gradientFlowOver(graph, m_order, m_kinds, m_rules);
    m_strategyOf.resize(m_kinds.count());
    m_position.assign(graph.opCount(), -1);
    for (std::size_t k = 0; k < n; ++k)
        m_position[m_order[k].index()] = static_cast<std::int32_t>(k);

    // Readers of each tensor by position, then slot: the order in which
    // evaluatePlan meets them.
    m_readStart.assign(tensors + 1, 0);
    for (ir::OpId id : m_order)
        for (ir::TensorId t : graph.op(id).inputs)
            ++m_readStart[t.index() + 1];
    std::partial_sum(m_readStart.begin(), m_readStart.end(), m_readStart.begin());
    m_reads.resize(static_cast<std::size_t>(m_readStart.back()));
    std::vector<std::int32_t> fill(m_readStart.begin(), m_readStart.end() - 1);
    m_inputTensorStart.reserve(n + 1);
    m_inputTensorStart.push_back(0);
    for (std::size_t k = 0; k < n; ++k) {
        const ir::Op &op = graph.op(m_order[k]);
        const auto first = m_inputTensors.size();
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            const auto t = op.inputs[i].index();
            m_reads[static_cast<std::size_t>(fill[t]++)] = {static_cast<std::int32_t>(k), static_cast<std::int32_t>(i)};
            m_inputTensors.push_back(static_cast<std::int32_t>(t));
        }
        std::sort(m_inputTensors.begin() + static_cast<std::ptrdiff_t>(first), m_inputTensors.end());
        m_inputTensors.erase(std::unique(m_inputTensors.begin() + static_cast<std::ptrdiff_t>(first), m_inputTensors.end()),
                             m_inputTensors.end());
        m_inputTensorStart.push_back(static_cast<std::int32_t>(m_inputTensors.size()));
    }

    m_parameters = graph.tensorsWithRole(ir::Role::Parameter);
    m_roles = recomputeRoles(graph);
    m_modes = recomputeModes(graph, options.techniques);
    m_shares = layerShares(graph);
    m_parameterShares = cost::parameterShares(graph);
    m_charges.resize(n);
    m_reductions.resize(tensors);
}

CollectiveCost PlanCoster::costed(const sharding::Collective &c, std::size_t k, Phase phase) const
{
    return costCollective(c, m_graph.op(m_order[k]).name, phase, m_mesh);
}

void PlanCoster::resolve(std::size_t k, const std::vector<ShardingSpec> &specs)
{
    const ir::OpId id = m_order[k];
    std::vector<ShardingSpec> inputs;
    inputs.reserve(m_graph.op(id).inputs.size());
    for (auto t : m_graph.op(id).inputs)
        inputs.push_back(specs[t.index()]);
    auto &known = m_strategyOf[static_cast<std::size_t>(m_kinds.of(id))];
    auto it = known.find(inputs);
    if (it == known.end()) {
        m_strategies.push_back(
            sharding::resolveStrategy(m_graph, id, inputs, m_mesh, m_rules[static_cast<std::size_t>(m_kinds.of(id))]));
        it = known.emplace(std::move(inputs), static_cast<std::int32_t>(m_strategies.size() - 1)).first;
    }
    m_charges[k].strategy = it->second;
    ++m_resolved;
}

// The tensor an internal collective of op k moves: the strategy names the
// input of the op it was resolved for, and op k reads its own in that slot.
const std::string &PlanCoster::movedTensor(const sharding::Collective &c, std::size_t k) const
{
    const ir::Op &op = m_graph.op(m_order[k]), &resolvedFor = m_graph.op(strategy(k).op);
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (m_graph.tensor(resolvedFor.inputs[i]).name == c.tensor)
            return m_graph.tensor(op.inputs[i]).name;
    return c.tensor;
}

// What op k is charged on its own (cost::chargeOp): internal collectives,
// its outputs resharded to how they are stored, and back for their
// gradients.
void PlanCoster::chargeOp(std::size_t k, const std::vector<ShardingSpec> &specs)
{
    const ir::Op &op = m_graph.op(m_order[k]);
    OpCharge &charge = m_charges[k];
    const sharding::OpStrategy &s = strategy(k);
    charge.forward.clear();
    charge.backward.clear();
    charge.flows = gradientFlows(op, s, m_flow);
    struct Sink {
        const PlanCoster &coster;
        OpCharge &charge;
        std::size_t k;
        void collective(Phase phase, const sharding::Collective &c)
        {
            auto &list = phase == Phase::Forward ? charge.forward : charge.backward;
            list.push_back(coster.costed(c, k, phase));
            list.back().tensor = coster.movedTensor(c, k);
        }
        void reshard(Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                     std::string_view reason)
        {
            appendReshard(phase == Phase::Forward ? charge.forward : charge.backward, coster.m_graph.tensor(t), from,
                          to, phase, reason, coster.m_graph.op(coster.m_order[k]).name, coster.m_mesh);
        }
    } sink{*this, charge, k};
    cost::chargeOp(m_graph, op, s, charge.flows,
                   [&](std::size_t o) -> const ShardingSpec & { return specs[op.outputs[o].index()]; }, sink);
}

// What tensor t costs between its writer and its readers (chargeRead,
// chargeGradientSum): resharded once per distinct spec its readers compute
// on, charged to the first of them, and its gradient contributions summed
// per spec and resharded to its gradient spec, charged to the first reader
// producing each.
void PlanCoster::chargeTensor(std::size_t t, const std::vector<ShardingSpec> &specs)
{
    const auto id = ir::TensorId(static_cast<std::int32_t>(t));
    // A reshard's collectives, costed and charged to the op at position k.
    struct Collected {
        const PlanCoster &coster;
        std::vector<CollectiveCost> &out;
        std::size_t k;
        void reshard(Phase phase, ir::TensorId x, const ShardingSpec &from, const ShardingSpec &to,
                     std::string_view reason)
        {
            appendReshard(out, coster.m_graph.tensor(x), from, to, phase, reason,
                          coster.m_graph.op(coster.m_order[k]).name, coster.m_mesh);
        }
    };
    const auto first = m_reads.begin() + m_readStart[t], last = m_reads.begin() + m_readStart[t + 1];
    std::vector<ShardingSpec> forward;
    std::vector<std::pair<ShardingSpec, std::int32_t>> contributions;
    for (auto r = first; r != last; ++r) {
        OpCharge &charge = m_charges[static_cast<std::size_t>(r->op)];
        const sharding::OpStrategy &s = strategy(static_cast<std::size_t>(r->op));
        // Drop what this slot was charged before.
        for (std::size_t j = charge.inputReshardSlot.size(); j-- > 0;)
            if (charge.inputReshardSlot[j] == r->slot) {
                charge.inputReshards.erase(charge.inputReshards.begin() + static_cast<std::ptrdiff_t>(j));
                charge.inputReshardSlot.erase(charge.inputReshardSlot.begin() + static_cast<std::ptrdiff_t>(j));
            }
        const auto slot = static_cast<std::size_t>(r->slot);
        if (!readsData(s, slot))
            continue;
        if (m_flow[t] && std::none_of(contributions.begin(), contributions.end(),
                                      [&](const auto &c) { return c.first == s.inputGradients[slot]; }))
            contributions.push_back({s.inputGradients[slot], r->op});
        if (std::find(forward.begin(), forward.end(), s.inputs[slot]) != forward.end())
            continue;
        forward.push_back(s.inputs[slot]);
        // Kept in slot order: after the reshards of earlier slots.
        const auto at = std::upper_bound(charge.inputReshardSlot.begin(), charge.inputReshardSlot.end(), r->slot) -
                        charge.inputReshardSlot.begin();
        std::vector<CollectiveCost> reshards;
        chargeRead(id, specs[t], s.inputs[slot], Collected{*this, reshards, static_cast<std::size_t>(r->op)});
        charge.inputReshards.insert(charge.inputReshards.begin() + at, reshards.begin(), reshards.end());
        charge.inputReshardSlot.insert(charge.inputReshardSlot.begin() + at, reshards.size(), r->slot);
    }

    auto &reductions = m_reductions[t];
    reductions.clear();
    for (const auto &[spec, op] : contributions) {
        std::vector<CollectiveCost> sums;
        chargeGradientSum(m_graph, id, spec, specs[t], Collected{*this, sums, static_cast<std::size_t>(op)});
        for (auto &c : sums)
            reductions.push_back({op, std::move(c)});
    }
}

PlanCost PlanCoster::cost(const std::vector<ShardingSpec> &specs)
{
    charge(specs);
    if (m_byName.size() != m_order.size()) {
        // Only the breakdown by op needs them: a coster that only ranks
        // plans (totals()) never sorts the names.
        m_byName.resize(m_order.size());
        std::iota(m_byName.begin(), m_byName.end(), 0);
        // Names from the graph's flat arrays: side by side in one block,
        // where the records keep each in a block of its own.
        const auto arrays = m_graph.arrays().view();
        std::sort(m_byName.begin(), m_byName.end(), [&](std::int32_t a, std::int32_t b) {
            return arrays.name(m_order[static_cast<std::size_t>(a)]) < arrays.name(m_order[static_cast<std::size_t>(b)]);
        });
    }
    return sum(specs, true);
}

PlanCost PlanCoster::totals(const std::vector<ShardingSpec> &specs)
{
    charge(specs);
    return sum(specs, false);
}

void PlanCoster::setOptions(const CostOptions &options)
{
    if (options == m_options)
        return;
    if (!(options.techniques == m_options.techniques))
        m_modes = recomputeModes(m_graph, options.techniques);
    m_options = options;
}

void PlanCoster::charge(const std::vector<ShardingSpec> &specs)
{
    if (specs.size() != m_graph.tensorCount())
        throw TapestryError(Error{m_graph.name, {}, "a plan to cost needs one spec per tensor"});
    const std::size_t n = m_order.size(), tensors = m_graph.tensorCount();
    m_resolved = 0;
    try {
        if (m_specs.empty() && tensors > 0) {
            for (std::size_t k = 0; k < n; ++k)
                resolve(k, specs);
            for (std::size_t k = 0; k < n; ++k)
                chargeOp(k, specs);
            for (std::size_t t = 0; t < tensors; ++t)
                chargeTensor(t, specs);
        } else {
            // The ops reading a changed tensor compute on other specs; the ops
            // writing one store their outputs otherwise; every tensor those
            // readers touch, and the changed ones, is charged again.
            std::vector<char> resolveOp(n, 0), chargeOpAgain(n, 0), chargeTensorAgain(tensors, 0);
            for (std::size_t t = 0; t < tensors; ++t) {
                if (specs[t] == m_specs[t])
                    continue;
                chargeTensorAgain[t] = 1;
                for (auto r = m_readStart[t]; r < m_readStart[t + 1]; ++r)
                    resolveOp[static_cast<std::size_t>(m_reads[static_cast<std::size_t>(r)].op)] = 1;
                const ir::OpId producer = m_graph.tensors()[t].producer;
                if (producer.valid())
                    chargeOpAgain[static_cast<std::size_t>(m_position[producer.index()])] = 1;
            }
            for (std::size_t k = 0; k < n; ++k) {
                if (!resolveOp[k])
                    continue;
                resolve(k, specs);
                chargeOpAgain[k] = 1;
                for (auto i = m_inputTensorStart[k]; i < m_inputTensorStart[k + 1]; ++i)
                    chargeTensorAgain[static_cast<std::size_t>(m_inputTensors[static_cast<std::size_t>(i)])] = 1;
            }
            for (std::size_t k = 0; k < n; ++k)
                if (chargeOpAgain[k])
                    chargeOp(k, specs);
            for (std::size_t t = 0; t < tensors; ++t)
                if (chargeTensorAgain[t])
                    chargeTensor(t, specs);
        }
    } catch (...) {
        m_specs.clear();  // charges half updated: the next cost() starts afresh
        throw;
    }
    m_specs = specs;
}

// The step summed exactly as evaluatePlan sums it: compute op by op in
// topological order, then every collective in step order (forward ops in
// order, backward ops in reverse), then the optimizer and memory.
PlanCost PlanCoster::sum(const std::vector<ShardingSpec> &specs, bool breakdowns) const
{
    const std::size_t n = m_order.size();
    PlanCost cost;
    std::vector<CostTotals> byOp(breakdowns ? n : 0);
    CostTotals forward, backward;
    bool anyBackward = false;
    std::map<std::string_view, std::pair<int, std::string_view>> noRule;  // op type -> count, first op
    for (std::size_t k = 0; k < n; ++k) {
        const sharding::OpStrategy &s = strategy(k);
        if (!s.hasRule) {
            const ir::Op &op = m_graph.op(m_order[k]);
            auto &entry = noRule[op.type];
            if (entry.first++ == 0)
                entry.second = op.name;
        }
        const OpCompute c = opCompute(s, m_charges[k].flows, m_mesh, recomputed(k));
        if (breakdowns) {
            byOp[k].flops += c.forwardFlops;
            byOp[k].compute += c.forward;
        }
        forward.flops += c.forwardFlops;
        forward.compute += c.forward;
        if (!c.flows)
            continue;
        anyBackward = true;
        if (breakdowns) {
            byOp[k].flops += c.backwardFlops;
            byOp[k].compute += c.backward;
        }
        backward.flops += c.backwardFlops;
        backward.compute += c.backward;
    }

    // Collectives in step order, each charged to the op at its position.
    // Each is summed as it comes; with the breakdowns it is also kept, by
    // op and by kind.
    std::array<CostTotals, kKinds.size()> byKind{};
    std::array<bool, kKinds.size()> kindSeen{};
    if (breakdowns) {
        std::size_t count = 0;
        for (std::size_t k = 0; k < n; ++k)
            count += m_charges[k].inputReshards.size() + m_charges[k].forward.size() + m_charges[k].backward.size();
        for (const auto &reductions : m_reductions)
            count += reductions.size();
        cost.collectives.reserve(count);
    }
    auto addTimes = [&](sharding::CollectiveKind collective, Phase phase, std::int64_t wire, double time,
                        std::size_t k) {
        const std::size_t kind = kindIndex(collective);
        kindSeen[kind] = true;
        anyBackward = anyBackward || phase == Phase::Backward;
        for (CostTotals *totals : {breakdowns ? &byOp[k] : nullptr, &byKind[kind],
                                   phase == Phase::Forward ? &forward : &backward}) {
            if (!totals)
                continue;
            totals->comm += time;
            totals->commBytes += wire;
            totals->collectives += 1;
        }
        cost.comm += time;
        cost.commBytes += wire;
    };
    auto add = [&](const CollectiveCost &c, Phase phase, std::size_t k) {
        addTimes(c.kind, phase, c.wireBytes, c.time, k);
    };
    auto append = [&](const CollectiveCost &c, std::size_t k) {
        add(c, c.phase, k);
        if (breakdowns)
            cost.collectives.push_back(c);
    };
    for (std::size_t k = 0; k < n; ++k) {
        for (const auto &c : m_charges[k].inputReshards)
            append(c, k);
        for (const auto &c : m_charges[k].forward)
            append(c, k);
    }
    for (std::size_t k = n; k-- > 0;) {
        // A recomputed op's forward collectives again, before its backward.
        if (m_charges[k].flows && recomputed(k).comm > 0)
            for (const auto *list : {&m_charges[k].inputReshards, &m_charges[k].forward})
                for (const CollectiveCost &c : *list) {
                    add(c, Phase::Backward, k);
                    if (!breakdowns)
                        continue;
                    cost.collectives.push_back(c);
                    cost.collectives.back().phase = Phase::Backward;
                    cost.collectives.back().reason = "recomputed: " + c.reason;
                }
        for (const auto &c : m_charges[k].backward)
            append(c, k);
        for (auto i = m_inputTensorStart[k]; i < m_inputTensorStart[k + 1]; ++i) {
            const auto t = static_cast<std::size_t>(m_inputTensors[static_cast<std::size_t>(i)]);
            for (const auto &r : m_reductions[t]) {
                if (static_cast<std::size_t>(r.op) != k)
                    continue;
                if (const auto halves = zeroGradientHalves(r.collective, m_graph.tensors()[t], specs[t], m_mesh,
                                                           m_options.techniques)) {
                    for (const CollectiveCost &c : *halves)
                        append(c, k);
                } else {
                    append(r.collective, k);
                }
            }
        }
    }
    // ZeRO's collectives of each parameter, charged to its first reader.
    if (m_options.techniques.zeroStage >= 2)
        for (auto t : m_parameters) {
            if (m_readStart[t.index()] == m_readStart[t.index() + 1])
                continue;
            const auto k = static_cast<std::size_t>(m_reads[static_cast<std::size_t>(m_readStart[t.index()])].op);
            if (breakdowns)
                for (const auto &c : zeroCollectives(m_graph.tensor(t), specs[t.index()], m_mesh, m_options,
                                                     m_graph.op(m_order[k]).name))
                    append(c, k);
            else
                zeroCollectiveTimes(m_graph.tensor(t), specs[t.index()], m_mesh, m_options,
                                    [&](sharding::CollectiveKind kind, Phase phase, std::int64_t wire, double time) {
                                        addTimes(kind, phase, wire, time, k);
                                    });
        }
    if (breakdowns) {
        for (std::size_t k : m_byName)
            cost.byOp.emplace_hint(cost.byOp.end(), m_graph.op(m_order[k]).name, byOp[k]);
        for (std::size_t kind = 0; kind < kKinds.size(); ++kind)
            if (kindSeen[kind])
                cost.byCollective.emplace(std::string(sharding::toString(kKinds[kind])), byKind[kind]);
    }
    if (n > 0)
        cost.byPhase.emplace("forward", forward);
    if (anyBackward)
        cost.byPhase.emplace("backward", backward);

    ParameterLoad load;
    for (auto t : m_parameters)
        load += parameterLoad(m_graph.tensor(t), specs[t.index()], m_mesh, m_options, m_parameterShares[t.index()]);
    const ParameterCharge perParameter = chargeParameters(load, m_mesh, m_options);
    CostTotals &optimizer = cost.byPhase["optimizer"];
    optimizer.flops += perParameter.optimizer.flops;
    optimizer.compute += perParameter.optimizer.compute;

    for (const auto &[phase, totals] : cost.byPhase)
        cost.compute += totals.compute;
    auto phase = [&](const char *name) {
        const auto it = cost.byPhase.find(name);
        return it == cost.byPhase.end() ? CostTotals{} : it->second;
    };
    cost.stepTime =
        stepSeconds(cost.compute, cost.comm, phase("forward"), phase("backward"), phase("optimizer"), m_options);

    cost.memory = perParameter.memory;
    const auto layers = transformerLayers(m_graph, m_mesh, specs);
    if (!layers.empty()) {
        cost.memory.activationModel = "korthikanti";
        for (const auto &l : layers) {
            cost.memory.activations += layerActivationBytes(l, m_options);
            if (const auto op = m_graph.findOp(l.softmaxOp))
                    cost.memory.activations += layerWorkingBytes(l, m_options, m_shares[op->index()]);
        }
    } else {
        cost.memory.activationModel = "saved-tensors";
        cost.memory.activations = savedTensorBytes(m_graph, m_mesh, specs, m_options.techniques.microBatches);
    }
    cost.memoryCapacity = m_mesh.device.memoryBytes;
    cost.fitsMemory = cost.memory.total() <= cost.memoryCapacity;

    for (const auto &[type, entry] : noRule)
        cost.warnings.push_back("no sharding rule for " + std::string(type) + " (" + std::to_string(entry.first) +
                                " op(s), first '" + std::string(entry.second) + "'): inputs gathered, computed replicated");
    return cost;
}

} // namespace tapestry::cost
