#include "planrun.h"

#include "interpreter.h"
#include "opregistry.h"
#include "pipelinerun.h"
#include "rankmesh.h"
#include "shardedprogram.h"
#include "steploop.h"
#include "verification.h"
#include "watchdog.h"

#include "cost/costmodel.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "plan/runreport.h"
#include "sharding/meshprofile.h"

#include <mpi.h>

#include <algorithm>
#include <iostream>
#include <optional>

namespace tapestry::exec {

namespace {

// The cost model names collective kinds "all-reduce", the report "all_reduce".
std::string reportKind(std::string kind)
{
    std::replace(kind.begin(), kind.end(), '-', '_');
    return kind;
}

} // namespace

ir::Graph microBatchGraph(const PlanRunOptions &o, const ir::Graph &graph,
                          const std::vector<sharding::ShardingSpec> &specs, const sharding::Mesh &mesh, int m,
                          std::vector<bool> &microBatched)
{
    std::int64_t batch = 0;
    for (const ir::Tensor &t : graph.tensors())
        if (t.role == ir::Role::Input && !t.shape.empty() && t.shape[0] > 0) {
            batch = t.shape[0];
            break;
        }
    auto refuse = [&](const std::string &why) {
        return TapestryError(Error{o.plan, "techniques.micro_batches", why});
    };
    if (batch <= 0 || batch % m != 0)
        throw refuse(std::to_string(m) + " micro-batches do not divide the model's batch of " +
                     std::to_string(batch));
    io::LoadOptions load = o.load;
    load.batch = batch / m;
    ir::Graph micro = io::loadModel(o.model, load);
    microBatched.assign(graph.tensorCount(), false);
    bool any = false;
    for (std::size_t i = 0; i < graph.tensorCount(); ++i) {
        const ir::Tensor &whole = graph.tensors()[i];
        const auto id = micro.findTensor(whole.name);
        if (!id || id->index() != i || micro.tensors()[i].shape.size() != whole.shape.size())
            throw refuse("the model bound to batch " + std::to_string(batch / m) +
                         " is not the plan's model with a smaller batch (tensor '" + whole.name + "')");
        const ir::Shape &part = micro.tensors()[i].shape;
        if (part == whole.shape)
            continue;
        ir::Shape scaled = part;
        scaled[0] *= m;
        if (scaled != whole.shape)
            throw refuse("tensor '" + whole.name + "' does not have the batch as dim 0");
        if (auto problem = specs[i].problem(part, mesh))
            throw refuse("tensor '" + whole.name + "' in a micro-batch: " + *problem);
        microBatched[i] = true;
        any = true;
    }
    if (!any)
        throw refuse("the model has no batch dim to cut (bind it with --batch, or use a zoo or ONNX model)");
    return micro;
}

namespace {

// The memory of the rank whose peak is highest, on rank 0 (a collective).
plan::ReportMemory largestPeak(const MemoryHeld &held, Communicator &world)
{
    const std::int64_t mine[4] = {held.parameters, held.gradients, held.optimizer, held.peak()};
    std::vector<std::int64_t> all(static_cast<std::size_t>(4 * world.size()));
    MPI_Gather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, 0, world.handle());
    std::size_t top = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(world.size()); ++r)
        if (all[4 * r + 3] > all[4 * top + 3])
            top = r;
    const std::int64_t *m = &all[4 * top];
    return {m[0], m[1], m[2], m[3] - m[0] - m[1] - m[2]};
}

} // namespace

