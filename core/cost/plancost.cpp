#include "cost/plancost.h"

#include <algorithm>

namespace tapestry::cost {

std::string_view toString(Phase phase)
{
    switch (phase) {
    case Phase::Forward:
        return "forward";
    case Phase::Backward:
        return "backward";
    case Phase::Optimizer:
        return "optimizer";
    }
    return "?";
}

std::optional<Phase> phaseFromString(std::string_view s)
{
    for (auto p : {Phase::Forward, Phase::Backward, Phase::Optimizer})
        if (toString(p) == s)
            return p;
    return std::nullopt;
}

CostTotals &CostTotals::operator+=(const CostTotals &o)
{
    flops += o.flops;
    compute += o.compute;
    comm += o.comm;
    commBytes += o.commBytes;
    collectives += o.collectives;
    return *this;
}

std::vector<std::pair<std::string, CostTotals>> PlanCost::topOps(std::size_t n) const
{
    std::vector<std::pair<std::string, CostTotals>> ops(byOp.begin(), byOp.end());
    std::stable_sort(ops.begin(), ops.end(),
                     [](const auto &a, const auto &b) { return a.second.total() > b.second.total(); });
    if (ops.size() > n)
        ops.resize(n);
    return ops;
}

std::map<std::string, CostTotals> aggregate(const std::map<std::string, CostTotals> &byOp,
                                            const std::map<std::string, std::string> &groupOf,
                                            const std::string &ungrouped)
{
    std::map<std::string, CostTotals> groups;
    for (const auto &[op, totals] : byOp) {
        auto it = groupOf.find(op);
        if (it != groupOf.end())
            groups[it->second] += totals;
        else if (!ungrouped.empty())
            groups[ungrouped] += totals;
    }
    return groups;
}

} // namespace tapestry::cost
