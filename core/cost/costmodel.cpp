#include "cost/costmodel.h"

#include "cost/activationmemory.h"
#include "cost/collectivetime.h"
#include "ir/error.h"
#include "sharding/oprule.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace tapestry::cost {

namespace {

using sharding::Collective;
using sharding::ShardingSpec;

struct OpCosts {
    std::vector<CollectiveCost> forward;
    std::vector<CollectiveCost> backward;
};

// gradientFlow() over a topological order with each op's rule already
// derived (rules[k] for order[k]).
std::vector<bool> gradientFlowOver(const ir::Graph &graph, const std::vector<ir::OpId> &order,
                                   const std::vector<std::optional<sharding::DimMap>> &rules)
{
    std::vector<bool> flow(graph.tensorCount(), false);
    for (std::size_t t = 0; t < graph.tensorCount(); ++t)
        flow[t] = graph.tensors()[t].role == ir::Role::Parameter && sharding::isFloat(graph.tensors()[t].dtype);
    for (std::size_t k = 0; k < order.size(); ++k) {
        const ir::Op &op = graph.op(order[k]);
        const auto &rule = rules[k];
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

std::vector<std::optional<sharding::DimMap>> rulesOf(const ir::Graph &graph, const std::vector<ir::OpId> &order)
{
    std::vector<std::optional<sharding::DimMap>> rules;
    rules.reserve(order.size());
    for (ir::OpId id : order)
        rules.push_back(sharding::opRule(graph, graph.op(id)));
    return rules;
}

} // namespace

std::vector<bool> gradientFlow(const ir::Graph &graph)
{
    const auto order = graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{graph.name, {}, "the graph has a cycle; it cannot be costed"});
    return gradientFlowOver(graph, *order, rulesOf(graph, *order));
}

PlanCost evaluateOps(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<ShardingSpec> &specs,
                     const std::vector<ir::OpId> &ops, const std::vector<sharding::OpStrategy> &strategies,
                     const std::vector<bool> &flow)
{
    PlanCost cost;
    auto costed = [&](const Collective &c, const std::string &op, Phase phase) {
        const auto &axis = mesh.axes[static_cast<std::size_t>(c.axis)];
        return CollectiveCost{op,
                              c.tensor,
                              c.kind,
                              axis.name,
                              phase,
                              c.bytes,
                              wireBytes(c.kind, c.bytes, axis.size),
                              collectiveTime(c.kind, c.bytes, axis),
                              c.reason};
    };

    std::vector<OpCosts> perOp(ops.size());
    std::set<std::pair<std::size_t, ShardingSpec>> reshardedForward;
    // Per tensor (by index, so reductions come out in tensor order): the
    // distinct specs its gradient contributions come in, with the position
    // of the first consumer producing each (charged the reduction).
    std::map<std::size_t, std::vector<std::pair<ShardingSpec, std::size_t>>> gradients;

    for (std::size_t k = 0; k < ops.size(); ++k) {
        const ir::OpId id = ops[k];
        const ir::Op &op = graph.op(id);
        const sharding::OpStrategy &s = strategies[k];
        OpCosts &oc = perOp[k];
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (!s.dataInputs[i] || !reshardedForward.insert({op.inputs[i].index(), s.inputs[i]}).second)
                continue;
            for (const auto &c :
                 sharding::reshard(graph.tensor(op.inputs[i]), specs[op.inputs[i].index()], s.inputs[i], mesh)
                     .collectives)
                oc.forward.push_back(costed(c, op.name, Phase::Forward));
        }
        for (const auto &c : s.internalForward)
            oc.forward.push_back(costed(c, op.name, Phase::Forward));
        for (std::size_t o = 0; o < op.outputs.size(); ++o)
            for (const auto &c :
                 sharding::reshard(graph.tensor(op.outputs[o]), s.outputs[o], specs[op.outputs[o].index()], mesh)
                     .collectives)
                oc.forward.push_back(costed(c, op.name, Phase::Forward));

        bool flows = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            flows = flows || (s.dataInputs[i] && flow[op.inputs[i].index()]);
        const double peak = mesh.device.peak(s.computeType) * mesh.device.achievableFraction;
        CostTotals &totals = cost.byOp[op.name];
        totals.flops += s.forwardFlops;
        totals.compute += peak > 0 ? s.forwardFlops / peak : 0;
        cost.byPhase["forward"].flops += s.forwardFlops;
        cost.byPhase["forward"].compute += peak > 0 ? s.forwardFlops / peak : 0;
        if (!flows)
            continue;
        totals.flops += s.backwardFlops;
        totals.compute += peak > 0 ? s.backwardFlops / peak : 0;
        cost.byPhase["backward"].flops += s.backwardFlops;
        cost.byPhase["backward"].compute += peak > 0 ? s.backwardFlops / peak : 0;
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::Tensor &out = graph.tensor(op.outputs[o]);
            if (!sharding::isFloat(out.dtype))
                continue;
            const ShardingSpec stored = sharding::gradientSpec(specs[op.outputs[o].index()]);
            for (auto c : sharding::reshard(out, stored, sharding::gradientSpec(s.outputs[o]), mesh).collectives) {
                c.reason = "gradient: " + c.reason;
                oc.backward.push_back(costed(c, op.name, Phase::Backward));
            }
        }
        for (const auto &c : s.internalBackward)
            oc.backward.push_back(costed(c, op.name, Phase::Backward));
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            const auto t = op.inputs[i].index();
            if (!s.dataInputs[i] || !flow[t])
                continue;
            auto &contributions = gradients[t];
            const bool seen = std::any_of(contributions.begin(), contributions.end(),
                                          [&](const auto &c) { return c.first == s.inputGradients[i]; });
            if (!seen)
                contributions.push_back({s.inputGradients[i], k});
        }
    }

    for (const auto &[t, contributions] : gradients) {
        const ir::Tensor &tensor = graph.tensors()[t];
        const ShardingSpec target = sharding::gradientSpec(specs[t]);
        for (const auto &[spec, consumer] : contributions)
            for (auto c : sharding::reshard(tensor, spec, target, mesh).collectives) {
                c.reason = (tensor.role == ir::Role::Parameter ? "weight gradient: " : "gradient: ") + c.reason;
                perOp[consumer].backward.push_back(costed(c, graph.op(ops[consumer]).name, Phase::Backward));
            }
    }

    for (const auto &oc : perOp)
        for (const auto &c : oc.forward)
            cost.collectives.push_back(c);
    for (auto it = perOp.rbegin(); it != perOp.rend(); ++it)
        for (const auto &c : it->backward)
            cost.collectives.push_back(c);
    for (const auto &c : cost.collectives) {
        for (CostTotals *totals : {&cost.byOp[c.op], &cost.byCollective[std::string(sharding::toString(c.kind))],
                                   &cost.byPhase[std::string(toString(c.phase))]}) {
            totals->comm += c.time;
            totals->commBytes += c.wireBytes;
            totals->collectives += 1;
        }
        cost.comm += c.time;
        cost.commBytes += c.wireBytes;
    }
    for (const auto &[phase, totals] : cost.byPhase)
        cost.compute += totals.compute;
    cost.stepTime = cost.compute + cost.comm;
    return cost;
}

