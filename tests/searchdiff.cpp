#include "searchdiff.h"

#include "io/files.h"
#include "io/jsonmodel.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/planjson.h"
#include "plan/axisroles.h"
#include "search/pinnedplan.h"
#include "search/axisconstraint.h"
#include "search/exactsearch.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

namespace tapestry::searchdiff {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
}

const std::vector<std::string> kReferences{"megatron", "megatron-sp", "dp", "replicate"};

// The reference plans that apply to the case on `mesh`.
std::vector<search::NamedPlan> references(const ir::Graph &graph, const SearchCase &c, const sharding::Mesh &mesh)
{
    cost::CostOptions options;
    options.overlap = c.overlap;
    options.techniques = c.techniques;
    return search::applicableReferencePlans(graph, c.source, mesh, options);
}

// Whether a reference plan keeps to the axes' roles: the search, held to
// them, is measured against the plans that do (megatron on an axis named
// data does not).
bool keepsToRoles(const plan::Plan &p, const ir::Graph &graph, const sharding::Mesh &mesh)
{
    std::vector<sharding::ShardingSpec> specs(graph.tensorCount(), sharding::ShardingSpec::replicated(mesh.rank()));
    for (const auto &[name, entry] : p.specs)
        if (auto t = graph.findTensor(name))
            specs[t->index()] = entry.spec;
    const auto carries = plan::axisCarries(graph, mesh, specs);
    for (std::size_t a = 0; a < carries.size() && a < mesh.axes.size(); ++a)
        if (!plan::carriesMatchName(carries[a], mesh.axes[a].name))
            return false;
    return true;
}

std::string figures(const cost::PlanCost &cost)
{
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.6g s, %.4g MiB%s", cost.stepTime,
                  static_cast<double>(cost.memory.total()) / (1 << 20),
                  cost::Objective::of(cost).fits() ? "" : " (does not fit)");
    return buf;
}

Comparison compare(Check check, const std::string &against, const cost::PlanCost &tap, const cost::PlanCost &other,
                   double relative)
{
    Comparison x;
    x.check = check;
    x.against = against;
    x.tap = cost::Objective::of(tap);
    x.other = cost::Objective::of(other);
    x.gap = gapOf(tap, other);
    x.passed = noWorse(x.tap, x.other, relative);
    x.detail = "tap " + figures(tap) + " vs " + against + " " + figures(other) + ": " + x.gap.toString();
    return x;
}

std::string shellQuoted(const std::string &s)
{
    return "'" + s + "'";
}

} // namespace

std::string_view toString(Check check)
{
    switch (check) {
    case Check::Exact:
        return "tap/exact";
    case Check::Reference:
        return "tap/reference";
    case Check::LeastCommunication:
        return "tap/least-communication";
    case Check::KeepPins:
        return "keep-pins";
    }
    return "?";
}

std::string Gap::toString() const
{
    char buf[48];
    std::snprintf(buf, sizeof buf, "%+.3f%% %s", 100 * value, memory ? "memory" : "step time");
    return buf;
}

Gap gapOf(const cost::PlanCost &tap, const cost::PlanCost &other)
{
    const auto a = cost::Objective::of(tap), b = cost::Objective::of(other);
    if (a.overshoot != b.overshoot) {
        const double t = static_cast<double>(tap.memory.total()), o = static_cast<double>(other.memory.total());
        return {true, (t - o) / o};
    }
    return {false, (tap.stepTime - other.stepTime) / other.stepTime};
}

bool worseGap(const Gap &a, const Gap &b)
{
    const bool aMemory = a.memory && a.value > 0, bMemory = b.memory && b.value > 0;
    if (aMemory != bMemory)
        return aMemory;
    return a.value > b.value;
}

bool CaseResult::passed() const
{
    return errors.empty() &&
           std::all_of(comparisons.begin(), comparisons.end(), [](const Comparison &x) { return x.passed || !x.binding; });
}

std::string CaseResult::failures() const
{
    std::string s = "  device memory: " + std::to_string(memoryBytes) + " bytes\n";
    if (!pins.empty()) {
        s += "  pins (from " + pinBase + "):";
        for (const auto &[name, spec] : pins)
            s += " " + name + "=" + spec.toPlacements();
        s += "\n";
    }
    for (const auto &e : errors)
        s += "  error: " + e + "\n";
    for (const auto &x : comparisons)
        if (!x.passed && x.binding)
            s += "  " + std::string(toString(x.check)) + ": " + x.detail + "\n";
    return s;
}

