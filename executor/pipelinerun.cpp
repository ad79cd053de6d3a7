#include "pipelinerun.h"

#include "device.h"
#include "interpreter.h"
#include "steploop.h"
#include "verification.h"
#include "watchdog.h"

#include "cost/costmodel.h"
#include "cost/pipeline.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/runreport.h"
#include "sharding/meshprofile.h"
#include "sharding/strategy.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace tapestry::exec {

using sharding::isFloat;

namespace {

// A tensor one chunk computes and later chunks read.
struct Boundary {
    ir::TensorId tensor;
    std::string name;
    std::int64_t elements = 0;
    int from = 0;          // the chunk computing it
    std::vector<int> to;   // the chunks reading it, rising
};

// What the ranks' schedule and programs need, the same on every rank.
struct PipelineLayout {
    int stages = 1, chunks = 1, microBatches = 1;
    std::int64_t batchRows = 0;           // the whole batch
    std::vector<std::string> batched;     // inputs cut into micro-batches
    std::vector<int> chunkOfOp;           // in the micro-batch graph
    std::vector<Boundary> boundaries;
    std::vector<std::string> sharedParameters;  // read by chunks of more than one stage
    int rankOf(int chunk) const { return chunk % stages; }
};

// The graph of chunk `c`: its ops in the graph's order, with their tensors'
// names; tensors other chunks computed are inputs, those later chunks read
// (and the graph's own outputs) outputs.
ir::Graph chunkGraph(const ir::Graph &micro, const PipelineLayout &layout, int c)
{
    ir::Graph g;
    g.name = micro.name + " (pipeline chunk " + std::to_string(c) + ")";
    std::vector<ir::TensorId> mapped(micro.tensorCount());
    auto tensorOf = [&](ir::TensorId t) {
        if (mapped[t.index()].valid())
            return mapped[t.index()];
        const ir::Tensor &src = micro.tensor(t);
        ir::Role role = src.role;
        if (src.producer.valid())
            role = layout.chunkOfOp[src.producer.index()] == c ? ir::Role::Activation : ir::Role::Input;
        if (role == ir::Role::Output)
            role = ir::Role::Activation;  // set again below where it stays one
        mapped[t.index()] = g.addTensor(src.name, src.shape, src.dtype, role);
        return mapped[t.index()];
    };
    for (std::size_t k = 0; k < micro.opCount(); ++k) {
        if (layout.chunkOfOp[k] != c)
            continue;
        const ir::Op &op = micro.ops()[k];
        std::vector<ir::TensorId> inputs, outputs;
        for (ir::TensorId t : op.inputs)
            inputs.push_back(tensorOf(t));
        for (ir::TensorId t : op.outputs)
            outputs.push_back(tensorOf(t));
        const ir::OpId id = g.addOp(op.type, op.name, std::move(inputs), std::move(outputs), op.attributes);
        if (!op.domain.empty())
            g.setDomain(id, op.domain);
    }
    for (std::size_t i = 0; i < micro.tensorCount(); ++i)
        if (mapped[i].valid() && micro.tensors()[i].role == ir::Role::Output)
            g.setRole(mapped[i], ir::Role::Output);
    for (const Boundary &b : layout.boundaries)
        if (b.from == c)
            g.setRole(mapped[b.tensor.index()], ir::Role::Output);
    return g;
}

// One rank's stages of the pipeline as a training step.
class PipelineProgram final : public StepProgram {
public:
    PipelineProgram(const ir::Graph &micro, PipelineLayout layout, const cost::PipelineTimeline &timeline,
                    InterpreterOptions training, Communicator &world, std::int64_t tokens)
        : m_layout(std::move(layout)), m_world(world), m_tokens(tokens)
    {
        const int rank = world.rank();
        m_slots = timeline.stages[static_cast<std::size_t>(rank)];
        // Per chunk of this rank, the most micro-batches in flight at once:
        // the copies of its program.
        std::map<int, int> live, most;
        for (const auto &slot : m_slots) {
            const int c = slot.chunk * m_layout.stages + rank;
            live[c] += slot.backward ? -1 : 1;
            most[c] = std::max(most[c], live[c]);
        }
        for (const auto &[c, copies] : most) {
            Chunk &chunk = m_chunks[c];
            chunk.graph = chunkGraph(micro, m_layout, c);
            InterpreterOptions o = training;
            o.stagePart = true;
            o.lossScale = 1.0f / static_cast<float>(m_layout.microBatches);
            for (const Boundary &b : m_layout.boundaries)
                if (std::find(b.to.begin(), b.to.end(), c) != b.to.end())
                    o.receivedInputs.push_back(b.name);
            for (int k = 0; k < copies; ++k) {
                chunk.copies.push_back(std::make_unique<Interpreter>(chunk.graph, o, chunk.graph.name));
                o.parametersOf = chunk.copies.front().get();  // the others hold activations only
            }
            chunk.free.assign(static_cast<std::size_t>(copies), true);
            m_flops += chunk.copies.front()->flopsPerStep() * m_layout.microBatches;
        }
    }

