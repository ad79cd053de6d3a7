#include "cost/pipeline.h"

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "ir/error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

namespace tapestry::cost {

std::string_view toString(Schedule s)
{
    switch (s) {
    case Schedule::GPipe: return "gpipe";
    case Schedule::OneFOneB: return "1f1b";
    case Schedule::Interleaved: return "interleaved";
    }
    return "1f1b";
}

std::optional<Schedule> scheduleFromString(std::string_view s)
{
    for (Schedule k : {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
        if (s == toString(k))
            return k;
    return std::nullopt;
}

std::vector<int> chunkOfOps(const ModelLayers &layers, const std::vector<int> &cuts)
{
    std::vector<int> chunk(layers.layerOf.size());
    for (std::size_t k = 0; k < chunk.size(); ++k)
        chunk[k] = static_cast<int>(std::upper_bound(cuts.begin(), cuts.end(), layers.layerOf[k]) - cuts.begin());
    return chunk;
}

ModelLayers modelLayers(const ir::Graph &graph, const passes::SubgraphClasses &classes)
{
    // The copies of every repeated class, the outer first where they nest,
    // in graph order by their first op.
    std::vector<const passes::SubgraphInstance *> instances;
    for (const auto &cls : classes.classes)
        if (cls.instances.size() >= 2)
            for (const auto &inst : cls.instances)
                if (!inst.ops.empty())
                    instances.push_back(&inst);
    std::stable_sort(instances.begin(), instances.end(), [](const auto *a, const auto *b) {
        return a->ops.size() > b->ops.size();
    });
    ModelLayers out;
    out.layerOf.assign(graph.opCount(), -2);  // -2: not in a layer yet
    std::vector<const passes::SubgraphInstance *> kept;
    for (const auto *inst : instances) {
        if (std::any_of(inst->ops.begin(), inst->ops.end(),
                        [&](ir::OpId op) { return out.layerOf[op.index()] != -2; }))
            continue;  // nested in a copy kept already
        for (ir::OpId op : inst->ops)
            out.layerOf[op.index()] = 0;
        kept.push_back(inst);
    }
    std::sort(kept.begin(), kept.end(), [](const auto *a, const auto *b) {
        return a->ops.front().index() < b->ops.front().index();
    });
    for (std::size_t j = 0; j < kept.size(); ++j)
        for (ir::OpId op : kept[j]->ops)
            out.layerOf[op.index()] = static_cast<int>(j);
    out.count = static_cast<int>(kept.size());
    // Ops outside the copies: with the layer before them (by op order, the
    // graph's topological one), or before the first.
    int last = -1;
    for (std::size_t k = 0; k < graph.opCount(); ++k) {
        if (out.layerOf[k] == -2)
            out.layerOf[k] = last;
        else
            last = std::max(last, out.layerOf[k]);
    }
    return out;
}

std::vector<int> balanceStages(const std::vector<double> &layerTime, double before, double after, int stages)
{
    const int n = static_cast<int>(layerTime.size());
    if (stages <= 1 || n == 0)
        return {};
    if (stages > n)
        throw TapestryError(Error{"pipeline", {}, std::to_string(stages) + " stages for a model of " +
                                                        std::to_string(n) + " layers: a stage needs a layer"});
    std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0);
    for (int j = 0; j < n; ++j)
        prefix[static_cast<std::size_t>(j) + 1] = prefix[static_cast<std::size_t>(j)] + layerTime[static_cast<std::size_t>(j)];
    auto span = [&](int a, int b) {  // layers [a, b)
        double t = prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)];
        if (a == 0)
            t += before;
        if (b == n)
            t += after;
        return t;
    };
    // best[s][j]: the least slowest stage of the first j layers in s stages.
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                          std::vector<double>(static_cast<std::size_t>(n) + 1, inf));
    std::vector<std::vector<int>> from(best.size(), std::vector<int>(static_cast<std::size_t>(n) + 1, -1));
    best[0][0] = 0;
    for (int s = 1; s <= stages; ++s)
        for (int j = s; j <= n - (stages - s); ++j)
            for (int i = s - 1; i < j; ++i) {
                const double v = std::max(best[static_cast<std::size_t>(s) - 1][static_cast<std::size_t>(i)], span(i, j));
                // Ties: the later cut, so that the first stage (which also
                // keeps the most micro-batches in flight) takes fewer layers.
                if (v <= best[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)]) {
                    best[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)] = v;
                    from[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)] = i;
                }
            }
    std::vector<int> cuts;
    for (int s = stages, j = n; s > 1; --s) {
        j = from[static_cast<std::size_t>(s)][static_cast<std::size_t>(j)];
        cuts.push_back(j);
    }
    std::reverse(cuts.begin(), cuts.end());
    return cuts;
}

