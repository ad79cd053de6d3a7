#pragma once

#include "communicator.h"

#include "io/modelloader.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tapestry::exec {

struct CalibrationOptions {
    std::string name = "calibrated";
    // Mesh whose axes are swept one by one ("2x2"); empty: all ranks as one axis.
    std::vector<std::int64_t> mesh;
    // The training step whose kernels set achievable_fraction.
    std::string workload = "zoo:gpt2?layers=1&hidden=256&heads=4&seq=128&batch=2&vocab=1024";
    io::LoadOptions load;
};

// Measures what the cost model needs on the ranks of `world`, all ranks
// busy at once as the ranks of a plan are, and returns a
// tapestry.mesh-profile (resources/meshes/README.md) with a "calibration"
// section holding the raw figures:
// - device.peak_flops: the GEMM rate of one rank per dtype (float32 through
//   cblas_sgemm, bfloat16 through cblas_sbgemm where OpenBLAS has it) on a
//   2048x1024x2048 product;
// - device.achievable_fraction: what the rest of a training step costs on
//   top of that, as the cost model counts it: the model's compute time at
//   peak (cost::evaluatePlan on one device) over the measured step time of
//   `workload` run whole on every rank (Interpreter), so elementwise
//   kernels, softmax and norms are in it;
// - links: per mesh axis, all-reduce, all-gather and reduce-scatter through
//   this Communicator over a sweep of sizes, fitted to latency per ring step
//   and bus bandwidth (cost::fitLink). Axes whose ranks share a host make
//   links.intra_node; axes across hosts links.inter_node (the intra figures
//   again when the job has one host).
// Collective: every rank calls it; needs at least 2 ranks on every host.
nlohmann::json calibrateMeshProfile(Communicator &world, const CalibrationOptions &options);

} // namespace tapestry::exec
