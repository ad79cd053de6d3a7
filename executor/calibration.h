#pragma once

#include "communicator.h"

#include <nlohmann/json.hpp>

#include <string>

namespace tapestry::exec {

// Measures what the cost model needs on the ranks of `world` and returns it
// as a tapestry.mesh-profile (resources/meshes/README.md): the float32 GEMM
// rate of one rank while every rank runs GEMMs at once (OpenBLAS
// cblas_sgemm on a transformer-sized 2048x1024x2048 product, written as the
// peak with achievable fraction 1), and per link the latency per ring step
// and the bus bandwidth of all-reduces through this Communicator, inverted
// from the cost model's alpha-beta formula (cost/collectivetime.h). Ranks
// sharing a host (MPI_COMM_TYPE_SHARED) give the intra-node link; the whole
// job gives the inter-node one, or the same figures when it is one host.
// Collective: every rank calls it; needs at least 2 ranks on one host.
nlohmann::json calibrateMeshProfile(Communicator &world, const std::string &name);

} // namespace tapestry::exec
