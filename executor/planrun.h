#pragma once

#include "communicator.h"
#include "interpreter.h"

#include "io/modelloader.h"

#include <cstdint>
#include <ostream>
#include <string>

namespace tapestry::exec {

struct PlanRunOptions {
    std::string model;
    io::LoadOptions load;
    std::string plan;                  // tapestry.plan file
    int steps = 5;                     // measured steps
    int warmup = 1;                    // steps run before measuring
    bool verify = false;
    bool report = false;               // JSON lines on `out` (rank 0)
    bool progress = true;              // human-readable lines on `progress` (rank 0)
    std::string meshProfile = "cpu-loopback";  // for the predicted step time
    InterpreterOptions training;
    int dropAllReduce = 0;             // test aid, see ShardedProgramOptions
};

// Runs a plan on the ranks of `world`: loads the model and the plan, checks
// that the plan's mesh has one device per rank (else TapestryError before
// any work), builds each rank's ShardedProgram, optionally verifies the
// first step against the single-process reference on rank 0, then trains
// warmup + steps steps. Rank 0 writes one JSON line per measured step and a
// summary to `out` when `report` is set, and progress to `progress`.
// Returns 0, or 1 when verification failed. Set-up problems (model, plan,
// mesh) throw TapestryError identically on every rank.
int runPlan(const PlanRunOptions &options, Communicator &world, std::ostream &out, std::ostream &progress);

} // namespace tapestry::exec
