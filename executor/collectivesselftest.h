#pragma once

#include "device.h"
#include "rankmesh.h"

#include <ostream>

namespace tapestry::exec {

// `tapestry-exec --self-test collectives --mesh AxB`: runs every collective
// on every mesh axis with tensors whose values name the rank and element they
// came from, checks each rank's result against what it must be, and checks
// the byte and call counters. Tensors live on `device` and the collectives
// are the mesh's (RankMesh::collectives: MPI, or NCCL on GPUs). Rank 0 writes one JSON line per check and a
// summary to `out`. Returns true when every check passed on every rank. A
// rank equal to `failRank` throws before its first collective, which is how
// the tests see that an erroring rank ends the job instead of hanging it.
bool runCollectivesSelfTest(RankMesh &mesh, const Communicator &world, Device &device, int failRank,
                            std::ostream &out);

} // namespace tapestry::exec