CaseResult runCase(const SearchCase &c, const RunOptions &options)
{
    const auto start = Clock::now();
    CaseResult r;
    const ir::Graph &g = c.graph;
    const auto coarse = passes::Coarsen().run(g);
    const auto classes = passes::Prune().run(g, coarse);
    search::SearchOptions searchOptions;
    searchOptions.cost.overlap = c.overlap;
    searchOptions.cost.techniques = c.techniques;
    searchOptions.timeLimitSeconds = options.exactTimeLimitSeconds;
    searchOptions.axisRoles = rolesOf(c.mesh);
    auto tap = [&](const sharding::Mesh &mesh, const search::SearchOptions &o) {
        const auto t = Clock::now();
        auto result = search::tapSearch(g, classes, c.source, mesh, o);
        r.tapSeconds += since(t);
        return result;
    };

    sharding::Mesh mesh = c.mesh;
    try {
        if (c.memory != MemoryLimit::Loose) {
            // The least memory a plan needs, as far as tap's least-memory
            // plan and the reference plans tell, and the replicated plan's.
            sharding::Mesh probe = c.mesh;
            probe.device.memoryBytes = 1;
            std::int64_t least = tap(probe, searchOptions).plan.cost.memory.total(), replicated = least;
            for (const auto &[name, p] : references(g, c, probe)) {
                least = std::min(least, p.cost.memory.total());
                if (name == "replicate")
                    replicated = p.cost.memory.total();
            }
            replicated = std::max(replicated, least);
            mesh.device.memoryBytes =
                c.memory == MemoryLimit::Tight
                    ? least + static_cast<std::int64_t>(c.memoryFraction * static_cast<double>(replicated - least))
                    : std::max<std::int64_t>(1, static_cast<std::int64_t>(c.memoryFraction * static_cast<double>(least)));
        }
        r.memoryBytes = mesh.device.memoryBytes;

        const auto found = tap(mesh, searchOptions);

        std::optional<search::SearchResult> exact;
        const auto exactStart = Clock::now();
        try {
            exact = search::exactSearch(g, coarse, c.source, mesh, searchOptions);
            if (!exact->stats.optimal)
                r.exactProblem = "exact: the time limit stopped CBC before it proved the plan optimal";
        } catch (const TapestryError &e) {
            r.exactProblem = e.what();
        }
        r.exactSeconds = since(exactStart);
        if (exact) {
            auto x = compare(Check::Exact, "exact", found.plan.cost, exact->plan.cost, options.exactTolerance);
            x.binding = exact->stats.optimal;
            r.comparisons.push_back(std::move(x));
        }

        std::map<std::string, plan::Plan> applied;
        for (auto &[name, p] : references(g, c, mesh)) {
            if (search::anyRole(searchOptions.axisRoles) && !keepsToRoles(p, g, mesh))
                continue;
            r.comparisons.push_back(compare(Check::Reference, name, found.plan.cost, p.cost, 1e-9));
            applied.emplace(name, std::move(p));
        }
        for (const auto &name : kReferences)
            if (!applied.count(name))
                r.refused.push_back(name);
        r.comparisons.push_back(compare(Check::LeastCommunication, "least-communication", found.plan.cost,
                                        found.leastCommunication.cost, 1e-9));

        if (c.pins != PinKind::None) {
            const plan::Plan *base = &found.plan;
            r.pinBase = "tap";
            if (c.pinBase == "exact" && exact) {
                base = &exact->plan;
                r.pinBase = "exact";
            } else if (auto it = applied.find(c.pinBase); it != applied.end()) {
                base = &it->second;
                r.pinBase = c.pinBase;
            }
            plan::Plan input = *base;
            for (const auto &pin : c.pinned) {
                const auto spec = pin.spec ? *pin.spec : base->specs.at(pin.tensor).spec;
                r.pins[pin.tensor] = spec;
                input.specs[pin.tensor] = {spec, plan::SpecSource::Override};
            }
            plan::recostPlan(input, g, c.source);
            r.pinnedInput = input;
            auto pinnedOptions = searchOptions;
            pinnedOptions.pinned = r.pins;
            try {
                // As `plan --keep-pins` runs it: the pinned input is kept
                // where the search finds nothing better around the pins.
                auto kept = tap(mesh, pinnedOptions);
                r.pinnedInputKept = search::keepPinnedPlanIfBetter(kept, input, g, "the pinned input");
                for (const auto &[name, spec] : r.pins) {
                    const auto &entry = kept.plan.specs.at(name);
                    if (entry.spec != spec || entry.source != plan::SpecSource::Override)
                        r.errors.push_back("keep-pins: " + name + " pinned to " + spec.toPlacements() + ", tap gave " +
                                           entry.spec.toPlacements() + " (" +
                                           std::string(plan::toString(entry.source)) + ")");
                }
                r.comparisons.push_back(compare(Check::KeepPins, "pinned input from " + r.pinBase, kept.plan.cost,
                                                input.cost, 1e-9));
            } catch (const TapestryError &e) {
                r.errors.push_back(std::string("keep-pins: tap refused legal pins: ") + e.what());
            }
        }
    } catch (const TapestryError &e) {
        r.errors.push_back(std::string("tap: ") + e.what());
    }
    r.seconds = since(start);
    return r;
}