PipelineCost pipelineCost(const ir::Graph &graph, const ModelLayers &layers, const PlanCost &cost,
                          const std::vector<sharding::ShardingSpec> &specs, const sharding::Mesh &stageMesh,
                          const CostOptions &options, const Pipeline &pipeline)
{
    const int p = std::max(1, pipeline.stages);
    const int v = pipeline.schedule == Schedule::Interleaved ? std::max(1, pipeline.virtualStages) : 1;
    const int m = std::max(1, options.techniques.microBatches);
    const int n = layers.count;
    const int chunks = p * v;
    if (chunks > 1 && n < chunks)
        throw TapestryError(Error{graph.name, {}, std::to_string(chunks) + " pipeline chunks (" + std::to_string(p) +
                                                        " stages x " + std::to_string(v) +
                                                        " virtual) for a model of " + std::to_string(n) + " layers"});
    auto isParameter = [&](const std::string &name) {
        const auto t = graph.findTensor(name);
        return t && graph.tensor(*t).role == ir::Role::Parameter;
    };
    // Per layer (index n: before the first): the step's time of its ops,
    // apart from what runs once a step (the parameters' collectives).
    std::vector<double> layerStep(static_cast<std::size_t>(n) + 1, 0), layerOnce(static_cast<std::size_t>(n) + 1, 0);
    auto slot = [&](int layer) { return static_cast<std::size_t>(layer < 0 ? n : layer); };
    std::map<std::string, double> once;
    for (const auto &c : cost.collectives)
        if (isParameter(c.tensor) && c.reason.rfind("recomputed: ", 0) != 0)
            once[c.op] += c.time;
    for (const auto &[name, totals] : cost.byOp) {
        const auto op = graph.findOp(name);
        if (!op)
            continue;
        const auto at = slot(layers.layerOf[op->index()]);
        const auto it = once.find(name);
        const double o = it == once.end() ? 0 : it->second;
        layerStep[at] += totals.total() - o;
        layerOnce[at] += o;
    }
    // The chunks: balanced by each layer's time per micro-batch.
    std::vector<double> perLayer(static_cast<std::size_t>(n));
    for (int j = 0; j < n; ++j)
        perLayer[static_cast<std::size_t>(j)] = layerStep[static_cast<std::size_t>(j)] / m;
    std::vector<int> cuts = pipeline.cuts;
    if (cuts.empty())
        cuts = balanceStages(perLayer, layerStep[static_cast<std::size_t>(n)] / m, 0, chunks);
    if (static_cast<int>(cuts.size()) != chunks - 1 || !std::is_sorted(cuts.begin(), cuts.end()) ||
        (!cuts.empty() && (cuts.front() < 1 || cuts.back() > n - 1)) ||
        std::adjacent_find(cuts.begin(), cuts.end()) != cuts.end())
        throw TapestryError(Error{graph.name, {}, "pipeline cuts must be " + std::to_string(chunks - 1) +
                                                        " rising layer indices from 1 to " + std::to_string(n - 1)});
    std::vector<int> starts{0};
    starts.insert(starts.end(), cuts.begin(), cuts.end());
    starts.push_back(n);
    // Which stage (device group) runs each layer: chunk c on stage c mod p.
    std::vector<int> stageOfLayer(static_cast<std::size_t>(n));
    for (int c = 0; c < chunks; ++c)
        for (int j = starts[static_cast<std::size_t>(c)]; j < starts[static_cast<std::size_t>(c) + 1]; ++j)
            stageOfLayer[static_cast<std::size_t>(j)] = c % p;
    auto stageOf = [&](int layer) { return layer < 0 ? 0 : stageOfLayer[static_cast<std::size_t>(layer)]; };

    PipelineCost out;
    out.cuts = cuts;
    out.stages.resize(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
        out.stages[static_cast<std::size_t>(s)].firstLayer = starts[static_cast<std::size_t>(s)];
        for (int c = s; c < chunks; c += p)
            out.stages[static_cast<std::size_t>(s)].layers +=
                starts[static_cast<std::size_t>(c) + 1] - starts[static_cast<std::size_t>(c)];
    }
    for (int j = -1; j < n; ++j) {
        StageCost &st = out.stages[static_cast<std::size_t>(stageOf(j))];
        st.microBatch += layerStep[slot(j)] / m;
        st.perStep += layerOnce[slot(j)];
    }
    // Model states: each stage holds the parameters its ops read (a tied
    // embedding on the first and the last); the optimizer's update by
    // their share of the elements.
    const auto shares = parameterShares(graph);
    std::vector<std::set<int>> readers(graph.tensorCount());
    for (std::size_t k = 0; k < graph.opCount(); ++k)
        for (ir::TensorId t : graph.ops()[k].inputs)
            if (graph.tensor(t).role == ir::Role::Parameter)
                readers[t.index()].insert(stageOf(layers.layerOf[k]));
    std::vector<double> elements(static_cast<std::size_t>(p), 0);
    double allElements = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Parameter)) {
        const ir::Tensor &tensor = graph.tensor(t);
        const ParameterCharge charge = chargeParameters(
            parameterLoad(tensor, specs[t.index()], stageMesh, options, shares[t.index()]), stageMesh, options);
        allElements += static_cast<double>(tensor.elementCount());
        for (int s : readers[t.index()]) {
            out.stages[static_cast<std::size_t>(s)].modelStates += charge.memory.total();
            elements[static_cast<std::size_t>(s)] += static_cast<double>(tensor.elementCount());
        }
    }
    const auto optimizer = cost.byPhase.find("optimizer");
    const double update = optimizer == cost.byPhase.end() ? 0 : optimizer->second.total();
    // Activations: one micro-batch's of every layer, by layer alike (the
    // transformer layers' formula gives each copy the same).
    const double perLayerActivations = n > 0 ? static_cast<double>(cost.memory.activations) / n : 0;
    for (int s = 0; s < p; ++s) {
        StageCost &st = out.stages[static_cast<std::size_t>(s)];
        if (allElements > 0)
            st.perStep += update * elements[static_cast<std::size_t>(s)] / allElements;
        switch (pipeline.schedule) {
        case Schedule::GPipe: st.inFlight = m; break;
        case Schedule::OneFOneB: st.inFlight = std::min(p - s, m); break;
        case Schedule::Interleaved:
            st.inFlight = std::min<double>(m, (p - s) * (1.0 + (p - 1.0) / (static_cast<double>(p) * v)));
            break;
        }
        if (p == 1)
            st.inFlight = 1;  // micro-batches one after another: one kept at a time
        st.activations = std::llround(perLayerActivations * st.layers * st.inFlight);
    }
    // The sends between stages: one micro-batch's residual stream, as the
    // plan stores it on a device, forward and its gradient back.
    std::int64_t boundaryBytes = 0;
    for (std::size_t k = 0; k < graph.opCount() && p > 1; ++k) {
        if (layers.layerOf[k] != starts[1])
            continue;
        for (ir::TensorId t : graph.ops()[k].inputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            if (tensor.role == ir::Role::Parameter || !tensor.producer.valid() ||
                layers.layerOf[tensor.producer.index()] == starts[1])
                continue;
            boundaryBytes = std::max(boundaryBytes, specs[t.index()].localElements(tensor.shape, stageMesh) *
                                                        ir::byteSize(tensor.dtype));
        }
    }
    out.p2pBytes = boundaryBytes / m;
    const double send = p > 1 && pipeline.link.bandwidth > 0
                            ? pipeline.link.latency + static_cast<double>(out.p2pBytes) / pipeline.link.bandwidth
                            : 0;
    double slowest = 0, perStep = 0;
    for (const auto &st : out.stages) {
        slowest = std::max(slowest, st.microBatch);
        perStep = std::max(perStep, st.perStep);
        out.peakMemory = std::max(out.peakMemory, st.memory());
    }
    const double slotTime = slowest + 2.0 * v * send;
    const double slots = m + (p - 1.0) / v;
    out.stepTime = slots * slotTime + perStep;
    out.bubble = (slots - m) * slotTime;
    out.bubbleFraction = out.stepTime > 0 ? out.bubble / out.stepTime : 0;
    out.p2p = slots * 2.0 * v * send;
    out.memoryCapacity = stageMesh.device.memoryBytes;
    out.fitsMemory = out.memoryCapacity <= 0 || out.peakMemory <= out.memoryCapacity;
    return out;
}

