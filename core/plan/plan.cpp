#include "plan/plan.h"

#include "cost/costmodel.h"
#include "cost/plancoster.h"
#include "ir/error.h"
#include "ir/validate.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/axisroles.h"
#include "plan/fingerprint.h"

namespace tapestry::plan {

std::string_view toString(SpecSource source)
{
    switch (source) {
    case SpecSource::Search:
        return "search";
    case SpecSource::Override:
        return "override";
    case SpecSource::Reference:
        return "reference";
    }
    return "?";
}

std::optional<SpecSource> specSourceFromString(std::string_view s)
{
    for (auto v : {SpecSource::Search, SpecSource::Override, SpecSource::Reference})
        if (toString(v) == s)
            return v;
    return std::nullopt;
}

namespace {

Plan uncostedPlan(const ir::Graph &graph, const std::string &modelSource, const std::string &fingerprint,
                  const sharding::Mesh &mesh, const std::vector<sharding::ShardingSpec> &specs, SpecSource source,
                  const std::string &method, const cost::CostOptions &options)
{
    Plan p;
    p.model = {modelSource, graph.name, fingerprint, static_cast<std::int64_t>(graph.opCount()),
               static_cast<std::int64_t>(graph.tensorCount())};
    p.mesh = mesh;
    p.method = method;
    p.costOptions = options;
    for (std::size_t t = 0; t < graph.tensorCount(); ++t)
        p.specs[graph.tensors()[t].name] = {specs[t], source};
    return p;
}

} // namespace

Plan makePlan(const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
              const std::vector<sharding::ShardingSpec> &specs, SpecSource source, const std::string &method,
              const cost::CostOptions &options)
{
    Plan p = uncostedPlan(graph, modelSource, modelFingerprint(graph), mesh, specs, source, method, options);
    p.cost = cost::evaluatePlan(graph, mesh, specs, options);
    p.axisCarries = axisCarries(graph, mesh, specs);
    return p;
}

Plan makePlan(const ir::Graph &graph, const std::string &modelSource, const std::vector<sharding::ShardingSpec> &specs,
              SpecSource source, const std::string &method, cost::PlanCoster &coster)
{
    return makePlan(graph, modelSource, specs, source, method, coster, modelFingerprint(graph));
}

Plan makePlan(const ir::Graph &graph, const std::string &modelSource, const std::vector<sharding::ShardingSpec> &specs,
              SpecSource source, const std::string &method, cost::PlanCoster &coster, const std::string &fingerprint)
{
    Plan p = uncostedPlan(graph, modelSource, fingerprint, coster.mesh(), specs, source, method, coster.options());
    p.cost = coster.cost(specs);
    p.axisCarries = axisCarries(graph, coster.mesh(), specs);
    return p;
}

Plan rankedPlan(const ir::Graph &graph, const std::string &modelSource, const std::vector<sharding::ShardingSpec> &specs,
                const std::string &method, cost::PlanCoster &coster, std::optional<cost::PlanCost> totals)
{
    Plan p;
    p.model = {modelSource, graph.name, {}, static_cast<std::int64_t>(graph.opCount()),
               static_cast<std::int64_t>(graph.tensorCount())};
    p.mesh = coster.mesh();
    p.method = method;
    p.costOptions = coster.options();
    p.cost = totals ? std::move(*totals) : coster.totals(specs);
    p.axisCarries = axisCarries(graph, coster.mesh(), specs);
    return p;
}

void completePlan(Plan &plan, const ir::Graph &graph, const std::vector<sharding::ShardingSpec> &specs,
                  SpecSource source, cost::PlanCoster &coster)
{
    if (plan.model.fingerprint.empty())
        plan.model.fingerprint = modelFingerprint(graph);
    for (std::size_t t = 0; t < graph.tensorCount(); ++t)
        plan.specs.try_emplace(graph.tensors()[t].name, TensorPlan{specs[t], source});
    coster.setOptions(plan.costOptions);
    plan.cost = coster.cost(specs);
}

std::vector<sharding::ShardingSpec> planSpecs(const Plan &plan, const ir::Graph &graph, const std::string &planInput,
                                              const std::string &fingerprint)
{
    if (plan.model.fingerprint != fingerprint)
        throw TapestryError(Error{planInput, "model.fingerprint",
                                  "the plan was made for model '" + plan.model.source + "' (" + plan.model.fingerprint +
                                      "), not for '" + graph.name + "' (" + fingerprint +
                                      "): their structure, shapes or tensor names differ"});
    auto refuseUnknownNames = [&] {
        for (const auto &[name, entry] : plan.specs)
            if (!graph.findTensor(name))
                throw TapestryError(Error{planInput, "tensor '" + name + "'", "the model has no tensor of this name"});
    };
    // Names are unique: when the plan has as many specs as the model has
    // tensors and each tensor finds one, every name of the plan is the
    // model's, so the names are looked up only when the counts differ or a
    // tensor finds none (and then first, as that is the error to report).
    if (plan.specs.size() != graph.tensorCount())
        refuseUnknownNames();
    std::vector<sharding::ShardingSpec> specs;
    specs.reserve(graph.tensorCount());
    // Runs on every edit in the studio: messages are built only on failure.
    for (const auto &t : graph.tensors()) {
        auto it = plan.specs.find(t.name);
        auto where = [&] { return "tensor '" + t.name + "'"; };
        if (it == plan.specs.end()) {
            refuseUnknownNames();
            throw TapestryError(Error{planInput, where(), "has no spec in the plan"});
        }
        const auto &spec = it->second.spec;
        if (!spec.holds(t.shape, plan.mesh))
            throw TapestryError(Error{planInput, where(),
                                      spec.toPlacements() + " does not fit shape " + ir::shapeToString(t.shape) +
                                          " on mesh " + plan.mesh.toString() + ": " +
                                          spec.problem(t.shape, plan.mesh).value_or("")});
        if (spec.hasPartial() && (t.role == ir::Role::Parameter || t.role == ir::Role::Input))
            throw TapestryError(Error{planInput, where(),
                                      "is a " + std::string(ir::toString(t.role)) +
                                          " and cannot be stored as a partial sum (" + spec.toPlacements() + ")"});
        specs.push_back(spec);
    }
    return specs;
}

std::vector<sharding::ShardingSpec> planSpecs(const Plan &plan, const ir::Graph &graph, const std::string &planInput)
{
    return planSpecs(plan, graph, planInput, modelFingerprint(graph));
}

void costPipeline(Plan &plan, const ir::Graph &graph, const std::vector<sharding::ShardingSpec> &specs,
                  const std::string &planInput)
{
    if (!plan.pipeline)
        return;
    PlanPipeline &pp = *plan.pipeline;
    const auto layers = cost::modelLayers(graph, passes::Prune().run(graph, passes::Coarsen().run(graph)));
    if (layers.count != pp.layers)
        throw TapestryError(Error{planInput, "$.pipeline.layers",
                                  "the pipeline cuts " + std::to_string(pp.layers) + " layers; the model has " +
                                      std::to_string(layers.count)});
    cost::PipelineCost c;
    try {
        c = cost::pipelineCost(graph, layers, plan.cost, specs, plan.mesh, plan.costOptions, pp.costed());
    } catch (const TapestryError &e) {
        throw TapestryError(Error{planInput, "$.pipeline", e.error().problem});
    }
    pp.stepTime = c.stepTime;
    pp.bubbleFraction = c.bubbleFraction;
    pp.memoryPerDevice = c.peakMemory;
    pp.fitsMemory = c.fitsMemory;
}

void recostPlan(Plan &plan, const ir::Graph &graph, const std::string &planInput)
{
    const auto specs = planSpecs(plan, graph, planInput);
    plan.cost = cost::evaluatePlan(graph, plan.mesh, specs, plan.costOptions);
    plan.axisCarries = axisCarries(graph, plan.mesh, specs);
    costPipeline(plan, graph, specs, planInput);
}

Recoster::Recoster(const ir::Graph &graph) : m_graph(graph), m_fingerprint(modelFingerprint(graph)) {}

Recoster::~Recoster() = default;

void Recoster::recost(Plan &plan, const std::string &planInput)
{
    auto specs = planSpecs(plan, m_graph, planInput, m_fingerprint);
    if (!m_coster || !(m_coster->mesh() == plan.mesh) || !(m_coster->options() == plan.costOptions))
        m_coster = std::make_unique<cost::PlanCoster>(m_graph, plan.mesh, plan.costOptions);
    plan.cost = m_coster->cost(specs);
    plan.axisCarries = axisCarries(m_graph, plan.mesh, specs);
    costPipeline(plan, m_graph, specs, planInput);
}

std::size_t Recoster::resolvedOps() const
{
    return m_coster ? m_coster->resolvedOps() : 0;
}

} // namespace tapestry::plan
