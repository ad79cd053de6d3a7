#include "analysis/explain.h"

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "cost/costmodel.h"
#include "ir/error.h"
#include "sharding/legalspecs.h"
#include "passes/coarsen.h"
#include "sharding/strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

namespace tapestry::analysis {

namespace {

using sharding::Placement;
using sharding::ShardingSpec;

std::string formatTime(double seconds)
{
    const double a = std::abs(seconds);
    if (a >= 1)
        return fmt::format("{:.3g} s", seconds);
    if (a >= 1e-3)
        return fmt::format("{:.3g} ms", seconds * 1e3);
    return fmt::format("{:.3g} us", seconds * 1e6);
}

std::string formatBytes(double bytes)
{
    // Binary units, as the CLI's reports and the studio write memory.
    const double a = std::abs(bytes);
    if (a >= 0x1p30)
        return fmt::format("{:.3g} GiB", bytes / 0x1p30);
    if (a >= 0x1p20)
        return fmt::format("{:.3g} MiB", bytes / 0x1p20);
    if (a >= 0x1p10)
        return fmt::format("{:.3g} KiB", bytes / 0x1p10);
    return fmt::format("{:.0f} B", bytes);
}

std::string signedTime(double seconds)
{
    return (seconds >= 0 ? "+" : "-") + formatTime(std::abs(seconds));
}

// "split columns on model", "replicate": a weight's rows and columns in the
// words of the Megatron papers, other dims by number.
std::string describe(const ShardingSpec &spec, const ir::Tensor &tensor, const sharding::Mesh &mesh)
{
    if (spec.isReplicated())
        return "replicate";
    std::string s;
    for (std::size_t a = 0; a < spec.placements.size(); ++a) {
        const Placement &p = spec.placements[a];
        if (p.isReplicate())
            continue;
        std::string what = "partial sum";
        if (p.isShard()) {
            const bool matrix = tensor.role == ir::Role::Parameter && tensor.shape.size() == 2;
            what = matrix && p.dim == 0   ? "split rows"
                   : matrix && p.dim == 1 ? "split columns"
                                          : "split dim " + std::to_string(p.dim);
        }
        s += (s.empty() ? "" : ", ") + what + " on " + mesh.axes[a].name;
    }
    return s;
}

std::string describe(const cost::CollectiveCost &c)
{
    return std::string(sharding::toString(c.kind)) + " of " + formatBytes(static_cast<double>(c.bytes)) + " on " +
           c.axis + " (" + c.tensor + ")";
}

auto collectiveKey(const cost::CollectiveCost &c)
{
    return std::make_tuple(c.op, c.tensor, c.kind, c.axis, c.phase, c.bytes);
}

// Collectives of `from` that `to` does not have, as multisets.
std::vector<cost::CollectiveCost> missingFrom(const std::vector<cost::CollectiveCost> &from,
                                              const std::vector<cost::CollectiveCost> &to)
{
    std::multiset<decltype(collectiveKey(from.front()))> rest;
    for (const auto &c : to)
        rest.insert(collectiveKey(c));
    std::vector<cost::CollectiveCost> missing;
    for (const auto &c : from) {
        auto it = rest.find(collectiveKey(c));
        if (it != rest.end())
            rest.erase(it);
        else
            missing.push_back(c);
    }
    return missing;
}

} // namespace

Explainer::Explainer(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput)
    : m_graph(graph), m_mesh(plan.mesh), m_options(plan.costOptions), m_coarse(passes::Coarsen().run(graph)),
      m_specs(plan::planSpecs(plan, graph, planInput)), m_flow(cost::gradientFlow(graph)), m_roles(cost::recomputeRoles(graph)),
      m_modes(cost::recomputeModes(graph, plan.costOptions.techniques)),
      m_parameterShares(cost::parameterShares(graph)),
      m_cost(cost::evaluatePlan(graph, m_mesh, m_specs, m_options)),
      m_coster(std::make_unique<search::SegmentCoster>(graph, m_mesh, m_options))
{
    m_position.assign(graph.opCount(), 0);
    const auto order = graph.topologicalOrder();
    for (std::size_t k = 0; order && k < order->size(); ++k)
        m_position[(*order)[k].index()] = k;
}

Explainer::~Explainer() = default;

void Explainer::setPlan(const sharding::Mesh &mesh, const cost::CostOptions &options,
                        std::vector<sharding::ShardingSpec> specs, cost::PlanCost cost)
{
    if (!explains(mesh, options))
        throw TapestryError(Error{mesh.toString(), {}, "an explainer keeps to the mesh and cost options it was made for"});
    if (specs.size() != m_graph.tensorCount())
        throw TapestryError(Error{m_graph.name, {}, "a plan to explain needs one spec per tensor"});
    m_specs = std::move(specs);
    m_cost = std::move(cost);
}

Explanation Explainer::explainTensor(const std::string &tensorName)
{
    const auto t = m_graph.findTensor(tensorName);
    if (!t)
        throw TapestryError(Error{m_graph.name, tensorName, "no tensor of this name in the model"});
    return explain(*t);
}

Explanation Explainer::explainNode(passes::NodeId id)
{
    const passes::CoarseNode &node = m_coarse.node(id);
    ir::TensorId subject;
    for (auto p : node.parameters)
        if (!subject.valid() || m_graph.tensor(p).elementCount() > m_graph.tensor(subject).elementCount())
            subject = p;
    if (!subject.valid() && !node.outputs.empty())
        subject = node.outputs.front();
    if (!subject.valid())
        throw TapestryError(Error{m_graph.name, std::string(node.name), "the node has no parameter and no output to explain"});
    return explain(subject);
}

std::int64_t Explainer::activationBytes(const std::vector<ShardingSpec> &specs) const
{
    if (m_cost.memory.activationModel == "korthikanti") {
        std::int64_t bytes = 0;
        const auto shares = cost::layerShares(m_graph);
        for (const auto &l : cost::transformerLayers(m_graph, m_mesh, specs)) {
            bytes += cost::layerActivationBytes(l, m_options);
            if (const auto op = m_graph.findOp(l.softmaxOp))
                bytes += cost::layerWorkingBytes(l, m_options, shares[op->index()]);
        }
        return bytes;
    }
    return cost::savedTensorBytes(m_graph, m_mesh, specs, m_options.techniques.microBatches);
}

Explanation Explainer::explain(ir::TensorId t)
{
    const ir::Tensor &tensor = m_graph.tensor(t);
    Explanation e;
    e.tensor = tensor.name;
    e.chosen = m_specs[t.index()];
    // The node whose ops follow the tensor's spec: where it is made, or,
    // for parameters and inputs, where it is first read.
    ir::OpId anchor = tensor.producer;
    for (auto c : tensor.consumers)
        if (!anchor.valid() || m_position[c.index()] < m_position[anchor.index()])
            anchor = c;
    const passes::NodeId node = anchor.valid() ? m_coarse.nodeOf(anchor) : passes::NodeId();
    if (node.valid())
        e.node = m_coarse.node(node).name;

    auto specs = sharding::legalSpecs(tensor.shape, m_mesh);
    std::erase(specs, e.chosen);
    specs.insert(specs.begin(), e.chosen);
    for (const auto &spec : specs)
        e.alternatives.push_back(alternative(t, node, spec));
    std::stable_sort(e.alternatives.begin() + 1, e.alternatives.end(),
                     [](const Alternative &a, const Alternative &b) { return a.stepTimeDelta < b.stepTimeDelta; });
    return e;
}

Alternative Explainer::alternative(ir::TensorId t, passes::NodeId node, const ShardingSpec &spec)
{
    const ir::Tensor &tensor = m_graph.tensor(t);
    Alternative alt;
    alt.spec = spec;
    alt.chosen = spec == m_specs[t.index()];
    alt.fits = m_cost.fitsMemory;
    const std::string what = spec.toPlacements() + " (" + describe(spec, tensor, m_mesh) + ")";
    if (alt.chosen) {
        alt.summary = what + ": the plan's choice";
        return alt;
    }

    // The plan with this spec, the tensor's node propagated again from it.
    std::vector<ShardingSpec> specs = m_specs;
    specs[t.index()] = spec;
    if (node.valid()) {
        const passes::CoarseNode &cn = m_coarse.node(node);
        search::Segment seg = search::makeSegment(m_graph, m_mesh, std::string(cn.name), -1, 1, {cn.ops.begin(), cn.ops.end()});
        std::map<ir::TensorId, ShardingSpec> boundary;
        for (const auto *list : {&seg.inputs, &seg.outputs})
            for (auto b : *list)
                boundary[b] = specs[b.index()];
        // The tensor is held, whatever its part in the node.
        if (std::erase(seg.derived, t) || tensor.role != ir::Role::Parameter)
            boundary[t] = spec;
        std::vector<ShardingSpec> weights;
        for (auto w : seg.weights)
            weights.push_back(specs[w.index()]);
        m_coster->evaluate(seg, boundary, weights);
        for (ir::OpId id : seg.ops) {
            const ir::Op &op = m_graph.op(id);
            for (const auto *list : {&op.inputs, &op.outputs})
                for (auto x : *list)
                    if (!boundary.count(x))
                        specs[x.index()] = m_coster->spec(x);
        }
    }
    std::set<ir::TensorId> changed;
    for (std::size_t x = 0; x < specs.size(); ++x)
        if (specs[x] != m_specs[x]) {
            changed.insert(ir::TensorId(static_cast<std::int32_t>(x)));
            alt.changes[m_graph.tensors()[x].name] = specs[x];
        }

    // The ops whose strategies may change, with every other reader of their
    // inputs: a reshard or gradient sum shared between readers is then
    // charged alike in both costings.
    std::set<ir::OpId> affected;
    for (auto x : changed) {
        if (m_graph.tensor(x).producer.valid())
            affected.insert(m_graph.tensor(x).producer);
        for (auto c : m_graph.tensor(x).consumers)
            affected.insert(c);
    }
    std::set<ir::OpId> costed = affected;
    for (auto id : affected)
        for (auto x : m_graph.op(id).inputs)
            for (auto c : m_graph.tensor(x).consumers)
                costed.insert(c);
    std::vector<ir::OpId> ops(costed.begin(), costed.end());
    std::sort(ops.begin(), ops.end(),
              [&](ir::OpId a, ir::OpId b) { return m_position[a.index()] < m_position[b.index()]; });
    auto costOps = [&](const std::vector<ShardingSpec> &s) {
        std::vector<sharding::OpStrategy> strategies;
        std::vector<ShardingSpec> inputs;
        for (ir::OpId id : ops) {
            inputs.clear();
            for (auto x : m_graph.op(id).inputs)
                inputs.push_back(s[x.index()]);
            strategies.push_back(sharding::resolveStrategy(m_graph, id, inputs, m_mesh));
        }
        return cost::evaluateOps(m_graph, m_mesh, s, ops, strategies, m_flow,
                                 {&m_roles, &m_modes, m_options.techniques.flashAttention}, &m_options.techniques);
    };
    const cost::PlanCost before = costOps(m_specs), after = costOps(specs);

    // The per-parameter charges of what changed (linear in the load, so
    // charged on the difference).
    cost::ParameterLoad parameters;
    for (auto x : changed)
        if (m_graph.tensor(x).role == ir::Role::Parameter)
            parameters += cost::parameterLoad(m_graph.tensor(x), specs[x.index()], m_mesh, m_options,
                                              m_parameterShares[x.index()]) -
                          cost::parameterLoad(m_graph.tensor(x), m_specs[x.index()], m_mesh, m_options,
                                              m_parameterShares[x.index()]);
    const cost::ParameterCharge perParameter = cost::chargeParameters(parameters, m_mesh, m_options);
    const double optimizer = perParameter.seconds();

    // Phase totals of the whole step under the alternative, as evaluatePlan
    // combines them (overlap makes step time more than a sum).
    auto phase = [&](const std::string &name) {
        auto get = [&](const cost::PlanCost &c) {
            auto it = c.byPhase.find(name);
            return it == c.byPhase.end() ? cost::CostTotals{} : it->second;
        };
        cost::CostTotals p = get(m_cost), a = get(after), b = get(before);
        p.compute += a.compute - b.compute;
        p.comm += a.comm - b.comm;
        return p;
    };
    cost::CostTotals forward = phase("forward"), backward = phase("backward"), update = phase("optimizer");
    update.compute += optimizer;
    const double step = cost::stepSeconds(m_cost.compute + (after.compute - before.compute) + optimizer,
                                          m_cost.comm + (after.comm - before.comm), forward, backward, update,
                                          m_options);
    alt.stepTimeDelta = step - m_cost.stepTime;
    alt.commDelta = after.comm - before.comm;
    alt.computeDelta = after.compute - before.compute + optimizer;
    alt.memoryDelta = perParameter.bytes +
                      (activationBytes(specs) - m_cost.memory.activations);
    alt.fits = m_cost.memory.total() + alt.memoryDelta <= m_cost.memoryCapacity;
    alt.collectivesAdded = missingFrom(after.collectives, before.collectives);
    alt.collectivesRemoved = missingFrom(before.collectives, after.collectives);

    alt.summary = what + ": " + signedTime(alt.stepTimeDelta) + " step (" + signedTime(alt.commDelta) + " comm, " +
                  signedTime(alt.computeDelta) + " compute), " + (alt.memoryDelta >= 0 ? "+" : "-") +
                  formatBytes(std::abs(static_cast<double>(alt.memoryDelta))) + " memory" +
                  (alt.fits ? "" : " (does not fit)");
    for (const auto &[verb, list] : {std::pair{"; adds ", &alt.collectivesAdded},
                                     std::pair{"; removes ", &alt.collectivesRemoved}}) {
        if (list->empty())
            continue;
        alt.summary += verb;
        const std::size_t shown = std::min<std::size_t>(list->size(), 3);
        for (std::size_t i = 0; i < shown; ++i)
            alt.summary += (i ? ", " : "") + describe((*list)[i]);
        if (list->size() > shown)
            alt.summary += " and " + std::to_string(list->size() - shown) + " more";
    }
    return alt;
}

} // namespace tapestry::analysis
