#include "search/shapesearch.h"

#include "cost/objective.h"
#include "cost/plancoster.h"
#include "ir/error.h"
#include "plan/plan.h"
#include "search/referenceplan.h"
#include "search/techniquesearch.h"
#include "sharding/strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

namespace tapestry::search {

std::string ShapeCandidate::shape() const
{
    return fmt::format("pipeline {} x data {} x tensor {}", pipeline, data, tensor);
}

namespace {

std::vector<int> divisors(int n)
{
    std::vector<int> out;
    for (int d = 1; d <= n; ++d)
        if (n % d == 0)
            out.push_back(d);
    return out;
}

// The tokens of one step: the elements of the graph's first integer input
// of rank 2 ([batch, sequence] token ids), else the batch.
double stepTokens(const ir::Graph &graph, std::int64_t batch)
{
    for (auto t : graph.tensorsWithRole(ir::Role::Input)) {
        const auto &tensor = graph.tensor(t);
        if (tensor.shape.size() == 2 && !sharding::isFloat(tensor.dtype) && tensor.shape[0] == batch)
            return static_cast<double>(tensor.elementCount());
    }
    return static_cast<double>(batch);
}

} // namespace

namespace {

// The stages' plan: Megatron's with sequence parallelism where there is a
// tensor axis, data parallel where there is only a data axis.
plan::Plan stagePlan(const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
                     const cost::CostOptions &options)
{
    const bool tensor = mesh.axisIndex("model") && mesh.axes[static_cast<std::size_t>(*mesh.axisIndex("model"))].size > 1;
    const bool data = mesh.axisIndex("data").has_value();
    ReferenceOptions ro;
    ro.sequenceParallel = tensor;
    ro.cost = options;
    return referencePlan(graph, modelSource, mesh,
                         tensor ? ReferenceMethod::Megatron
                         : data ? ReferenceMethod::DataParallel
                                : ReferenceMethod::Replicate,
                         ro);
}

} // namespace

plan::Plan shapePlan(const ir::Graph &graph, const std::string &modelSource, const ShapeCandidate &shape)
{
    plan::Plan p = stagePlan(graph, modelSource, shape.stageMesh, shape.options);
    if (shape.pipeline > 1) {
        plan::PlanPipeline pp;
        pp.stages = shape.pipeline;
        pp.schedule = shape.schedule;
        pp.virtualStages = shape.virtualStages;
        pp.cuts = shape.cost.cuts;
        pp.layers = 0;
        for (const auto &st : shape.cost.stages)
            pp.layers += st.layers;
        pp.link = shape.pipelineOptions.link;
        pp.stepTime = shape.cost.stepTime;
        pp.bubbleFraction = shape.cost.bubbleFraction;
        pp.memoryPerDevice = shape.cost.peakMemory;
        pp.fitsMemory = shape.cost.fitsMemory;
        p.pipeline = std::move(pp);
    }
    return p;
}

ShapeSearchResult searchShapes(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                               const std::string &modelSource, const sharding::MeshProfile &given,
                               const ShapeOptions &options)
{
    const auto start = std::chrono::steady_clock::now();
    if (options.devices < 1)
        throw TapestryError(Error{"--devices", {}, "expects a positive number of devices"});
    sharding::MeshProfile profile = given;
    if (options.devicesPerNode > 0)
        profile.intraNodeDevices = options.devicesPerNode;
    const int perNode = std::max(1, profile.intraNodeDevices);
    if (options.devices > perNode && options.devices % perNode != 0)
        throw TapestryError(Error{"--devices", {}, fmt::format("{} devices are not whole nodes of {}", options.devices,
                                                               perNode)});
    ShapeSearchResult result;
    const auto layers = cost::modelLayers(graph, classes);
    result.layers = layers.count;
    result.batch = modelBatch(graph);
    if (result.batch <= 0)
        throw TapestryError(Error{modelSource, {}, "the model's batch is unknown: a shape search needs one"});
    const double tokens = stepTokens(graph, result.batch);
    const bool attention = hasAttentionCore(graph);

    // The stage meshes: data x tensor, each searched once for every
    // pipeline depth that leaves it.
    struct Stage {
        int data, tensor;
        std::vector<int> pipelines;
    };
    std::vector<Stage> stages;
    for (int tensor : divisors(std::min(perNode, options.devices))) {
        if (options.devices % tensor != 0)
            continue;
        if (options.tensor > 0 && tensor != options.tensor)
            continue;
        for (int pipeline : divisors(options.devices / tensor)) {
            if (options.pipeline > 0 && pipeline != options.pipeline)
                continue;
            const int data = options.devices / tensor / pipeline;
            if (pipeline > std::max(1, layers.count)) {
                continue;
            }
            if (result.batch % data != 0) {
                result.skipped.push_back(fmt::format("pipeline {} x data {} x tensor {}: the batch of {} does not split {} ways",
                                                     pipeline, data, tensor, result.batch, data));
                continue;
            }
            stages.push_back({data, tensor, {pipeline}});
        }
    }
    std::vector<std::vector<ShapeCandidate>> found(stages.size());
    std::vector<std::string> problems(stages.size());
    auto searchStage = [&](std::size_t i) {
        const Stage &st = stages[i];
        std::vector<int> sizes;
        std::vector<std::string> names;
        if (st.data > 1) {
            sizes.push_back(st.data);
            names.emplace_back("data");
        }
        if (st.tensor > 1 || sizes.empty()) {
            sizes.push_back(st.tensor);
            names.emplace_back("model");
        }
        const sharding::Mesh mesh = profile.mesh(sizes, names);
        const int pipeline = st.pipelines.front();
        const sharding::Mesh cluster = profile.mesh({pipeline, st.data, st.tensor}, {"pipeline", "data", "model"});
        cost::CostOptions base = options.cost;
        base.techniques.flashAttention = options.flashAttention && attention;
        base.techniques.zeroStage = st.data > 1 ? std::max(1, base.techniques.zeroStage) : base.techniques.zeroStage;
        if (st.data > 1)
            base.techniques.zeroAxes = std::vector<std::string>{"data"};
        std::vector<sharding::ShardingSpec> specs;
        try {
            specs = plan::planSpecs(stagePlan(graph, modelSource, mesh, base), graph, modelSource);
        } catch (const TapestryError &e) {
            problems[i] = fmt::format("pipeline {} x data {} x tensor {}: {}", pipeline, st.data, st.tensor,
                                      e.error().problem);
            return;
        }
        const std::int64_t perReplica = result.batch / st.data;
        std::vector<int> micro;
        if (pipeline > 1)
            micro = {static_cast<int>(perReplica)};  // one sample per replica a micro-batch
        else
            micro = perReplica > 1 ? std::vector<int>{1, static_cast<int>(perReplica)} : std::vector<int>{1};
        std::vector<cost::Recompute> recomputes{cost::Recompute::None};
        if (options.recompute)
            recomputes = {*options.recompute};
        else if (attention)
            recomputes.push_back(cost::Recompute::Full);
        std::optional<cost::PlanCoster> coster;
        for (int m : micro)
            for (cost::Recompute r : recomputes) {
                cost::CostOptions o = base;
                o.techniques.microBatches = m;
                o.techniques.recompute = r;
                if (!coster)
                    coster.emplace(graph, mesh, o);
                coster->setOptions(o);
                const cost::PlanCost whole = coster->cost(specs);
                const auto forward = whole.byPhase.find("forward");
                const double forwardFlops = forward == whole.byPhase.end() ? 0 : forward->second.flops;
                std::vector<std::pair<cost::Schedule, int>> schedules{{cost::Schedule::OneFOneB, 1}};
                if (pipeline > 1 && layers.count % (pipeline * 2) == 0 && m % pipeline == 0)
                    schedules.emplace_back(cost::Schedule::Interleaved, 2);
                for (const auto &[schedule, chunks] : schedules) {
                    cost::Pipeline p;
                    p.stages = pipeline;
                    p.schedule = schedule;
                    p.virtualStages = chunks;
                    p.link = cluster.axes[0].link;
                    ShapeCandidate c;
                    c.pipeline = pipeline;
                    c.data = st.data;
                    c.tensor = st.tensor;
                    c.schedule = schedule;
                    c.virtualStages = chunks;
                    c.microBatches = m;
                    c.recompute = r;
                    c.options = o;
                    c.stageMesh = mesh;
                    c.pipelineLink = pipeline > 1 ? cluster.axes[0].link.name : std::string();
                    try {
                        c.cost = cost::pipelineCost(graph, layers, whole, specs, mesh, o, p);
                    } catch (const TapestryError &e) {
                        problems[i] = c.shape() + ": " + e.error().problem;
                        continue;
                    }
                    c.pipelineOptions = p;
                    c.pipelineOptions.cuts = c.cost.cuts;
                    c.tokensPerSecond = c.cost.stepTime > 0 ? tokens / c.cost.stepTime : 0;
                    c.modelFlopsPerDevice =
                        c.cost.stepTime > 0 ? 3 * forwardFlops * st.data * st.tensor / c.cost.stepTime / options.devices : 0;
                    found[i].push_back(std::move(c));
                }
            }
    };
    // The stage meshes on the hardware's threads, a wave at a time.
    const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
    for (std::size_t next = 0; next < stages.size();) {
        if (options.cancelled && options.cancelled())
            throw TapestryError(Error{modelSource, {}, "shape search: cancelled"});
        std::vector<std::future<void>> wave;
        for (std::size_t k = 0; k < threads && next < stages.size(); ++k, ++next)
            wave.push_back(std::async(std::launch::async, searchStage, next));
        for (auto &f : wave)
            f.get();
        if (options.progress)
            options.progress(next, stages.size());
    }
    for (std::size_t i = 0; i < stages.size(); ++i) {
        if (!problems[i].empty())
            result.skipped.push_back(problems[i]);
        for (auto &c : found[i])
            result.ranked.push_back(std::move(c));
    }
    std::stable_sort(result.ranked.begin(), result.ranked.end(), [](const ShapeCandidate &a, const ShapeCandidate &b) {
        return cost::Objective::of(a.cost.stepTime, a.cost.peakMemory, a.cost.memoryCapacity) <
               cost::Objective::of(b.cost.stepTime, b.cost.peakMemory, b.cost.memoryCapacity);
    });
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

} // namespace tapestry::search
