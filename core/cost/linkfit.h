#pragma once

#include "sharding/collective.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tapestry::cost {

// One timed collective on a group of `devices`: its size (nccl-tests
// convention, as CollectiveCost::bytes) and the seconds it took.
struct CollectiveSample {
    sharding::CollectiveKind kind = sharding::CollectiveKind::AllReduce;
    int devices = 2;
    std::int64_t bytes = 0;
    double seconds = 0;
};

// A link's latency per ring step and bus bandwidth, as collectiveTime()
// uses them, fitted to samples.
struct LinkFit {
    double latency = 0;    // s per ring step
    double bandwidth = 0;  // bytes/s (bus bandwidth)
    double maxRelativeError = 0;  // of the fitted times against the samples
    int samples = 0;
};

// Least-squares fit of collectiveTime()'s alpha-beta model,
//   seconds = latency x ringSteps(kind, n) + bytes x busFactor(kind, n) / bandwidth,
// over samples of any kinds and group sizes. The error is relative (each
// sample weighted by 1/seconds), so a sweep from bytes to megabytes fits
// the small messages' latency as well as the large ones' bandwidth. A
// latency the data would make negative is held at zero. Throws
// TapestryError naming `input` when the samples cannot determine both
// figures (fewer than two sizes, no positive times, no bandwidth term).
LinkFit fitLink(const std::vector<CollectiveSample> &samples, const std::string &input = "calibration");

// The latency that best fits `samples` (same relative error) with the
// bandwidth held at `bandwidth`, e.g. one measured on an idle link, where
// the samples alone are too noisy to fit one (a busy machine whose waits
// drown the growth with size). A latency the data would make negative is
// held at zero. Throws TapestryError naming `input` on samples fitLink()
// refuses for their form (no positive times, fewer than 2 devices) or a
// bandwidth that is not positive.
LinkFit fitLatency(const std::vector<CollectiveSample> &samples, double bandwidth,
                   const std::string &input = "calibration");

} // namespace tapestry::cost
