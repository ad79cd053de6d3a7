#pragma once

#include "cost/plancost.h"
#include "sharding/collective.h"
#include "sharding/mesh.h"

#include <cstdint>

namespace tapestry::cost {

// Ring algorithms as nccl-tests accounts for them, over n devices: bus
// factor (bytes each device moves per byte of the collective's size):
// all-reduce 2(n-1)/n, all-gather, reduce-scatter and all-to-all (n-1)/n.
double busFactor(sharding::CollectiveKind kind, int n);
// Latency-bound steps of the ring: 2(n-1) for all-reduce, n-1 otherwise.
int ringSteps(sharding::CollectiveKind kind, int n);
// α-β time: latency x steps + bytes x bus factor / bus bandwidth, with the
// link's fit for `kind` where it has one (LinkProfile::byKind).
double collectiveTime(sharding::CollectiveKind kind, std::int64_t bytes, const sharding::MeshAxis &axis);
// Bytes each device sends over the link: bytes x bus factor, rounded.
std::int64_t wireBytes(sharding::CollectiveKind kind, std::int64_t bytes, int n);
// One collective of a step, costed on its mesh axis and charged to `op`.
CollectiveCost costCollective(const sharding::Collective &c, const std::string &op, Phase phase,
                              const sharding::Mesh &mesh);

} // namespace tapestry::cost
