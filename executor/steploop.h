#pragma once

#include "device.h"

#include "plan/runreport.h"

#include <cstdint>
#include <ostream>

namespace tapestry::exec {

class Communicator;
class RankMesh;

// What the step loop trains and measures: one rank's training step in its
// three parts, with the time spent inside its op kernels. A plan's
// ShardedProgram and the single-process Interpreter are both one.
class StepProgram {
public:
    virtual ~StepProgram() = default;
    virtual float forward() = 0;  // returns the step's objective
    virtual void backward() = 0;
    virtual void update() = 0;
    // Waits for queued work (a GPU runs asynchronously), so that it is timed done.
    virtual void synchronize() = 0;
    virtual KernelTimes kernelTimes() = 0;
    virtual void resetKernelTimes() = 0;
    virtual double flopsPerStep() const = 0;          // this rank's
    virtual std::int64_t tokensPerStep() const = 0;   // the whole job's
};

struct StepLoopOptions {
    int steps = 5;          // measured steps
    int warmup = 1;         // steps run before measuring
    bool report = false;    // a plan::ReportStep line per measured step on `out`
    bool progress = true;   // a human-readable line per measured step on `progress`
};

// The one training loop of tapestry-exec: `warmup` steps, then `steps`
// measured ones, each timed in its forward, backward and update parts, with
// its kernel times and (given `mesh`) the statistics of the collectives on
// the mesh's axes; with `world`, the ranks line up at a barrier before each
// measured step, and the world's watchdog (watchdog.h), when it has one, is
// armed for every step, warm-up included. Rank 0 of `world` (the only rank
// without one) writes the step records and progress lines. Returns, on every rank, the measured
// part of the run's summary: steps, first and last loss, the means of the
// step figures and tflopsPerRank; the caller adds what the run was.
plan::ReportSummary runSteps(StepProgram &program, const StepLoopOptions &options, Communicator *world,
                             RankMesh *mesh, std::ostream &out, std::ostream &progress);

} // namespace tapestry::exec
