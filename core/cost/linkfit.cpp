#include "cost/linkfit.h"

#include "cost/collectivetime.h"
#include "ir/error.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace tapestry::cost {

namespace {

// The model's two regressors for one sample, scaled by 1/seconds.
struct Row {
    double steps;  // multiplies latency
    double bus;    // multiplies 1 / bandwidth
};

Row row(const CollectiveSample &s)
{
    return {ringSteps(s.kind, s.devices) / s.seconds,
            static_cast<double>(s.bytes) * busFactor(s.kind, s.devices) / s.seconds};
}

void checkSamples(const std::vector<CollectiveSample> &samples, const std::string &input)
{
    if (samples.empty())
        throw TapestryError(Error{input, {}, "no collective samples to fit"});
    for (const auto &s : samples)
        if (!(s.seconds > 0) || s.devices < 2 || s.bytes < 0)
            throw TapestryError(Error{input, {}, "a collective sample needs 2+ devices, bytes >= 0 and a "
                                                 "positive time"});
}

LinkFit finish(const std::vector<CollectiveSample> &samples, double a, double b)
{
    LinkFit fit;
    fit.latency = a;
    fit.bandwidth = 1.0 / b;
    fit.samples = static_cast<int>(samples.size());
    for (const auto &s : samples) {
        const double model = a * ringSteps(s.kind, s.devices) +
                             static_cast<double>(s.bytes) * busFactor(s.kind, s.devices) * b;
        fit.maxRelativeError = std::max(fit.maxRelativeError, std::abs(model - s.seconds) / s.seconds);
    }
    return fit;
}

} // namespace

LinkFit fitLink(const std::vector<CollectiveSample> &samples, const std::string &input)
{
    checkSamples(samples, input);
    std::set<std::int64_t> sizes;
    for (const auto &s : samples)
        sizes.insert(s.bytes);
    if (sizes.size() < 2)
        throw TapestryError(Error{input, {}, "fitting latency and bandwidth needs samples of at least two sizes"});

    // Normal equations of min sum (steps*a + bus*b - 1)^2 with a = latency,
    // b = 1 / bandwidth.
    double ss = 0, sb = 0, bb = 0, s1 = 0, b1 = 0;
    for (const auto &sample : samples) {
        const Row r = row(sample);
        ss += r.steps * r.steps;
        sb += r.steps * r.bus;
        bb += r.bus * r.bus;
        s1 += r.steps;
        b1 += r.bus;
    }
    const double det = ss * bb - sb * sb;
    double a = 0, b = 0;
    if (std::abs(det) > 1e-12 * ss * bb) {
        a = (s1 * bb - b1 * sb) / det;
        b = (ss * b1 - sb * s1) / det;
    }
    if (!(a > 0)) {  // latency too small to see (or collinear rows): bandwidth alone
        a = 0;
        b = b1 / bb;
    }
    if (!(b > 0))
        throw TapestryError(Error{input, {}, "the times do not grow with the message size: no bandwidth to fit"});
    return finish(samples, a, b);
}

LinkFit fitLatency(const std::vector<CollectiveSample> &samples, double bandwidth, const std::string &input)
{
    checkSamples(samples, input);
    if (!(bandwidth > 0) || !std::isfinite(bandwidth))
        throw TapestryError(Error{input, {}, "the bandwidth to fit a latency under must be positive"});
    // min sum (steps*a + bus*b - 1)^2 over a alone, b = 1 / bandwidth.
    const double b = 1.0 / bandwidth;
    double ss = 0, sr = 0;
    for (const auto &sample : samples) {
        const Row r = row(sample);
        ss += r.steps * r.steps;
        sr += r.steps * (1.0 - r.bus * b);
    }
    return finish(samples, ss > 0 ? std::max(sr / ss, 0.0) : 0.0, b);
}

} // namespace tapestry::cost
