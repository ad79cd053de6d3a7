#include "cost/costmodel.h"

#include "cost/collectivetime.h"
#include "cost/plancoster.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>
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

} // namespace

PlanCost evaluateOps(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<ShardingSpec> &specs,
                     const std::vector<ir::OpId> &ops, const std::vector<sharding::OpStrategy> &strategies,
                     const std::vector<bool> &flow)
{
    PlanCost cost;
    auto costed = [&](const Collective &c, const std::string &op, Phase phase) {
        return costCollective(c, op, phase, mesh);
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
    return PlanCoster(graph, mesh, options).cost(specs);
}

} // namespace tapestry::cost