    float forward() override
    {
        // The stages start the step together, so that their slots' times
        // share an origin (each rank's clock from there).
        MPI_Barrier(m_world.handle());
        const auto stepStart = std::chrono::steady_clock::now();
        m_waited = 0;
        for (auto &[c, chunk] : m_chunks)
            chunk.copies.front()->zeroParameterGradients();  // the copies share them
        double loss = 0;
        const int m = m_layout.microBatches;
        const std::int64_t rows = m_layout.batchRows / m;
        m_times.clear();
        for (const auto &slot : m_slots) {
            const int c = slot.chunk * m_layout.stages + m_world.rank();
            const int k = slot.microBatch;
            Chunk &chunk = m_chunks.at(c);
            double began = 0;  // once its inputs came: waiting for them is the bubble
            auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - stepStart).count(); };
            if (!slot.backward) {
                Interpreter &p = acquire(chunk, k);
                p.loadInputRows(k * rows, m_layout.batchRows, m_layout.batched);
                for (std::size_t b = 0; b < m_layout.boundaries.size(); ++b) {
                    const Boundary &bd = m_layout.boundaries[b];
                    if (std::find(bd.to.begin(), bd.to.end(), c) != bd.to.end())
                        receive(p.value(bd.name).data, bd.elements, bd.from, tag(b, k, c, false));
                }
                began = now();
                loss += p.forward() / m;  // the micro-batch's mean: the whole batch's is their mean
                for (std::size_t b = 0; b < m_layout.boundaries.size(); ++b) {
                    const Boundary &bd = m_layout.boundaries[b];
                    if (bd.from == c)
                        for (int d : bd.to)
                            send(p.value(bd.name).data, bd.elements, d, tag(b, k, d, false));
                }
            } else {
                Interpreter &p = *chunk.copies[static_cast<std::size_t>(chunk.holding.at(k))];
                std::vector<float> sum;
                for (std::size_t b = 0; b < m_layout.boundaries.size(); ++b) {
                    const Boundary &bd = m_layout.boundaries[b];
                    if (bd.from != c)
                        continue;
                    sum.assign(static_cast<std::size_t>(bd.elements), 0.0f);
                    std::vector<float> part(static_cast<std::size_t>(bd.elements));
                    for (int d : bd.to) {
                        receive(part.data(), bd.elements, d, tag(b, k, d, true));
                        for (std::size_t e = 0; e < part.size(); ++e)
                            sum[e] += part[e];
                    }
                    p.seedGradient(bd.name, sum.data());
                }
                began = now();
                p.backward();
                for (std::size_t b = 0; b < m_layout.boundaries.size(); ++b) {
                    const Boundary &bd = m_layout.boundaries[b];
                    if (std::find(bd.to.begin(), bd.to.end(), c) == bd.to.end())
                        continue;
                    const TensorView g = p.grad(bd.name);
                    std::vector<float> zeros;
                    if (!g.data)
                        zeros.assign(static_cast<std::size_t>(bd.elements), 0.0f);
                    send(g.data ? g.data : zeros.data(), bd.elements, bd.from, tag(b, k, c, true));
                }
                release(chunk, k);
            }
            // From its inputs received to its outputs sent.
            m_times.push_back({slot.backward, k, slot.chunk, began, now()});
        }
        finishSends();
        // The loss is on the last chunk's rank; every rank returns it.
        MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, m_world.handle());
        m_stepSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - stepStart).count();
        return static_cast<float>(loss);
    }

    // The parameters' gradients of the step (the copies of a chunk
    // accumulate into one): a parameter several stages read summed over
    // them.
    void backward() override
    {
        for (const std::string &name : m_layout.sharedParameters) {
            std::vector<float> sum;
            std::vector<TensorView> mine;
            for (auto &[c, chunk] : m_chunks)
                if (chunk.graph.findTensor(name))
                    mine.push_back(chunk.copies.front()->grad(name));
            std::int64_t n = mine.empty() ? 0 : mine.front().size();
            MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_INT64_T, MPI_MAX, m_world.handle());
            sum.assign(static_cast<std::size_t>(n), 0.0f);
            for (const TensorView &g : mine)
                for (std::int64_t e = 0; e < n; ++e)
                    sum[static_cast<std::size_t>(e)] += g.data[e];
            MPI_Allreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, m_world.handle());
            for (const TensorView &g : mine)
                std::copy(sum.begin(), sum.end(), g.data);
        }
    }

    void update() override
    {
        for (auto &[c, chunk] : m_chunks)
            chunk.copies.front()->update();  // the parameters every copy reads
    }

    void synchronize() override { }
    KernelTimes kernelTimes() override
    {
        KernelTimes t;
        for (auto &[c, chunk] : m_chunks)
            for (auto &copy : chunk.copies) {
                t += copy->kernelTimes();
            }
        return t;
    }
    void resetKernelTimes() override
    {
        for (auto &[c, chunk] : m_chunks)
            for (auto &copy : chunk.copies)
                copy->resetKernelTimes();
    }
    double flopsPerStep() const override { return m_flops; }
    std::int64_t tokensPerStep() const override { return m_tokens; }

    // The gradient of a parameter after backward(), on the ranks holding
    // it (the first of their chunks' copies); nothing elsewhere.
    std::optional<TensorView> gradient(const std::string &name)
    {
        for (auto &[c, chunk] : m_chunks)
            if (chunk.graph.findTensor(name) && chunk.graph.tensor(*chunk.graph.findTensor(name)).role ==
                                                    ir::Role::Parameter)
                return chunk.copies.front()->grad(name);
        return std::nullopt;
    }
    // Seconds of the last step this rank waited for another stage.
    double waited() const { return m_waited; }
    // The last step's slots on this rank, as they ran.
    const std::vector<plan::ReportPipelineSlot> &times() const { return m_times; }
    double stepSeconds() const { return m_stepSeconds; }
    std::int64_t arenaBytes() const
    {
        std::int64_t bytes = 0;
        for (const auto &[c, chunk] : m_chunks)
            for (const auto &copy : chunk.copies)
                bytes += copy->arenaBytes();
        return bytes;
    }
    int copies() const
    {
        int n = 0;
        for (const auto &[c, chunk] : m_chunks)
            n += static_cast<int>(chunk.copies.size());
        return n;
    }

