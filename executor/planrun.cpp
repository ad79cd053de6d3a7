#include "planrun.h"

#include "rankmesh.h"
#include "shardedprogram.h"
#include "verification.h"

#include "cost/costmodel.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "plan/runreport.h"
#include "sharding/meshprofile.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

namespace tapestry::exec {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

// Collective statistics of one step, summed over the mesh axes.
CollectiveStats meshStats(RankMesh &mesh)
{
    CollectiveStats sum;
    for (std::size_t a = 0; a < mesh.shape().size(); ++a)
        for (std::size_t k = 0; k < kCollectiveKinds; ++k) {
            const auto &e = mesh.collectives(a).stats().kinds[k];
            sum.kinds[k].calls += e.calls;
            sum.kinds[k].bytes += e.bytes;
            sum.kinds[k].seconds += e.seconds;
        }
    return sum;
}

plan::CollectiveBreakdown breakdown(const CollectiveStats &stats, double per)
{
    plan::CollectiveBreakdown b;
    for (std::size_t k = 0; k < kCollectiveKinds; ++k) {
        const auto &e = stats.kinds[k];
        if (e.calls == 0)
            continue;
        b[std::string(toString(static_cast<Collective>(k)))] = {
            static_cast<double>(e.calls) / per, static_cast<double>(e.bytes) / per, e.seconds / per};
    }
    return b;
}

// The cost model names collective kinds "all-reduce", the report "all_reduce".
std::string reportKind(std::string kind)
{
    std::replace(kind.begin(), kind.end(), '-', '_');
    return kind;
}

double commSeconds(const CollectiveStats &stats)
{
    double s = 0.0;
    for (const auto &e : stats.kinds)
        s += e.seconds;
    return s;
}

} // namespace

