#include "steploop.h"

#include "collectives.h"
#include "communicator.h"
#include "rankmesh.h"
#include "watchdog.h"

#include <chrono>
#include <cstdio>

namespace tapestry::exec {

namespace {

using Clock = std::chrono::steady_clock;

// The kernel times of a report, `times` scaled by `scale` (a mean: 1 / steps).
void kernelFigures(plan::StepFigures &f, const KernelTimes &times, double scale)
{
    f.gemm = times.gemm() * scale;
    f.otherKernels = times.other() * scale;
    for (std::size_t k = 0; k < kKernelKinds; ++k)
        f.kernelSeconds[std::string(kernelKindName(static_cast<KernelKind>(k)))] = times.byKind[k] * scale;
}

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

double commSeconds(const CollectiveStats &stats)
{
    double s = 0.0;
    for (const auto &e : stats.kinds)
        s += e.seconds;
    return s;
}

} // namespace

plan::ReportSummary runSteps(StepProgram &program, const StepLoopOptions &o, Communicator *world,
                             RankMesh *mesh, std::ostream &out, std::ostream &progress)
{
    const bool root = !world || world->rank() == 0;
    const double tokens = static_cast<double>(program.tokensPerStep());
    const double flops = program.flopsPerStep();
    Watchdog *watchdog = world ? world->watchdog() : nullptr;
    for (int s = 0; s < o.warmup; ++s) {
        if (watchdog)
            watchdog->beginStep(Watchdog::Phase::WarmUp, s + 1);
        program.forward();
        program.backward();
        program.update();
        if (watchdog) {
            program.synchronize();
            watchdog->endStep();
        }
    }
    program.synchronize();
    double total = 0.0, forwardTotal = 0.0, backwardTotal = 0.0, updateTotal = 0.0;
    KernelTimes kernelTotal;
    float first = 0.0f, last = 0.0f;
    CollectiveStats all;
    for (int s = 1; s <= o.steps; ++s) {
        if (mesh)
            for (std::size_t a = 0; a < mesh->shape().size(); ++a)
                mesh->collectives(a).resetStats();
        program.resetKernelTimes();
        if (watchdog)
            watchdog->beginStep(Watchdog::Phase::Measured, s);
        if (world)
            world->barrier();
        const auto t0 = Clock::now();
        const float loss = program.forward();
        const auto t1 = Clock::now();
        program.backward();
        program.synchronize();  // a GPU queues its work: time it done
        const auto t2 = Clock::now();
        program.update();
        program.synchronize();
        const auto t3 = Clock::now();
        if (watchdog)
            watchdog->endStep();
        const double step = seconds(t0, t3);
        total += step;
        forwardTotal += seconds(t0, t1);
        backwardTotal += seconds(t1, t2);
        updateTotal += seconds(t2, t3);
        const KernelTimes kernels = program.kernelTimes();
        kernelTotal += kernels;
        if (s == 1)
            first = loss;
        last = loss;
        const CollectiveStats stats = mesh ? meshStats(*mesh) : CollectiveStats{};
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
            kernelFigures(f, kernels, 1.0);
            f.collectives = breakdown(stats, 1.0);
            f.tokensPerSecond = tokens / step;
            f.gflopsPerRank = flops / step * 1e-9;
            f.gemmGflopsPerRank = kernels.gemm() > 0 ? flops / kernels.gemm() * 1e-9 : 0.0;
            out << plan::reportLine(report) << '\n' << std::flush;
        }
        if (o.progress) {
            char line[160];
            std::snprintf(line, sizeof line, "step %d/%d  loss %.5g  %.2f ms  %.0f tokens/s\n", s, o.steps,
                          static_cast<double>(loss), step * 1e3, tokens / step);
            progress << "tapestry-exec: " << line << std::flush;
        }
    }

    plan::ReportSummary summary;
    summary.steps = o.steps;
    summary.firstLoss = first;
    summary.lastLoss = last;
    plan::StepFigures &f = summary.mean;
    f.stepTime = total / o.steps;
    f.forward = forwardTotal / o.steps;
    f.backward = backwardTotal / o.steps;
    f.update = updateTotal / o.steps;
    f.comm = commSeconds(all) / o.steps;
    kernelFigures(f, kernelTotal, 1.0 / o.steps);
    f.collectives = breakdown(all, o.steps);
    f.tokensPerSecond = tokens * o.steps / total;
    f.gflopsPerRank = flops * o.steps / total * 1e-9;
    f.gemmGflopsPerRank = kernelTotal.gemm() > 0 ? flops * o.steps / kernelTotal.gemm() * 1e-9 : 0.0;
    summary.tflopsPerRank = flops * o.steps / total * 1e-12;
    return summary;
}

} // namespace tapestry::exec
