#pragma once

#include "cost/plancost.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>

namespace tapestry::cost {

// The planner's objective, the one every search and every ranking keeps
// (tap, exact, --keep-pins, the candidates panel, the tests that hold tap to
// the reference plans): the least step time among plans that fit in device
// memory; when none fits, the least overshoot of memory, then the least step
// time. A plan that fits always beats one that does not.
//
// `capacity` <= 0 means no limit (everything fits).
struct Objective {
    std::int64_t overshoot = 0;  // bytes per device over the capacity, 0 when it fits
    double stepTime = 0;         // s

    static Objective of(double stepTime, std::int64_t memory, std::int64_t capacity)
    {
        const std::int64_t over = capacity > 0 ? std::max<std::int64_t>(0, memory - capacity) : 0;
        return {over, stepTime};
    }
    static Objective of(const PlanCost &cost)
    {
        return of(cost.stepTime, cost.memory.total(), cost.memoryCapacity);
    }
    static Objective worst() { return {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<double>::max()}; }

    bool fits() const { return overshoot == 0; }
    friend bool operator<(const Objective &a, const Objective &b)
    {
        return std::tie(a.overshoot, a.stepTime) < std::tie(b.overshoot, b.stepTime);
    }
    friend bool operator==(const Objective &, const Objective &) = default;
    // a is no worse than b, allowing b's step time a relative slack (for
    // comparing figures that were summed in a different order).
    friend bool noWorse(const Objective &a, const Objective &b, double relative = 1e-9)
    {
        if (a.overshoot != b.overshoot)
            return a.overshoot < b.overshoot;
        return a.stepTime <= b.stepTime * (1 + relative);
    }
};

} // namespace tapestry::cost