int runPlan(const PlanRunOptions &o, Communicator &world, Backend &backend, std::ostream &out,
            std::ostream &progress)
{
    const bool root = world.rank() == 0;
    ir::Graph graph = io::loadModel(o.model, o.load);
    const plan::Plan plan = plan::readPlanFile(o.plan);
    if (plan.pipeline)
        return runPipeline(o, std::move(graph), plan, world, out, progress);
    const auto specs = plan::planSpecs(plan, graph, o.plan);
    if (plan.mesh.deviceCount() != world.size())
        throw TapestryError(Error{o.plan, "mesh", "the plan's mesh " + plan.mesh.toString() + " has " +
                                                      std::to_string(plan.mesh.deviceCount()) +
                                                      " devices but the job has " + std::to_string(world.size()) +
                                                      " ranks (start it with -np " +
                                                      std::to_string(plan.mesh.deviceCount()) + ")"});
    std::vector<std::int64_t> shape;
    std::vector<int> sizes;
    std::vector<std::string> names;
    for (const auto &axis : plan.mesh.axes) {
        shape.push_back(axis.size);
        sizes.push_back(axis.size);
        names.push_back(axis.name);
    }
    const sharding::MeshProfile profile = sharding::findMeshProfile(o.meshProfile);
    const sharding::Mesh profiled = profile.mesh(sizes, names);
    const double peak = profile.device.peak(peakDType(o.precision));
    const double tolerance = verifyTolerance(o.precision);
    // The plan as this executor holds it, which the memory and the
    // optimizer's bytes moved are costed with (the precision changes the
    // peak alone, not the memory).
    const cost::PlanCost predictedCost = cost::evaluatePlan(graph, predictionMesh(profiled, o.precision), specs,
                                                            heldCostOptions(plan.costOptions, o.training.optimizer));
    const double predicted = predictedCost.stepTime;
    const cost::MemoryCost &predictedMemory = predictedCost.memory;
    // The GEMMs' share of the predicted compute, as the ranks time theirs
    // (the ops the executor runs as GEMMs); the rest is the other kernels'.
    std::map<std::string, double> predictedKernels;
    for (std::size_t k = 0; k < kKernelKinds; ++k)
        predictedKernels[std::string(kernelKindName(static_cast<KernelKind>(k)))] = 0.0;
    for (const ir::Op &op : graph.ops()) {
        const OpDef *def = findOp(op.type);
        const auto it = predictedCost.byOp.find(op.name);
        if (!def || it == predictedCost.byOp.end())
            continue;
        predictedKernels[std::string(kernelKindName(kernelKindOf(op.type, def->gemm)))] += it->second.compute;
    }
    const double predictedGemm = predictedKernels["gemm"];
    // What no op is charged (the optimizer's update) is the other kernels'.
    double charged = 0;
    for (const auto &[kind, seconds] : predictedKernels)
        charged += seconds;
    predictedKernels["other"] += std::max(0.0, predictedCost.compute - charged);

    RankMesh mesh(world, shape);
    RankMesh aux(world, shape);
    mesh.attach(backend);
    aux.attach(backend);
    Device &device = backend.device();
    ShardedProgramOptions po;
    po.training = o.training;
    po.dropAllReduce = o.dropAllReduce;
    po.watchdog = world.watchdog();
    po.gatherGradients = o.verify;
    po.techniques = plan.costOptions.techniques;
    if (po.techniques.offloadOptimizer)
        throw TapestryError(Error{o.plan, "techniques.offload_optimizer",
                                  "the executor does not run the optimizer offloaded to the host (its CPU ranks "
                                  "hold the optimizer state in host memory already); plan again with "
                                  "--offload-optimizer off to run it"});
    std::optional<Interpreter> reference;
    if (o.verify && root)
        reference.emplace(graph, o.training, o.model);
    if (po.techniques.microBatches > 1)
        graph = microBatchGraph(o, graph, specs, plan.mesh, po.techniques.microBatches, po.microBatched);
    ShardedProgram program(std::move(graph), specs, plan.mesh, mesh, aux, device, po, o.model);
    if (o.dropAllReduce > program.planAllReduces())
        throw TapestryError(Error{"--test-drop-collective", {}, "the plan has " +
                                                                    std::to_string(program.planAllReduces()) +
                                                                    " all-reduces per step, not " +
                                                                    std::to_string(o.dropAllReduce)});

    const double flops = program.flopsPerStep();
    if (root && o.report) {
        plan::ReportStart start;
        start.model = o.model;
        start.plan = o.plan;
        start.method = plan.method;
        start.mesh = RankMesh::shapeToString(shape);
        start.ranks = world.size();
        start.objective = program.objective() == Objective::Loss ? "loss" : "sum_of_squares";
        start.tokensPerStep = program.tokensPerStep();
        start.flopsPerStepPerRank = flops;
        for (const kernels::GemmCall &c : program.gemmsPerStep())
            start.gemmsPerStepPerRank.push_back({c.transA, c.transB, c.m, c.n, c.k, c.count});
        start.arenaBytesPerRank = program.arenaBytes();
        start.planAllReduces = program.planAllReduces();
        start.predicted.meshProfile = o.meshProfile;
        start.predicted.stepTime = predicted;
        start.predicted.compute = predictedCost.compute;
        start.predicted.gemm = predictedGemm;
        start.predicted.otherKernels = predictedCost.compute - predictedGemm;
        start.predicted.kernelSeconds = predictedKernels;
        start.predicted.comm = predictedCost.comm;
        for (const auto &[kind, totals] : predictedCost.byCollective)
            start.predicted.collectiveSeconds[reportKind(kind)] = totals.comm;
        start.backend = backend.name();
        start.device = device.description();
        start.precision = toString(o.precision);
        start.techniques = cost::describe(plan.costOptions.techniques);
        start.predictedMemory = {predictedMemory.parameters, predictedMemory.gradients, predictedMemory.optimizer,
                                 predictedMemory.activations};
        start.planMemoryBytes = plan.cost.memory.total();
        out << plan::reportLine(start) << '\n' << std::flush;
    }

    // From here on a failure may hit one rank only: it ends the whole job
    // rather than leave the others waiting in a collective.
    Watchdog *watchdog = world.watchdog();
    if (watchdog)
        watchdog->setLimit(o.stepTimeout, predicted);
    try {
        if (root && o.progress && !o.note.empty())
            progress << "tapestry-exec: " << o.note << '\n' << std::flush;
        std::optional<VerificationResult> verdict;
        if (o.verify) {
            if (watchdog)
                watchdog->beginStep(Watchdog::Phase::Verification, 0, world.size() + 1);
            verdict = verifyStep(program, reference ? &*reference : nullptr, world, tolerance);
            if (watchdog)
                watchdog->endStep();
            reference.reset();
            if (root && o.progress)
                progress << "tapestry-exec: verification " << (verdict->passed ? "passed" : "FAILED")
                         << ": largest relative error " << verdict->maxError << " at " << verdict->where
                         << " (tolerance " << tolerance << ", " << verdict->compared << " tensors)\n"
                         << std::flush;
        }
        StepLoopOptions loop;
        loop.steps = o.steps;
        loop.warmup = o.warmup;
        loop.report = o.report;
        loop.progress = o.progress;
        plan::ReportSummary summary = runSteps(program, loop, &world, &mesh, out, progress);
        const plan::ReportMemory heldMemory = largestPeak(program.memoryHeld(), world);
        if (root && o.report) {
            const double measured = summary.mean.stepTime;
            summary.model = o.model;
            summary.plan = o.plan;
            summary.mesh = RankMesh::shapeToString(shape);
            summary.ranks = world.size();
            summary.predictedStepTime = predicted;
            summary.meshProfile = o.meshProfile;
            summary.predictedOverMeasured = predicted / measured;
            summary.backend = backend.name();
            summary.device = device.description();
            summary.precision = toString(o.precision);
            summary.devicePeakTflops = peak * 1e-12;
            summary.fractionOfPeak = peak > 0 ? flops / measured / peak : 0.0;
            if (verdict)
                summary.verification = plan::ReportVerification{verdict->passed, verdict->maxError, verdict->where,
                                                                tolerance, verdict->compared,
                                                                verdict->shardedObjective,
                                                                verdict->referenceObjective};
            summary.memory = heldMemory;
            summary.peakMemoryBytes = heldMemory.total();
            summary.predictedMemoryBytes = predictedMemory.total();
            summary.memoryPredictedOverMeasured =
                heldMemory.total() > 0 ? static_cast<double>(predictedMemory.total()) / heldMemory.total() : 0.0;
            out << plan::reportLine(summary) << '\n' << std::flush;
        }
        if (root && o.progress)
            progress << "tapestry-exec: memory per rank " << heldMemory.total() << " bytes at its peak (parameters "
                     << heldMemory.parameters << ", gradients " << heldMemory.gradients << ", optimizer "
                     << heldMemory.optimizer << ", activations and the rest " << heldMemory.activations
                     << "); predicted " << predictedMemory.total() << '\n'
                     << std::flush;
        return verdict && !verdict->passed ? 1 : 0;
    } catch (const std::exception &e) {
        std::cerr << "tapestry-exec: rank " << world.rank() << ": " << e.what() << '\n' << std::flush;
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
}

} // namespace tapestry::exec