int runPlan(const PlanRunOptions &o, Communicator &world, Backend &backend, std::ostream &out,
            std::ostream &progress)
{
    const bool root = world.rank() == 0;
    ir::Graph graph = io::loadModel(o.model, o.load);
    const plan::Plan plan = plan::readPlanFile(o.plan);
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
    const cost::PlanCost predictedCost = cost::evaluatePlan(graph, profiled, specs, plan.costOptions);
    const double predicted = predictedCost.stepTime;

    RankMesh mesh(world, shape);
    RankMesh aux(world, shape);
    mesh.attach(backend);
    aux.attach(backend);
    Device &device = backend.device();
    ShardedProgramOptions po;
    po.training = o.training;
    po.dropAllReduce = o.dropAllReduce;
    po.gatherGradients = o.verify;
    std::optional<Interpreter> reference;
    if (o.verify && root)
        reference.emplace(graph, o.training, o.model);
    ShardedProgram program(std::move(graph), specs, plan.mesh, mesh, aux, device, po, o.model);
    if (o.dropAllReduce > program.planAllReduces())
        throw TapestryError(Error{"--test-drop-collective", {}, "the plan has " +
                                                                    std::to_string(program.planAllReduces()) +
                                                                    " all-reduces per step, not " +
                                                                    std::to_string(o.dropAllReduce)});

    const double tokens = static_cast<double>(program.tokensPerStep());
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
        start.predicted.comm = predictedCost.comm;
        for (const auto &[kind, totals] : predictedCost.byCollective)
            start.predicted.collectiveSeconds[reportKind(kind)] = totals.comm;
        start.backend = backend.name();
        start.device = device.description();
        start.precision = toString(o.precision);
        out << plan::reportLine(start) << '\n' << std::flush;
    }

    // From here on a failure may hit one rank only: it ends the whole job
    // rather than leave the others waiting in a collective.
    try {
        if (root && o.progress && !o.note.empty())
            progress << "tapestry-exec: " << o.note << '\n' << std::flush;
        std::optional<VerificationResult> verdict;
        if (o.verify) {
            verdict = verifyStep(program, reference ? &*reference : nullptr, world, tolerance);
            program.update();
            reference.reset();
            if (root && o.progress)
                progress << "tapestry-exec: verification " << (verdict->passed ? "passed" : "FAILED")
                         << ": largest relative error " << verdict->maxError << " at " << verdict->where
                         << " (tolerance " << tolerance << ", " << verdict->compared << " tensors)\n"
                         << std::flush;
        }
        for (int s = 0; s < o.warmup; ++s) {
            program.forward();
            program.backward();
            program.update();
        }
        program.synchronize();
        double total = 0.0, forwardTotal = 0.0, backwardTotal = 0.0, updateTotal = 0.0;
        double gemmTotal = 0.0, otherTotal = 0.0;
        float first = 0.0f, last = 0.0f;
        CollectiveStats all;
        for (int s = 1; s <= o.steps; ++s) {
            for (std::size_t a = 0; a < shape.size(); ++a)
                mesh.collectives(a).resetStats();
            program.resetKernelTimes();
            MPI_Barrier(world.handle());
            const auto t0 = Clock::now();
            const float loss = program.forward();
            const auto t1 = Clock::now();
            program.backward();
            program.synchronize();  // a GPU queues its work: time it done
            const auto t2 = Clock::now();
            program.update();
            program.synchronize();
            const auto t3 = Clock::now();
            const double step = seconds(t0, t3);
            total += step;
            forwardTotal += seconds(t0, t1);
            backwardTotal += seconds(t1, t2);
            updateTotal += seconds(t2, t3);
            const KernelTimes kernels = program.kernelTimes();
            gemmTotal += kernels.gemm;
            otherTotal += kernels.other;
            if (s == 1)
                first = loss;
            last = loss;
            const CollectiveStats stats = meshStats(mesh);
            for (std::size_t k = 0; k < kCollectiveKinds; ++k) {
                all.kinds[k].calls += stats.kinds[k].calls;
                all.kinds[k].bytes += stats.kinds[k].bytes;
                all.kinds[k].seconds += stats.kinds[k].seconds;
            }
            if (!root)
                continue;
            if (o.report) {
                plan::ReportStep report;
                report.step = s;
                report.steps = o.steps;
                report.loss = loss;
                plan::StepFigures &f = report.figures;
                f.stepTime = step;
                f.forward = seconds(t0, t1);
                f.backward = seconds(t1, t2);
                f.update = seconds(t2, t3);
                f.comm = commSeconds(stats);
                f.gemm = kernels.gemm;
                f.otherKernels = kernels.other;
                f.collectives = breakdown(stats, 1.0);
                f.tokensPerSecond = tokens / step;
                f.gflopsPerRank = flops / step * 1e-9;
                f.gemmGflopsPerRank = kernels.gemm > 0 ? flops / kernels.gemm * 1e-9 : 0.0;
                out << plan::reportLine(report) << '\n' << std::flush;
            }
            char line[160];
            std::snprintf(line, sizeof line, "step %d/%d  loss %.5g  %.2f ms  %.0f tokens/s\n", s, o.steps,
                          static_cast<double>(loss), step * 1e3, tokens / step);
            if (o.progress)
                progress << "tapestry-exec: " << line << std::flush;
        }
        if (root && o.report) {
            plan::ReportSummary summary;
            summary.model = o.model;
            summary.plan = o.plan;
            summary.mesh = RankMesh::shapeToString(shape);
            summary.ranks = world.size();
            summary.steps = o.steps;
            summary.firstLoss = first;
            summary.lastLoss = last;
            plan::StepFigures &f = summary.mean;
            f.stepTime = total / o.steps;
            f.forward = forwardTotal / o.steps;
            f.backward = backwardTotal / o.steps;
            f.update = updateTotal / o.steps;
            f.comm = commSeconds(all) / o.steps;
            f.gemm = gemmTotal / o.steps;
            f.otherKernels = otherTotal / o.steps;
            f.collectives = breakdown(all, o.steps);
            f.tokensPerSecond = tokens * o.steps / total;
            f.gflopsPerRank = flops * o.steps / total * 1e-9;
            f.gemmGflopsPerRank = gemmTotal > 0 ? flops * o.steps / gemmTotal * 1e-9 : 0.0;
            summary.predictedStepTime = predicted;
            summary.meshProfile = o.meshProfile;
            summary.predictedOverMeasured = predicted / (total / o.steps);
            summary.backend = backend.name();
            summary.device = device.description();
            summary.precision = toString(o.precision);
            summary.tflopsPerRank = flops * o.steps / total * 1e-12;
            summary.devicePeakTflops = peak * 1e-12;
            summary.fractionOfPeak = peak > 0 ? flops * o.steps / total / peak : 0.0;
            if (verdict)
                summary.verification = plan::ReportVerification{verdict->passed, verdict->maxError, verdict->where,
                                                                tolerance, verdict->compared,
                                                                verdict->shardedObjective,
                                                                verdict->referenceObjective};
            out << plan::reportLine(summary) << '\n' << std::flush;
        }
        return verdict && !verdict->passed ? 1 : 0;
    } catch (const std::exception &e) {
        std::cerr << "tapestry-exec: rank " << world.rank() << ": " << e.what() << '\n' << std::flush;
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 1;
}

} // namespace tapestry::exec
