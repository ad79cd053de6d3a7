#pragma once

#include "sharding/collective.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::cost {

enum class Phase { Forward, Backward, Optimizer };
std::string_view toString(Phase phase);  // "forward", "backward", "optimizer"
std::optional<Phase> phaseFromString(std::string_view s);

// One collective of a training step, costed.
struct CollectiveCost {
    std::string op;      // the op it is charged to
    std::string tensor;  // the tensor (or its gradient) it moves
    sharding::CollectiveKind kind = sharding::CollectiveKind::AllReduce;
    std::string axis;
    Phase phase = Phase::Forward;
    std::int64_t bytes = 0;      // the collective's size (nccl-tests convention)
    std::int64_t wireBytes = 0;  // bytes each device sends: bytes x bus factor
    double time = 0;             // s
    std::string reason;
    friend bool operator==(const CollectiveCost &, const CollectiveCost &) = default;
};

// Time and traffic of one part of the step (an op, a phase, a group of ops).
struct CostTotals {
    double flops = 0;     // per device
    double compute = 0;   // s
    double comm = 0;      // s
    std::int64_t commBytes = 0;  // wire bytes per device
    int collectives = 0;
    double total() const { return compute + comm; }
    CostTotals &operator+=(const CostTotals &o);
    friend bool operator==(const CostTotals &, const CostTotals &) = default;
};

struct MemoryCost {
    std::int64_t parameters = 0;
    std::int64_t gradients = 0;
    std::int64_t optimizer = 0;
    std::int64_t activations = 0;
    std::string activationModel;  // "korthikanti" (transformer layers) or "saved-tensors"
    std::int64_t total() const { return parameters + gradients + optimizer + activations; }
    friend bool operator==(const MemoryCost &, const MemoryCost &) = default;
};

// A plan's cost for one training step on one device, with breakdowns by op,
// by collective kind and by phase. Ops and kinds in ordered maps, so printing
// is deterministic.
struct PlanCost {
    double stepTime = 0;
    double compute = 0;
    double comm = 0;
    std::int64_t commBytes = 0;
    MemoryCost memory;
    std::int64_t memoryCapacity = 0;
    bool fitsMemory = true;
    std::vector<CollectiveCost> collectives;  // in step order: forward, backward, optimizer
    std::map<std::string, CostTotals> byOp;
    std::map<std::string, CostTotals> byCollective;
    std::map<std::string, CostTotals> byPhase;
    std::vector<std::string> warnings;
    friend bool operator==(const PlanCost &, const PlanCost &) = default;

    // The n ops with the largest total time, largest first (ties by name).
    std::vector<std::pair<std::string, CostTotals>> topOps(std::size_t n) const;
};

// Sums a per-op breakdown into groups (coarse nodes, subgraph classes):
// `groupOf` maps op names to group names; ops it does not name go to
// `ungrouped` (or are left out when it is empty).
std::map<std::string, CostTotals> aggregate(const std::map<std::string, CostTotals> &byOp,
                                            const std::map<std::string, std::string> &groupOf,
                                            const std::string &ungrouped = "(other)");

} // namespace tapestry::cost