PipelineTimeline pipelineTimeline(const PipelineCost &cost, Schedule schedule, int virtualStages, int microBatches,
                                  double forwardShare, double send)
{
    const int p = static_cast<int>(cost.stages.size());
    const int v = schedule == Schedule::Interleaved ? std::max(1, virtualStages) : 1;
    const int m = std::max(1, microBatches);
    PipelineTimeline out;
    out.stages.resize(static_cast<std::size_t>(p));
    if (p == 0)
        return out;
    // Each stage's order of (backward, micro-batch, chunk).
    struct Step {
        bool backward;
        int microBatch, chunk;
    };
    std::vector<std::vector<Step>> order(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
        auto &o = order[static_cast<std::size_t>(s)];
        if (schedule == Schedule::GPipe) {
            for (int j = 0; j < m; ++j)
                o.push_back({false, j, 0});
            for (int j = 0; j < m; ++j)
                o.push_back({true, j, 0});
            continue;
        }
        // Megatron-LM's order of the k-th forward and backward of a
        // device: chunks in groups of p micro-batches.
        const int total = m * v;
        auto forward = [&](int k) { return Step{false, (k / (p * v)) * p + k % p, (k / p) % v}; };
        auto backward = [&](int k) { return Step{true, (k / (p * v)) * p + k % p, v - 1 - (k / p) % v}; };
        const int warmup = std::min(total, v == 1 ? p - s - 1 : (p - s - 1) * 2 + (v - 1) * p);
        int f = 0, b = 0;
        for (; f < warmup; ++f)
            o.push_back(forward(f));
        while (f < total) {
            o.push_back(forward(f++));
            o.push_back(backward(b++));
        }
        while (b < total)
            o.push_back(backward(b++));
    }
    // Each slot's end, by (backward, micro-batch, virtual stage), once known.
    const int virtuals = p * v;
    auto index = [&](bool backward, int microBatch, int vs) {
        return (static_cast<std::size_t>(backward) * static_cast<std::size_t>(m) + static_cast<std::size_t>(microBatch)) *
                   static_cast<std::size_t>(virtuals) +
               static_cast<std::size_t>(vs);
    };
    std::vector<double> done(2 * static_cast<std::size_t>(m) * static_cast<std::size_t>(virtuals), -1);
    std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
    std::vector<double> free(static_cast<std::size_t>(p), 0);
    for (bool progressed = true; progressed;) {
        progressed = false;
        for (int s = 0; s < p; ++s) {
            auto &at = next[static_cast<std::size_t>(s)];
            while (at < order[static_cast<std::size_t>(s)].size()) {
                const Step step = order[static_cast<std::size_t>(s)][at];
                const int vs = step.chunk * p + s;
                double ready = 0;
                if (!step.backward && vs > 0)
                    ready = done[index(false, step.microBatch, vs - 1)];
                else if (step.backward && vs + 1 < virtuals)
                    ready = done[index(true, step.microBatch, vs + 1)];
                else if (step.backward)
                    ready = done[index(false, step.microBatch, vs)];
                if (ready < 0)
                    break;  // its input has not come yet
                const bool sent = (!step.backward && vs > 0) || (step.backward && vs + 1 < virtuals);
                const double start = std::max(free[static_cast<std::size_t>(s)], ready + (sent ? send : 0));
                const double t = cost.stages[static_cast<std::size_t>(s)].microBatch / v;
                const double end = start + (step.backward ? (1 - forwardShare) * t : forwardShare * t);
                done[index(step.backward, step.microBatch, vs)] = end;
                free[static_cast<std::size_t>(s)] = end;
                out.stages[static_cast<std::size_t>(s)].push_back({step.backward, step.microBatch, step.chunk, start, end});
                out.makespan = std::max(out.makespan, end);
                ++at;
                progressed = true;
            }
        }
    }
    return out;
}

} // namespace tapestry::cost