OpsTotals evaluateOpsTotals(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<ShardingSpec> &specs,
                            const std::vector<ir::OpId> &ops, const std::vector<sharding::OpStrategy> &strategies,
                            const std::vector<bool> &flow)
{
    double forwardCompute = 0, backwardCompute = 0, comm = 0;
    auto charge = [&](const sharding::Reshard &r) {
        for (const auto &c : r.collectives)
            comm += collectiveTime(c.kind, c.bytes, mesh.axes[static_cast<std::size_t>(c.axis)]);
    };
    // Linear lists, not sets: a segment touches few tensors, and the
    // allocations of node-based containers dominated the search's profile.
    std::vector<std::pair<std::size_t, ShardingSpec>> reshardedForward;
    std::vector<std::pair<std::size_t, std::vector<ShardingSpec>>> gradients;
    for (std::size_t k = 0; k < ops.size(); ++k) {
        const ir::Op &op = graph.op(ops[k]);
        const sharding::OpStrategy &s = strategies[k];
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (!s.dataInputs[i])
                continue;
            const std::pair<std::size_t, ShardingSpec> key{op.inputs[i].index(), s.inputs[i]};
            if (std::find(reshardedForward.begin(), reshardedForward.end(), key) != reshardedForward.end())
                continue;
            reshardedForward.push_back(key);
            charge(sharding::reshard(graph.tensor(op.inputs[i]), specs[key.first], s.inputs[i], mesh));
        }
        for (const auto &c : s.internalForward)
            comm += collectiveTime(c.kind, c.bytes, mesh.axes[static_cast<std::size_t>(c.axis)]);
        for (std::size_t o = 0; o < op.outputs.size(); ++o)
            charge(sharding::reshard(graph.tensor(op.outputs[o]), s.outputs[o], specs[op.outputs[o].index()], mesh));

        bool flows = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i)
            flows = flows || (s.dataInputs[i] && flow[op.inputs[i].index()]);
        const double peak = mesh.device.peak(s.computeType) * mesh.device.achievableFraction;
        forwardCompute += peak > 0 ? s.forwardFlops / peak : 0;
        if (!flows)
            continue;
        backwardCompute += peak > 0 ? s.backwardFlops / peak : 0;
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::Tensor &out = graph.tensor(op.outputs[o]);
            if (sharding::isFloat(out.dtype))
                charge(sharding::reshard(out, sharding::gradientSpec(specs[op.outputs[o].index()]),
                                         sharding::gradientSpec(s.outputs[o]), mesh));
        }
        for (const auto &c : s.internalBackward)
            comm += collectiveTime(c.kind, c.bytes, mesh.axes[static_cast<std::size_t>(c.axis)]);
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            const auto t = op.inputs[i].index();
            if (!s.dataInputs[i] || !flow[t])
                continue;
            auto it = std::find_if(gradients.begin(), gradients.end(), [t](const auto &g) { return g.first == t; });
            if (it == gradients.end())
                it = gradients.insert(gradients.end(), {t, {}});
            if (std::find(it->second.begin(), it->second.end(), s.inputGradients[i]) == it->second.end())
                it->second.push_back(s.inputGradients[i]);
        }
    }
    for (const auto &[t, contributions] : gradients) {
        const ShardingSpec target = sharding::gradientSpec(specs[t]);
        for (const auto &spec : contributions)
            charge(sharding::reshard(graph.tensors()[t], spec, target, mesh));
    }
    // Summed as evaluateOps sums its phases (backward, then forward).
    return {backwardCompute + forwardCompute, comm};
}

