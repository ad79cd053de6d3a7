#pragma once

#include "cost/objective.h"
#include "plan/plan.h"
#include "searchcases.h"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::searchdiff {

// What tap's plan is held to.
enum class Check {
    Exact,               // within the tolerance of exact's plan, when exact proved it optimal
    Reference,           // no worse than a reference plan that applies
    LeastCommunication,  // no worse than its own least-communication plan
    KeepPins,            // with the pins kept, no worse than the pinned input costed as it is
};
std::string_view toString(Check check);  // "tap/exact", "tap/reference", ...

// How far tap's plan is from another by the planner's objective, relative
// to the other: in memory when their overshoots differ (the objective
// ranks that first), else in step time. Positive when tap's is worse.
struct Gap {
    bool memory = false;
    double value = 0;
    std::string toString() const;  // "+2.31% step time", "+12.0% memory"
};
Gap gapOf(const cost::PlanCost &tap, const cost::PlanCost &other);
// a is a worse gap for tap than b: any memory gap tap loses before any step time gap.
bool worseGap(const Gap &a, const Gap &b);

struct Comparison {
    Check check = Check::Exact;
    std::string against;  // exact, megatron, megatron-sp, dp, replicate, least-communication, pinned input
    cost::Objective tap, other;
    Gap gap;
    bool passed = true;
    // false: exact stopped at its time limit, so its plan is no yardstick;
    // shown, not held against tap.
    bool binding = true;
    std::string detail;  // both plans' figures and the gap
};

struct CaseResult {
    std::int64_t memoryBytes = 0;  // the device memory the case ran with
    std::map<std::string, sharding::ShardingSpec> pins;
    std::string pinBase;                  // the plan the pins came from (tap's when the named one had none)
    std::optional<plan::Plan> pinnedInput;  // that plan with the pins set, costed as it is
    // --keep-pins kept the pinned input: tap's search around the pins
    // found nothing better (search::keepPinnedPlanIfBetter).
    bool pinnedInputKept = false;
    std::vector<Comparison> comparisons;
    std::vector<std::string> errors;  // a search that threw where it must answer
    std::string exactProblem;         // empty when exact proved its plan optimal
    std::vector<std::string> refused;  // reference plans that do not apply
    double tapSeconds = 0, exactSeconds = 0, seconds = 0;

    bool passed() const;
    // The device memory and the pins, then one line per error and failed
    // comparison.
    std::string failures() const;
};

struct RunOptions {
    double exactTimeLimitSeconds = 10;
    double exactTolerance = 0.01;  // tap within 1% of exact
};

// Runs tap, exact and the reference plans on the case and compares them.
CaseResult runCase(const SearchCase &c, const RunOptions &options = {});

// The tapestry-cli commands that replay the case: tap's, then one for each
// comparison it failed. What the CLI cannot name (a model built here, a
// changed profile, the pinned input) is written into `directory`.
std::string replayCommands(const SearchCase &c, const CaseResult &result, const RunOptions &options,
                           const std::string &directory, const std::string &cli = "tapestry-cli");

} // namespace tapestry::searchdiff
