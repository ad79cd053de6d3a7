#include "cost/costmodel.h"

#include "cost/chargerules.h"
#include "cost/collectivetime.h"
#include "cost/plancoster.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>

namespace tapestry::cost {

namespace {

using sharding::ShardingSpec;

// The one walk of evaluateOps and evaluateOpsTotals over `ops`, charging
// through the rules (chargerules.h). `sink` gets, per op in order,
//   sink.compute(k, OpCompute)
//   sink.collective(k, Phase, Collective)       internal collectives
//   sink.reshard(k, Phase, TensorId, from, to, reasonPrefix)
// in the order the rules give them: the op's input reshards (once per
// distinct tensor and spec in the ops given), then what it is charged on its
// own; after every op, the gradient sums as
//   sink.sum(k, Phase, TensorId, from, to, reasonPrefix)
// charged to the first reader producing each contribution, per tensor in
// the order the tensors were first met.
template <class Sink>
void walkOps(const ir::Graph &graph, const std::vector<ShardingSpec> &specs, const std::vector<ir::OpId> &ops,
             const std::vector<sharding::OpStrategy> &strategies, const std::vector<bool> &flow,
             const sharding::Mesh &mesh, const Recomputation &recomputation, Sink &sink)
{
    // Linear lists, not sets: a segment touches few tensors, and the
    // allocations of node-based containers dominated the search's profile.
    std::vector<std::pair<std::size_t, ShardingSpec>> reshardedForward;
    // Per tensor, in the order first met: its distinct contributions, each
    // with the position of the first reader producing it.
    std::vector<std::pair<std::size_t, std::vector<std::pair<ShardingSpec, std::size_t>>>> gradients;
    for (std::size_t k = 0; k < ops.size(); ++k) {
        const ir::Op &op = graph.op(ops[k]);
        const sharding::OpStrategy &s = strategies[k];
        const bool flows = gradientFlows(op, s, flow);
        const Recomputed again = flows && recomputation.roles
                                     ? recomputedForward((*recomputation.roles)[ops[k].index()],
                                                         (*recomputation.modes)[ops[k].index()],
                                                         recomputation.flashAttention)
                                     : Recomputed{};
        // A recomputed op's forward collectives run again in the backward pass.
        struct AtOp {
            Sink &sink;
            std::size_t k;
            bool echo;
            void collective(Phase phase, const sharding::Collective &c)
            {
                sink.collective(k, phase, c);
                if (echo && phase == Phase::Forward) {
                    sharding::Collective again = c;
                    again.reason = "recomputed: " + again.reason;
                    sink.collective(k, Phase::Backward, again);
                }
            }
            void reshard(Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                         std::string_view reason)
            {
                sink.reshard(k, phase, t, from, to, reason);
                if (echo && phase == Phase::Forward)
                    sink.reshard(k, Phase::Backward, t, from, to, "recomputed: " + std::string(reason));
            }
        } at{sink, k, again.comm > 0};
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (!readsData(s, i))
                continue;
            const std::pair<std::size_t, ShardingSpec> key{op.inputs[i].index(), s.inputs[i]};
            if (std::find(reshardedForward.begin(), reshardedForward.end(), key) != reshardedForward.end())
                continue;
            reshardedForward.push_back(key);
            chargeRead(op.inputs[i], specs[key.first], s.inputs[i], at);
        }
        sink.compute(k, opCompute(s, flows, mesh, again));
        chargeOp(graph, op, s, flows, [&](std::size_t o) -> const ShardingSpec & { return specs[op.outputs[o].index()]; },
                 at);
        if (!flows)
            continue;
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            const auto t = op.inputs[i].index();
            if (!readsData(s, i) || !flow[t])
                continue;
            auto it = std::find_if(gradients.begin(), gradients.end(), [t](const auto &g) { return g.first == t; });
            if (it == gradients.end())
                it = gradients.insert(gradients.end(), {t, {}});
            if (std::none_of(it->second.begin(), it->second.end(),
                             [&](const auto &c) { return c.first == s.inputGradients[i]; }))
                it->second.push_back({s.inputGradients[i], k});
        }
    }
    struct AtSum {
        Sink &sink;
        std::size_t k;
        void reshard(Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                     std::string_view reason)
        {
            sink.sum(k, phase, t, from, to, reason);
        }
    };
    for (const auto &[t, contributions] : gradients)
        for (const auto &[spec, consumer] : contributions)
            chargeGradientSum(graph, ir::TensorId(static_cast<std::int32_t>(t)), spec, specs[t], AtSum{sink, consumer});
}

} // namespace

