#pragma once

namespace tapestry::cost {

// Knobs of the cost model. Defaults: mixed-precision Adam, 16 bytes per
// parameter (16-bit weight and gradient, fp32 master weight and two moments).
struct CostOptions {
    double parameterBytes = 2;
    double gradientBytes = 2;
    double optimizerBytes = 12;
    // Adam's update: a dozen FLOPs per parameter, at float32 peak.
    double optimizerFlopsPerParameter = 12;
    // Overlap the backward pass' collectives with its compute (gradient
    // all-reduces run while earlier layers compute): backward time becomes
    // max(compute, communication) instead of their sum.
    bool overlap = false;

    double bytesPerParameter() const { return parameterBytes + gradientBytes + optimizerBytes; }
    friend bool operator==(const CostOptions &, const CostOptions &) = default;
};

} // namespace tapestry::cost
