#pragma once

#include "backend.h"
#include "communicator.h"
#include "device.h"
#include "interpreter.h"

#include "io/modelloader.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

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
    std::string meshProfile = "cpu-loopback";  // for the predicted step time and the device's peak
    Precision precision = Precision::F32;      // the GEMMs' (the verification tolerance follows it)
    std::string note;                          // a line for the progress stream once set up (rank 0)
    InterpreterOptions training;
    int dropAllReduce = 0;             // test aid, see ShardedProgramOptions
    double stepTimeout = 0.0;          // seconds a step may take; 0: the watchdog's automatic limit
};

// Runs a plan on the ranks of `world`, computing on `backend`: loads the model and the plan, checks
// that the plan's mesh has one device per rank (else TapestryError before
// any work), builds each rank's ShardedProgram, optionally verifies the
// first step against the single-process reference on rank 0, then trains
// warmup + steps steps. Rank 0 writes one JSON line per measured step and a
// summary to `out` when `report` is set (with the achieved FLOP/s against
// the device's peak from the mesh profile), and progress to `progress`.
// Returns 0, or 1 when verification failed. Set-up problems (model, plan,
// mesh) throw TapestryError identically on every rank. The watchdog of
// `world`, when it has one, gets the step limit and watches the verification
// step (with ranks + 1 times the limit: rank 0 also runs the unsharded
// reference) and every training step.
int runPlan(const PlanRunOptions &options, Communicator &world, Backend &backend, std::ostream &out,
            std::ostream &progress);

// One micro-batch's graph: the model bound to batch / m, checked to be the
// plan's graph with dim 0 of its batch tensors cut m ways (every tensor
// keeps its name, and its shape or dim 0 over m); `microBatched` marks
// those tensors. Throws TapestryError naming the plan when the model has no
// batch to bind or the specs do not divide the micro-batch.
ir::Graph microBatchGraph(const PlanRunOptions &o, const ir::Graph &graph,
                          const std::vector<sharding::ShardingSpec> &specs, const sharding::Mesh &mesh, int m,
                          std::vector<bool> &microBatched);

} // namespace tapestry::exec