private:
    struct Chunk {
        ir::Graph graph;
        std::vector<std::unique_ptr<Interpreter>> copies;
        std::vector<bool> free;
        std::map<int, int> holding;  // micro-batch -> copy
    };

    Interpreter &acquire(Chunk &chunk, int microBatch)
    {
        for (std::size_t j = 0; j < chunk.free.size(); ++j)
            if (chunk.free[j]) {
                chunk.free[j] = false;
                chunk.holding[microBatch] = static_cast<int>(j);
                return *chunk.copies[j];
            }
        throw TapestryError(Error{chunk.graph.name, {}, "more micro-batches in flight than the schedule said"});
    }
    void release(Chunk &chunk, int microBatch)
    {
        chunk.free[static_cast<std::size_t>(chunk.holding.at(microBatch))] = true;
        chunk.holding.erase(microBatch);
    }
    // Tags: per boundary, micro-batch, reading chunk and direction.
    int tag(std::size_t boundary, int microBatch, int reader, bool gradient) const
    {
        return static_cast<int>(((boundary * static_cast<std::size_t>(m_layout.microBatches) +
                                  static_cast<std::size_t>(microBatch)) *
                                     static_cast<std::size_t>(m_layout.chunks) +
                                 static_cast<std::size_t>(reader)) *
                                    2 +
                                (gradient ? 1 : 0));
    }
    // To the rank of `chunk` (kept here when it is this rank's own).
    void send(const float *data, std::int64_t n, int chunk, int tag)
    {
        const int to = m_layout.rankOf(chunk);
        m_sent.emplace_back(data, data + n);
        if (to == m_world.rank()) {
            m_local[tag] = std::move(m_sent.back());
            m_sent.pop_back();
            return;
        }
        m_requests.emplace_back();
        MPI_Isend(m_sent.back().data(), static_cast<int>(n), MPI_FLOAT, to, tag, m_world.handle(),
                  &m_requests.back());
    }
    void receive(float *data, std::int64_t n, int chunk, int tag)
    {
        const int from = m_layout.rankOf(chunk);
        if (from == m_world.rank()) {
            const auto it = m_local.find(tag);
            if (it == m_local.end())
                throw TapestryError(Error{"pipeline", {}, "a chunk's input was not sent before it ran"});
            std::copy(it->second.begin(), it->second.end(), data);
            m_local.erase(it);
            return;
        }
        const auto start = std::chrono::steady_clock::now();
        MPI_Recv(data, static_cast<int>(n), MPI_FLOAT, from, tag, m_world.handle(), MPI_STATUS_IGNORE);
        m_waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    void finishSends()
    {
        const auto start = std::chrono::steady_clock::now();
        MPI_Waitall(static_cast<int>(m_requests.size()), m_requests.data(), MPI_STATUSES_IGNORE);
        m_waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        m_requests.clear();
        m_sent.clear();
    }

    PipelineLayout m_layout;
    Communicator &m_world;
    std::int64_t m_tokens = 0;
    std::vector<cost::PipelineSlot> m_slots;
    std::map<int, Chunk> m_chunks;
    double m_flops = 0;
    std::deque<std::vector<float>> m_sent;
    std::vector<MPI_Request> m_requests;
    std::map<int, std::vector<float>> m_local;
    double m_waited = 0, m_stepSeconds = 0;
    std::vector<plan::ReportPipelineSlot> m_times;
};