PlanCost evaluatePlan(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<ShardingSpec> &specs,
                      const CostOptions &options)
{
    const auto order = graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{graph.name, {}, "the graph has a cycle; it cannot be costed"});
    // Each op's rule serves both its strategy and the gradient flow.
    const auto rules = rulesOf(graph, *order);
    std::vector<sharding::OpStrategy> strategies;
    strategies.reserve(order->size());
    std::map<std::string, std::pair<int, std::string>> noRule;  // op type -> count, first op
    for (std::size_t k = 0; k < order->size(); ++k) {
        const ir::OpId id = (*order)[k];
        const ir::Op &op = graph.op(id);
        std::vector<ShardingSpec> inputs;
        for (auto t : op.inputs)
            inputs.push_back(specs[t.index()]);
        strategies.push_back(sharding::resolveStrategy(graph, id, inputs, mesh, rules[k]));
        if (!strategies.back().hasRule) {
            auto &entry = noRule[op.type];
            if (entry.first++ == 0)
                entry.second = op.name;
        }
    }
    PlanCost cost = evaluateOps(graph, mesh, specs, *order, strategies, gradientFlowOver(graph, *order, rules));
    cost.compute = 0;

    std::int64_t localParameters = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Parameter))
        localParameters += specs[t.index()].localElements(graph.tensor(t).shape, mesh);
    const double optimizerFlops = options.optimizerFlopsPerParameter * static_cast<double>(localParameters);
    const double fp32 = mesh.device.peak(ir::DType::F32) * mesh.device.achievableFraction;
    CostTotals &optimizer = cost.byPhase["optimizer"];
    optimizer.flops += optimizerFlops;
    optimizer.compute += fp32 > 0 ? optimizerFlops / fp32 : 0;

    for (const auto &[phase, totals] : cost.byPhase)
        cost.compute += totals.compute;
    if (options.overlap) {
        const CostTotals &f = cost.byPhase["forward"], &b = cost.byPhase["backward"], &o = cost.byPhase["optimizer"];
        cost.stepTime = f.total() + std::max(b.compute, b.comm) + o.total();
    } else {
        cost.stepTime = cost.compute + cost.comm;
    }

    const auto params = static_cast<double>(localParameters);
    cost.memory.parameters = std::llround(params * options.parameterBytes);
    cost.memory.gradients = std::llround(params * options.gradientBytes);
    cost.memory.optimizer = std::llround(params * options.optimizerBytes);
    const auto layers = transformerLayers(graph, mesh, specs);
    if (!layers.empty()) {
        cost.memory.activationModel = "korthikanti";
        for (const auto &l : layers)
            cost.memory.activations += korthikantiBytes(l);
    } else {
        cost.memory.activationModel = "saved-tensors";
        cost.memory.activations = savedTensorBytes(graph, mesh, specs);
    }
    cost.memoryCapacity = mesh.device.memoryBytes;
    cost.fitsMemory = cost.memory.total() <= cost.memoryCapacity;

    for (const auto &[type, entry] : noRule)
        cost.warnings.push_back("no sharding rule for " + type + " (" + std::to_string(entry.first) +
                                " op(s), first '" + entry.second + "'): inputs gathered, computed replicated");
    return cost;
}

} // namespace tapestry::cost