PlanCost evaluateOps(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<ShardingSpec> &specs,
                     const std::vector<ir::OpId> &ops, const std::vector<sharding::OpStrategy> &strategies,
                     const std::vector<bool> &flow, const Recomputation &recomputation, const Techniques *techniques)
{
    PlanCost cost;
    struct OpCosts {
        std::vector<CollectiveCost> forward;
        std::vector<CollectiveCost> backward;
    };
    struct Breakdown {
        const ir::Graph &graph;
        const sharding::Mesh &mesh;
        const std::vector<ir::OpId> &ops;
        PlanCost &cost;
        std::vector<OpCosts> perOp;
        // Gradient sums by tensor, appended to their reader's backward list
        // in tensor order once every op is walked.
        std::vector<std::pair<std::size_t, std::pair<std::size_t, std::vector<CollectiveCost>>>> sums;
        void compute(std::size_t k, const OpCompute &c)
        {
            CostTotals &totals = cost.byOp[graph.op(ops[k]).name];
            totals.flops += c.forwardFlops;
            totals.compute += c.forward;
            cost.byPhase["forward"].flops += c.forwardFlops;
            cost.byPhase["forward"].compute += c.forward;
            if (!c.flows)
                return;
            totals.flops += c.backwardFlops;
            totals.compute += c.backward;
            cost.byPhase["backward"].flops += c.backwardFlops;
            cost.byPhase["backward"].compute += c.backward;
        }
        void collective(std::size_t k, Phase phase, const sharding::Collective &c)
        {
            auto &list = phase == Phase::Forward ? perOp[k].forward : perOp[k].backward;
            list.push_back(costCollective(c, graph.op(ops[k]).name, phase, mesh));
        }
        void reshard(std::size_t k, Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                     std::string_view reason)
        {
            auto &list = phase == Phase::Forward ? perOp[k].forward : perOp[k].backward;
            appendReshard(list, graph.tensor(t), from, to, phase, reason, graph.op(ops[k]).name, mesh);
        }
        void sum(std::size_t k, Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                 std::string_view reason)
        {
            sums.push_back({t.index(), {k, {}}});
            std::vector<CollectiveCost> &list = sums.back().second.second;
            appendReshard(list, graph.tensor(t), from, to, phase, reason, graph.op(ops[k]).name, mesh);
            if (!techniques || techniques->zeroStage < 1)
                return;
            std::vector<CollectiveCost> listed;
            for (const CollectiveCost &c : list)
                if (const auto halves = zeroGradientHalves(c, graph.tensor(t), specs[t.index()], mesh, *techniques))
                    listed.insert(listed.end(), halves->begin(), halves->end());
                else
                    listed.push_back(c);
            list = std::move(listed);
        }
        const std::vector<ShardingSpec> &specs;
        const Techniques *techniques;
    } sink{graph, mesh, ops, cost, std::vector<OpCosts>(ops.size()), {}, specs, techniques};
    walkOps(graph, specs, ops, strategies, flow, mesh, recomputation, sink);
    std::stable_sort(sink.sums.begin(), sink.sums.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
    for (auto &[t, charged] : sink.sums)
        for (auto &c : charged.second)
            sink.perOp[charged.first].backward.push_back(std::move(c));

    for (const auto &oc : sink.perOp)
        for (const auto &c : oc.forward)
            cost.collectives.push_back(c);
    for (auto it = sink.perOp.rbegin(); it != sink.perOp.rend(); ++it)
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
                            const std::vector<bool> &flow, const Recomputation &recomputation,
                            const Techniques *techniques)
{
    struct Totals {
        const ir::Graph &graph;
        const sharding::Mesh &mesh;
        double forwardCompute = 0, backwardCompute = 0, comm = 0, backwardComm = 0;
        void compute(std::size_t, const OpCompute &c)
        {
            forwardCompute += c.forward;
            backwardCompute += c.backward;
        }
        void collective(std::size_t, Phase phase, const sharding::Collective &c)
        {
            const double t = collectiveSeconds(c, mesh);
            comm += t;
            backwardComm += phase == Phase::Backward ? t : 0;
        }
        void reshard(std::size_t, Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                     std::string_view)
        {
            for (const auto &c : sharding::reshard(graph.tensor(t), from, to, mesh).collectives) {
                const double s = collectiveSeconds(c, mesh);
                comm += s;
                backwardComm += phase == Phase::Backward ? s : 0;
            }
        }
        void sum(std::size_t k, Phase phase, ir::TensorId t, const ShardingSpec &from, const ShardingSpec &to,
                 std::string_view reason)
        {
            reshard(k, phase, t, from, to, reason);
            if (techniques)
                backwardComm -= zeroForwardSeconds(graph.tensor(t), from, to, specs[t.index()], mesh, *techniques);
        }
        const std::vector<ShardingSpec> &specs;
        const Techniques *techniques;
    } sink{graph, mesh, 0, 0, 0, 0, specs, techniques};
    walkOps(graph, specs, ops, strategies, flow, mesh, recomputation, sink);
    // Summed as evaluateOps sums its phases (backward, then forward).
    return {sink.backwardCompute + sink.forwardCompute, sink.comm, sink.backwardCompute, sink.backwardComm};
}

PlanCost evaluatePlan(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<ShardingSpec> &specs,
                      const CostOptions &options)
{
    return PlanCoster(graph, mesh, options).cost(specs);
}

} // namespace tapestry::cost