// Relative error of `got` against `want`, as verification.h measures it.
double relativeError(const float *got, const TensorView &want, double floor)
{
    double diff = 0, scale = floor;
    for (std::int64_t e = 0; e < want.size(); ++e) {
        diff = std::max(diff, std::abs(static_cast<double>(got[e]) - want.data[e]));
        scale = std::max(scale, std::abs(static_cast<double>(want.data[e])));
    }
    return scale > 0 ? diff / scale : diff;
}

} // namespace

int runPipeline(const PlanRunOptions &o, ir::Graph graph, const plan::Plan &plan, Communicator &world,
                std::ostream &out, std::ostream &progress)
{
    const bool root = world.rank() == 0;
    const plan::PlanPipeline &pp = *plan.pipeline;
    const int p = pp.stages, v = pp.virtualStages, chunks = p * v;
    if (plan.mesh.deviceCount() != 1)
        throw TapestryError(Error{o.plan, "mesh", "tapestry-exec runs a pipeline's stages on one rank each; this plan's "
                                                  "stages are " + plan.mesh.toString() +
                                                  " (plan it with --tensor-parallel 1 and no data parallelism, or "
                                                  "run one stage's plan alone)"});
    if (world.size() != p)
        throw TapestryError(Error{o.plan, "$.pipeline.stages",
                                  "the plan's pipeline has " + std::to_string(p) + " stages of one device but the job has " +
                                      std::to_string(world.size()) + " ranks (start it with -np " + std::to_string(p) +
                                      ")"});
    if (o.precision != Precision::F32)
        throw TapestryError(Error{"--precision", {}, "a pipeline runs in fp32 on CPU ranks"});
    const auto specs = plan::planSpecs(plan, graph, o.plan);
    const int m = std::max(1, plan.costOptions.techniques.microBatches);

    PipelineLayout layout;
    layout.stages = p;
    layout.chunks = chunks;
    layout.microBatches = m;
    std::vector<bool> microBatched(graph.tensorCount(), false);
    ir::Graph micro = m > 1 ? microBatchGraph(o, graph, specs, plan.mesh, m, microBatched) : graph;
    for (std::size_t i = 0; i < graph.tensorCount(); ++i)
        if (microBatched[i] && graph.tensors()[i].role == ir::Role::Input) {
            layout.batched.push_back(graph.tensors()[i].name);
            layout.batchRows = graph.tensors()[i].shape[0];
        }
    if (layout.batched.empty())
        layout.batchRows = m;  // one micro-batch: rows [0, whole)

    const auto layers = cost::modelLayers(micro, passes::Prune().run(micro, passes::Coarsen().run(micro)));
    if (layers.count != pp.layers)
        throw TapestryError(Error{o.plan, "$.pipeline.layers",
                                  "the pipeline cuts " + std::to_string(pp.layers) + " layers; the model has " +
                                      std::to_string(layers.count)});
    if (static_cast<int>(pp.cuts.size()) != chunks - 1)
        throw TapestryError(Error{o.plan, "$.pipeline.cuts",
                                  "the pipeline needs " + std::to_string(chunks - 1) +
                                      " cuts (cost the plan again to have them chosen)"});
    layout.chunkOfOp = cost::chunkOfOps(layers, pp.cuts);
    // What crosses from chunk to chunk.
    std::map<std::size_t, std::size_t> boundaryOf;
    for (std::size_t k = 0; k < micro.opCount(); ++k)
        for (ir::TensorId t : micro.ops()[k].inputs) {
            const ir::Tensor &tensor = micro.tensor(t);
            if (!tensor.producer.valid())
                continue;
            const int from = layout.chunkOfOp[tensor.producer.index()], to = layout.chunkOfOp[k];
            if (from == to)
                continue;
            if (from > to || !isFloat(tensor.dtype))
                throw TapestryError(Error{o.plan, "$.pipeline.cuts",
                                          "tensor '" + tensor.name + "' goes from chunk " + std::to_string(from) +
                                              " to chunk " + std::to_string(to) +
                                              (from > to ? ", backwards" : " and is not a float tensor") +
                                              "; tapestry-exec cannot cut the model there"});
            auto [it, added] = boundaryOf.try_emplace(t.index(), layout.boundaries.size());
            if (added)
                layout.boundaries.push_back({t, tensor.name, tensor.elementCount(), from, {}});
            auto &readers = layout.boundaries[it->second].to;
            if (std::find(readers.begin(), readers.end(), to) == readers.end())
                readers.push_back(to);
        }
    for (auto &b : layout.boundaries)
        std::sort(b.to.begin(), b.to.end());
    int tagLimit = 32767, *attribute = nullptr, found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attribute, &found);
    if (found && attribute)
        tagLimit = *attribute;
    if (static_cast<double>(layout.boundaries.size()) * m * chunks * 2 > tagLimit)
        throw TapestryError(Error{o.plan, "$.pipeline", "too many tensors cross between chunks for MPI's tags"});
    // Parameters read on more than one stage (a tied embedding).
    for (std::size_t i = 0; i < micro.tensorCount(); ++i) {
        const ir::Tensor &t = micro.tensors()[i];
        if (t.role != ir::Role::Parameter)
            continue;
        std::set<int> stagesReading;
        for (ir::OpId op : t.consumers)
            stagesReading.insert(layout.rankOf(layout.chunkOfOp[op.index()]));
        if (stagesReading.size() > 1)
            layout.sharedParameters.push_back(t.name);
    }

    // Each rank's order of slots, as the schedule takes them.
    cost::PipelineCost uniform;
    uniform.stages.resize(static_cast<std::size_t>(p));
    for (auto &s : uniform.stages)
        s.microBatch = 1;
    const auto timeline = cost::pipelineTimeline(uniform, pp.schedule, v, m, 0.5, 0);

    // The prediction: the plan as this executor holds tensors, on the run's profile.
    plan::Plan predicted = plan;
    const sharding::MeshProfile profile = sharding::findMeshProfile(o.meshProfile);
    {
        std::vector<int> sizes;
        std::vector<std::string> names;
        for (const auto &axis : plan.mesh.axes) {
            sizes.push_back(axis.size);
            names.push_back(axis.name);
        }
        predicted.mesh = predictionMesh(profile.mesh(sizes, names), o.precision);
        predicted.costOptions = heldCostOptions(plan.costOptions, o.training.optimizer);
        // As the stages run: every tensor kept for the backward pass, the
        // scores included (no flash attention, no recomputation; ZeRO has
        // nothing to shard on one device).
        cost::Techniques &held = predicted.costOptions.techniques;
        held.flashAttention = false;
        held.recompute = cost::Recompute::None;
        held.recomputeLayers.clear();
        held.zeroStage = 0;
        predicted.pipeline->link = profile.intraNode;
        predicted.cost = cost::evaluatePlan(graph, predicted.mesh, specs, predicted.costOptions);
        plan::costPipeline(predicted, graph, specs, o.plan);
    }
    const double predictedStep = predicted.pipeline->stepTime;

    std::int64_t tokens = 0;
    for (const ir::Tensor &t : graph.tensors())
        if (t.role == ir::Role::Input && !isFloat(t.dtype) && tokens == 0)
            tokens = t.elementCount();
    std::optional<Interpreter> reference;
    if (o.verify && root)
        reference.emplace(graph, o.training, o.model);
    PipelineProgram program(micro, layout, timeline, o.training, world, tokens);

    if (root && o.report) {
        plan::ReportStart start;
        start.model = o.model;
        start.plan = o.plan;
        start.method = plan.method;
        start.mesh = std::to_string(p) + " stages";
        start.ranks = world.size();
        start.objective = "loss";
        start.tokensPerStep = tokens;
        start.flopsPerStepPerRank = program.flopsPerStep();
        start.arenaBytesPerRank = program.arenaBytes();
        start.predicted.meshProfile = o.meshProfile;
        start.predicted.stepTime = predictedStep;
        start.predicted.compute = predicted.cost.compute;
        start.predicted.comm = predicted.cost.comm;
        start.backend = "cpu";
        start.precision = toString(o.precision);
        start.techniques = cost::describe(plan.costOptions.techniques);
        start.planMemoryBytes = pp.memoryPerDevice;
        out << plan::reportLine(start) << '\n' << std::flush;
    }
    if (root && o.progress)
        progress << "tapestry-exec: pipeline of " << p << " stages, one rank each (" << cost::toString(pp.schedule)
                 << (v > 1 ? ", " + std::to_string(v) + " chunks a stage" : std::string()) << "), " << m
                 << " micro-batches, " << layout.boundaries.size() << " tensor(s) sent between chunks; each "
                 << "stage keeps every activation for its backward pass (predicted so)\n"
                 << std::flush;

    Watchdog *watchdog = world.watchdog();
    if (watchdog)
        watchdog->setLimit(o.stepTimeout, predictedStep);
    try {
        std::optional<plan::ReportVerification> verification;
        if (o.verify) {
            if (watchdog)
                watchdog->beginStep(Watchdog::Phase::Verification, 0, world.size() + 1);
            const float loss = program.forward();
            program.backward();
            double worst = 0;
            std::string where;
            float referenceLoss = 0;
            int compared = 1;
            if (root) {
                referenceLoss = reference->forward();
                reference->backward();
                worst = std::abs(static_cast<double>(loss) - referenceLoss) /
                        std::max(1e-6, std::abs(static_cast<double>(referenceLoss)));
                where = "loss";
            }
            // Each parameter's gradient, from the first rank holding it.
            double largest = 0;
            if (root)
                for (const std::string &name : reference->parameterNames()) {
                    const TensorView g = reference->grad(name);
                    for (std::int64_t e = 0; e < g.size(); ++e)
                        largest = std::max(largest, std::abs(static_cast<double>(g.data[e])));
                }
            for (std::size_t i = 0; i < micro.tensorCount(); ++i) {
                const ir::Tensor &t = micro.tensors()[i];
                if (t.role != ir::Role::Parameter || !isFloat(t.dtype))
                    continue;
                int holder = world.size();
                const auto mine = program.gradient(t.name);
                int me = mine && mine->data ? world.rank() : world.size();
                MPI_Allreduce(&me, &holder, 1, MPI_INT, MPI_MIN, world.handle());
                if (holder == world.size())
                    continue;  // no gradient flows to it
                std::vector<float> got(static_cast<std::size_t>(t.elementCount()));
                if (world.rank() == holder && holder != 0)
                    MPI_Send(mine->data, static_cast<int>(got.size()), MPI_FLOAT, 0, 0, world.handle());
                if (root) {
                    if (holder == 0)
                        std::copy(mine->data, mine->data + got.size(), got.begin());
                    else
                        MPI_Recv(got.data(), static_cast<int>(got.size()), MPI_FLOAT, holder, 0, world.handle(),
                                 MPI_STATUS_IGNORE);
                    const double e = relativeError(got.data(), reference->grad(t.name), 1e-3 * largest);
                    ++compared;
                    if (e > worst) {
                        worst = e;
                        where = "gradient of '" + t.name + "'";
                    }
                }
            }
            program.update();
            reference.reset();
            const double tolerance = verifyTolerance(o.precision);
            MPI_Bcast(&worst, 1, MPI_DOUBLE, 0, world.handle());
            if (watchdog)
                watchdog->endStep();
            verification = plan::ReportVerification{worst <= tolerance, worst, where, tolerance, compared,
                                                    static_cast<double>(loss), static_cast<double>(referenceLoss)};
            if (root && o.progress)
                progress << "tapestry-exec: verification " << (verification->passed ? "passed" : "FAILED")
                         << ": largest relative error " << worst << " at " << where << " (tolerance " << tolerance
                         << ", " << compared << " tensors, loss " << loss << " against " << referenceLoss << ")\n"
                         << std::flush;
        }
        StepLoopOptions loop;
        loop.steps = o.steps;
        loop.warmup = o.warmup;
        loop.report = o.report;
        loop.progress = o.progress;
        plan::ReportSummary summary = runSteps(program, loop, &world, nullptr, out, progress);
        // The bubble as measured: the share of the last step each rank
        // waited for another stage, over the ranks.
        double bubble = program.stepSeconds() > 0 ? program.waited() / program.stepSeconds() : 0;
        MPI_Allreduce(MPI_IN_PLACE, &bubble, 1, MPI_DOUBLE, MPI_SUM, world.handle());
        bubble /= world.size();
        std::int64_t held = program.arenaBytes();
        MPI_Allreduce(MPI_IN_PLACE, &held, 1, MPI_INT64_T, MPI_MAX, world.handle());
        // Every stage's slots of the last step, on rank 0: 5 numbers a slot.
        std::vector<double> mine;
        for (const auto &t : program.times())
            mine.insert(mine.end(), {t.backward ? 1.0 : 0.0, double(t.microBatch), double(t.chunk), t.start, t.end});
        int count = static_cast<int>(mine.size());
        std::vector<int> counts(static_cast<std::size_t>(world.size())), offsets(counts.size());
        MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, world.handle());
        int total = 0;
        for (std::size_t r = 0; r < counts.size(); ++r) {
            offsets[r] = total;
            total += counts[r];
        }
        std::vector<double> all(static_cast<std::size_t>(root ? total : 0));
        MPI_Gatherv(mine.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0,
                    world.handle());
        plan::ReportPipeline ran;
        ran.bubbleFraction = bubble;
        ran.predictedBubbleFraction = predicted.pipeline->bubbleFraction;
        if (root)
            for (std::size_t r = 0; r < counts.size(); ++r) {
                ran.stages.emplace_back();
                for (int at = offsets[r]; at + 5 <= offsets[r] + counts[r]; at += 5) {
                    const double *v = all.data() + at;
                    ran.stages.back().push_back({v[0] != 0, static_cast<int>(v[1]), static_cast<int>(v[2]), v[3], v[4]});
                }
            }
        if (root && o.report) {
            const double measured = summary.mean.stepTime;
            summary.model = o.model;
            summary.plan = o.plan;
            summary.mesh = std::to_string(p) + " stages";
            summary.ranks = world.size();
            summary.predictedStepTime = predictedStep;
            summary.meshProfile = o.meshProfile;
            summary.predictedOverMeasured = measured > 0 ? predictedStep / measured : 0;
            summary.backend = "cpu";
            summary.precision = toString(o.precision);
            summary.verification = verification;
            summary.peakMemoryBytes = held;
            summary.predictedMemoryBytes = predicted.pipeline->memoryPerDevice;
            summary.memoryPredictedOverMeasured =
                held > 0 ? static_cast<double>(predicted.pipeline->memoryPerDevice) / held : 0.0;
            summary.pipeline = std::move(ran);
            out << plan::reportLine(summary) << '\n' << std::flush;
        }
        if (root && o.progress)
            progress << "tapestry-exec: pipeline bubble " << bubble * 100 << "% of the step measured (the ranks' "
                     << "wait for another stage), " << predicted.pipeline->bubbleFraction * 100 << "% predicted; step "
                     << summary.mean.stepTime * 1e3 << " ms measured, " << predictedStep * 1e3 << " ms predicted\n"
                     << std::flush;
        return verification && !verification->passed ? 1 : 0;
    } catch (const std::exception &e) {
        std::cerr << "tapestry-exec: rank " << world.rank() << ": " << e.what() << '\n' << std::flush;
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
}

} // namespace tapestry::exec
