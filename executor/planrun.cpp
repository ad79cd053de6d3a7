#include "planrun.h"

#include "rankmesh.h"
#include "shardedprogram.h"
#include "steploop.h"
#include "verification.h"

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
        StepLoopOptions loop;
        loop.steps = o.steps;
        loop.warmup = o.warmup;
        loop.report = o.report;
        loop.progress = o.progress;
        plan::ReportSummary summary = runSteps(program, loop, &world, &mesh, out, progress);
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
