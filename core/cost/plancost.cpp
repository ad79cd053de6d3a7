#include "cost/plancost.h"

#include "cost/costoptions.h"

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

std::string_view toString(Recompute r)
{
    switch (r) {
    case Recompute::None:
        return "none";
    case Recompute::Selective:
        return "selective";
    case Recompute::Full:
        return "full";
    }
    return "?";
}

std::optional<Recompute> recomputeFromString(std::string_view s)
{
    for (auto r : {Recompute::None, Recompute::Selective, Recompute::Full})
        if (toString(r) == s)
            return r;
    return std::nullopt;
}

Recompute recomputeOf(const Techniques &t, std::string_view kind)
{
    if (!kind.empty())
        if (auto it = t.recomputeLayers.find(std::string(kind)); it != t.recomputeLayers.end())
            return it->second;
    return t.recompute;
}

std::string describe(const Techniques &t)
{
    std::string s;
    auto add = [&](const std::string &part) { s += (s.empty() ? "" : ", ") + part; };
    if (t.flashAttention)
        add("flash attention");
    if (t.recompute != Recompute::None)
        add(std::string(toString(t.recompute)) + " recomputation" + (t.recomputeLayers.empty() ? "" : " elsewhere"));
    for (const auto &[kind, mode] : t.recomputeLayers)
        if (mode != t.recompute)
            add(std::string(toString(mode)) + " recomputation of " + kind);
    if (t.zeroStage > 0) {
        std::string zero = "ZeRO-" + std::to_string(t.zeroStage);
        if (t.zeroAxes) {
            std::string over;
            for (const auto &a : *t.zeroAxes)
                over += (over.empty() ? "" : ", ") + a;
            zero += over.empty() ? " (no data axis to shard over)" : " over " + over;
        }
        add(zero);
    }
    if (t.microBatches > 1)
        add(std::to_string(t.microBatches) + " micro-batches");
    if (t.offloadOptimizer)
        add("optimizer offloaded to the host");
    return s.empty() ? "none" : s;
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
    // The entries ranked where they lie, each with its place in name order
    // to keep ties in it; only the n first are copied.
    std::vector<std::pair<std::map<std::string, CostTotals>::const_iterator, std::size_t>> ranked;
    ranked.reserve(byOp.size());
    for (auto it = byOp.begin(); it != byOp.end(); ++it)
        ranked.emplace_back(it, ranked.size());
    const auto first = ranked.begin(), middle = first + static_cast<std::ptrdiff_t>(std::min(n, ranked.size()));
    std::partial_sort(first, middle, ranked.end(), [](const auto &a, const auto &b) {
        const double x = a.first->second.total(), y = b.first->second.total();
        return x != y ? x > y : a.second < b.second;
    });
    std::vector<std::pair<std::string, CostTotals>> ops;
    for (auto it = first; it != middle; ++it)
        ops.emplace_back(*it->first);
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