std::string replayCommands(const SearchCase &c, const CaseResult &result, const RunOptions &options,
                           const std::string &directory, const std::string &cli)
{
    namespace fs = std::filesystem;
    fs::create_directories(directory);
    std::string model = c.source;
    if (c.built) {
        model = (fs::path(directory) / "model.json").string();
        io::writeOutputFile(model, io::writeModelJson(c.graph));
    }
    std::string profile = c.profile.name;
    if (c.customProfile) {
        profile = (fs::path(directory) / "profile.json").string();
        io::writeOutputFile(profile, sharding::writeMeshProfileJson(c.profile));
    }
    std::string base = cli + " plan " + shellQuoted(model) + " --mesh " + shellQuoted(sharding::meshText(c.mesh)) +
                       " --mesh-profile " + shellQuoted(profile);
    if (result.memoryBytes != c.profile.device.memoryBytes) {
        // Exact in a double (bytes over a power of two), so --memory-gib
        // gives back the same byte count.
        char gib[40];
        std::snprintf(gib, sizeof gib, "%.17g", static_cast<double>(result.memoryBytes) / (1024.0 * 1024.0 * 1024.0));
        base += " --memory-gib " + std::string(gib);
    }
    if (c.overlap)
        base += " --overlap";
    // The case's techniques, fixed: plan would otherwise choose them.
    const auto &t = c.techniques;
    base += std::string(" --flash-attention ") + (t.flashAttention ? "on" : "off") + " --recompute " +
            std::string(cost::toString(t.recompute)) + " --zero " + std::to_string(t.zeroStage) + " --micro-batches " +
            std::to_string(t.microBatches) + " --offload-optimizer " + (t.offloadOptimizer ? "on" : "off");

    std::string pinned;
    if (result.pinnedInput) {
        pinned = (fs::path(directory) / "pinned.json").string();
        plan::writePlanFile(pinned, *result.pinnedInput);
    }
    std::string s = base + " --search tap\n";
    bool exactShown = false, pinsShown = false;
    for (const auto &x : result.comparisons) {
        if (x.passed)
            continue;
        if (x.check == Check::Exact && !exactShown) {
            char limit[24];
            std::snprintf(limit, sizeof limit, "%g", options.exactTimeLimitSeconds);
            s += base + " --search exact --time-limit " + limit + "\n";
            exactShown = true;
        } else if (x.check == Check::Reference) {
            s += base + " --search " + (x.against == "megatron-sp" ? "megatron --sequence-parallel" : x.against) + "\n";
        } else if (x.check == Check::KeepPins && !pinsShown) {
            s += base + " --search tap --keep-pins " + shellQuoted(pinned) + "\n";
            s += cli + " cost " + shellQuoted(model) + " " + shellQuoted(pinned) + "   # the pinned input as it is\n";
            pinsShown = true;
        }
    }
    if (!pinsShown && result.pinnedInput)
        s += base + " --search tap --keep-pins " + shellQuoted(pinned) + "\n";
    return s;
}

} // namespace tapestry::searchdiff
