#include "search/techniquesearch.h"

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "cost/costmodel.h"
#include "cost/objective.h"
#include "cost/plancoster.h"
#include "ir/error.h"
#include "sharding/batchflow.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <thread>

namespace tapestry::search {

namespace {

void simplify(plan::Plan &plan, const ir::Graph &graph, const TechniqueChoices &choices,
              const std::vector<sharding::ShardingSpec> &specs, cost::PlanCoster *given = nullptr);

// Bytes in the unit the CLI's reports use for their size.
std::string gib(double bytes)
{
    const double a = std::abs(bytes);
    if (a >= 1024.0 * 1024.0 * 1024.0)
        return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    if (a >= 1024.0 * 1024.0)
        return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
    if (a >= 1024.0)
        return fmt::format("{:.2f} KiB", bytes / 1024.0);
    return fmt::format("{:.0f} B", bytes);
}

std::string duration(double seconds)
{
    const double a = std::abs(seconds);
    if (a >= 1)
        return fmt::format("{:.3f} s", seconds);
    if (a >= 1e-3)
        return fmt::format("{:.3f} ms", seconds * 1e3);
    return fmt::format("{:.3f} us", seconds * 1e6);
}

cost::Objective objectiveOf(const plan::Plan &p)
{
    return cost::Objective::of(p.cost);
}

} // namespace

std::int64_t modelBatch(const ir::Graph &graph)
{
    if (const auto flow = sharding::batchByDataFlow(graph))
        return flow->size;
    for (auto t : graph.tensorsWithRole(ir::Role::Input)) {
        const auto &shape = graph.tensor(t).shape;
        if (!shape.empty() && shape[0] > 0)
            return shape[0];
    }
    return 0;
}

std::optional<std::string> microBatchProblem(const ir::Graph &graph, const std::vector<sharding::ShardingSpec> &specs,
                                             const sharding::Mesh &mesh, int microBatches)
{
    if (microBatches <= 1)
        return std::nullopt;
    std::int64_t batch = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Input))
        if (const auto &shape = graph.tensor(t).shape; !shape.empty() && shape[0] > 0) {
            batch = shape[0];
            break;
        }
    if (batch <= 0 || batch % microBatches != 0)
        return std::to_string(microBatches) + " micro-batches do not divide the model's batch of " +
               std::to_string(batch);
    for (std::size_t i = 0; i < graph.tensorCount() && i < specs.size(); ++i) {
        const ir::Tensor &t = graph.tensors()[i];
        if (t.role == ir::Role::Parameter || t.shape.empty() || t.shape[0] != batch)
            continue;
        ir::Shape part = t.shape;
        part[0] = batch / microBatches;
        if (auto problem = specs[i].problem(part, mesh))
            return "tensor '" + t.name + "' in a micro-batch: " + *problem;
    }
    return std::nullopt;
}

bool hasAttentionCore(const ir::Graph &graph)
{
    const auto roles = cost::recomputeRoles(graph);
    return std::any_of(roles.begin(), roles.end(), [](std::uint8_t r) { return (r & cost::kScore) != 0; });
}

std::vector<cost::Techniques> techniqueCandidates(const TechniqueChoices &choices, bool hasAttention,
                                                  std::int64_t batch, const std::vector<std::string> &kinds)
{
    const bool flash = choices.flashAttention.value_or(hasAttention);
    // The recomputation: plan-wide, or by kind of layer.
    using Recomputation = std::pair<cost::Recompute, std::map<std::string, cost::Recompute>>;
    std::vector<Recomputation> recomputes;
    if (choices.recompute) {
        recomputes = {{*choices.recompute, choices.recomputeLayers}};
    } else if (!hasAttention) {
        recomputes = {{cost::Recompute::None, {}}};
    } else {
        recomputes = {{cost::Recompute::None, {}}};
        if (!flash)
            recomputes.push_back({cost::Recompute::Selective, {}});
        // Full recomputation of some kinds of layer only (each a class
        // searched once, TAP's unit): every proper subset of up to three.
        if (kinds.size() >= 2 && kinds.size() <= 3)
            for (std::size_t subset = 1; subset + 1 < (std::size_t{1} << kinds.size()); ++subset) {
                std::map<std::string, cost::Recompute> layers;
                for (std::size_t k = 0; k < kinds.size(); ++k)
                    if (subset & (std::size_t{1} << k))
                        layers[kinds[k]] = cost::Recompute::Full;
                recomputes.push_back({cost::Recompute::None, layers});
            }
        recomputes.push_back({cost::Recompute::Full, {}});
    }
    std::vector<int> stages = choices.zeroStage ? std::vector<int>{*choices.zeroStage} : std::vector<int>{1, 2, 3};
    std::vector<int> micro;
    if (choices.microBatches) {
        micro = {*choices.microBatches};
    } else {
        for (std::int64_t m = 1; m <= 64 && m <= std::max<std::int64_t>(batch, 1); m *= 2)
            if (batch <= 1 ? m == 1 : batch % m == 0)
                micro.push_back(static_cast<int>(m));
    }
    std::vector<cost::Techniques> out;
    for (const auto &[r, layers] : recomputes)
        for (int stage : stages)
            for (std::size_t i = 0; i < micro.size(); ++i) {
                // ZeRO 1's micro-batches cost nothing: one, or the most of them.
                if (stage == 1 && !choices.microBatches && i > 0 && i + 1 < micro.size())
                    continue;
                cost::Techniques t;
                t.flashAttention = flash;
                t.recompute = r;
                t.recomputeLayers = layers;
                t.zeroStage = stage;
                t.microBatches = micro[i];
                t.offloadOptimizer = choices.offloadOptimizer.value_or(false);
                t.zeroAxes = choices.zeroAxes;
                out.push_back(t);
            }
    // The host's memory for the optimizer state: slower than any setting
    // above (the update runs on the host), so tried last. Per
    // recomputation: ZeRO 1 with the most micro-batches (free there), and
    // ZeRO 3 with one; the least-memory setting last of all.
    if (!choices.offloadOptimizer && !out.empty()) {
        const cost::Techniques last = out.back();
        std::vector<cost::Techniques> offloaded;
        auto add = [&](cost::Techniques t) {
            t.offloadOptimizer = true;
            if (std::find(offloaded.begin(), offloaded.end(), t) == offloaded.end())
                offloaded.push_back(t);
        };
        for (const auto &[r, layers] : recomputes)
            for (int stage : {1, 3}) {
                cost::Techniques t = last;
                t.recompute = r;
                t.recomputeLayers = layers;
                t.zeroStage = choices.zeroStage.value_or(stage);
                t.microBatches = choices.microBatches.value_or(stage == 1 ? micro.back() : micro.front());
                add(t);
            }
        add(last);
        // The least memory last, as every other setting is no smaller.
        const cost::Techniques least = offloaded.back();
        offloaded.erase(std::remove(offloaded.begin(), offloaded.end(), least), offloaded.end());
        offloaded.push_back(least);
        out.insert(out.end(), offloaded.begin(), offloaded.end());
    }
    return out;
}

bool noFasterThan(const cost::Techniques &a, const cost::Techniques &b)
{
    auto rank = [](cost::Recompute r) { return r == cost::Recompute::None ? 0 : r == cost::Recompute::Selective ? 1 : 2; };
    if (a.flashAttention != b.flashAttention || rank(a.recompute) > rank(b.recompute) ||
        (a.offloadOptimizer && !b.offloadOptimizer))
        return false;
    // Every kind of layer recomputed no more in a than in b.
    for (const auto *layers : {&a.recomputeLayers, &b.recomputeLayers})
        for (const auto &[kind, mode] : *layers)
            if (rank(cost::recomputeOf(a, kind)) > rank(cost::recomputeOf(b, kind)))
                return false;
    // ZeRO's time beyond stage 0's collectives: none for stage 1 (and for
    // stage 2 with one micro-batch), growing with the micro-batches for
    // stages 2 and 3; stage 0 updates whole parameters, more than any stage.
    const int za = a.zeroStage, zb = b.zeroStage, ma = a.microBatches, mb = b.microBatches;
    if (za == 0)
        return zb == 0;
    if (zb == 0)
        return false;
    if (za == 1 || (za == 2 && ma <= 1))
        return true;
    return zb >= za && mb >= ma;
}

namespace {

// The setting, after the first, under which `specs` fit and run in the least
// step time, when that time is `fastest`: the first setting's fastest plan,
// whose step time no plan of any setting undercuts. With the specs' cost
// under it (totals).
std::optional<std::pair<std::size_t, cost::PlanCost>> settingAtBound(const ir::Graph &graph,
                                                                     const sharding::Mesh &mesh,
                                                                     const cost::CostOptions &options,
                                                                     const std::vector<cost::Techniques> &candidates,
                                                                     const std::vector<sharding::ShardingSpec> &specs,
                                                                     double fastest)
{
    cost::PlanCoster coster(graph, mesh, options);
    std::optional<std::pair<std::size_t, cost::PlanCost>> pick;
    for (std::size_t i = 1; i < candidates.size(); ++i) {
        // The host holds the optimizer only where nothing fits on the device.
        if (candidates[i].offloadOptimizer || microBatchProblem(graph, specs, mesh, candidates[i].microBatches))
            continue;
        cost::CostOptions o = options;
        o.techniques = candidates[i];
        coster.setOptions(o);
        cost::PlanCost c = coster.totals(specs);
        const auto objective = cost::Objective::of(c);
        if (objective.fits() && (!pick || objective < cost::Objective::of(pick->second)))
            pick = {i, std::move(c)};
    }
    if (pick && pick->second.stepTime <= fastest * (1 + 1e-9))
        return pick;
    return std::nullopt;
}

} // namespace

SearchResult searchTechniques(const std::function<SearchResult(const sharding::Mesh &, const SearchOptions &)> &search,
                              const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
                              const SearchOptions &options, const TechniqueChoices &choices)
{
    const auto start = std::chrono::steady_clock::now();
    const auto candidates =
        techniqueCandidates(choices, hasAttentionCore(graph), modelBatch(graph), cost::attentionLayerKinds(graph));
    SearchOptions first = options;
    first.cost.techniques = candidates.front();
    if (mesh.device.memoryBytes <= 0 || candidates.size() == 1) {
        SearchResult r = search(mesh, first);
        simplifyTechniques(r.plan, graph, choices);
        r.stats.techniquesTried = 1;
        return r;
    }
    std::optional<SearchResult> best;
    std::size_t tried = 0, evaluated = 0;
    // Progress over every setting: one search at a time reports its own
    // part (the first of a wave), in thousandths of a setting.
    const std::size_t units = candidates.size() * 1000;
    std::atomic<std::size_t> doneUnits{0};
    // Every search returns ranked plans; the one kept is made whole.
    auto reporting = [&](SearchOptions o, bool reports) {
        o.rankedPlans = true;
        o.progress = nullptr;
        if (reports && options.progress)
            o.progress = [&options, &doneUnits, units](std::size_t done, std::size_t total) {
                const std::size_t part = total > 0 ? std::min<std::size_t>(999, done * 1000 / total) : 0;
                options.progress(std::min(units, doneUnits.load() + part), units);
            };
        return o;
    };
    auto finished = [&] {
        doneUnits += 1000;
        if (options.progress)
            options.progress(std::min(units, doneUnits.load()), units);
        if (options.cancelled && options.cancelled())
            throw TapestryError(Error{modelSource, {}, "tap: cancelled"});
    };
    // A plan whose specs its micro-batches cannot split (a batch of 4 in 2
    // micro-batches over 4 devices) runs nowhere: it is kept only while
    // there is no other, and any other takes its place, even one that does
    // not fit (where none fits, the least overshoot could otherwise be
    // such a plan, and the command would refuse it rather than show one).
    auto unsplittable = [&](const SearchResult &r) {
        return !r.planSpecs.empty() &&
               microBatchProblem(graph, r.planSpecs, mesh, r.plan.costOptions.techniques.microBatches).has_value();
    };
    bool bestRuns = false;
    auto consider = [&](SearchResult r) {
        const bool runs = !unsplittable(r);
        if (best && runs != bestRuns) {
            if (runs) {
                best = std::move(r);
                bestRuns = true;
            }
            return;
        }
        if (!best || objectiveOf(r.plan) < objectiveOf(best->plan)) {
            best = std::move(r);
            bestRuns = runs;
        }
    };
    // The best plan that fits and runs: what bounds the settings left.
    auto fitting = [&]() -> const SearchResult * {
        return best && bestRuns && best->plan.cost.fitsMemory ? &*best : nullptr;
    };
    // A setting's search without a memory limit, its plans costed on the
    // real mesh: no plan of the setting, nor of any setting no faster than
    // it, is faster than its plan; when that plan fits, it is the best of
    // all those settings.
    auto unlimited = [&](const cost::Techniques &t) {
        sharding::Mesh free = mesh;
        free.device.memoryBytes = 0;
        SearchOptions o = reporting(options, true);
        o.cost.techniques = t;
        SearchResult r = search(free, o);
        finished();
        ++tried;
        evaluated += r.stats.plansEvaluated;
        // The free mesh differs from the real one in its device's memory
        // alone, which a plan's cost reads only as its capacity (what fits):
        // costed on the real mesh, the plans keep every figure but those two.
        for (auto *p : {&r.plan, &r.leastCommunication}) {
            p->mesh = mesh;
            p->cost.memoryCapacity = mesh.device.memoryBytes;
            p->cost.fitsMemory = p->cost.memory.total() <= p->cost.memoryCapacity;
        }
        return r;
    };
    // Lower bounds on the step time of the settings no faster than each
    // probed setting, and the settings whose best plan is known.
    std::vector<std::pair<cost::Techniques, double>> bounds;
    std::vector<cost::Techniques> settled;
    std::vector<bool> probed(candidates.size(), false);
    std::optional<SearchResult> firstProbe;  // the first setting's, when its plans do not both fit
    auto probe = [&](std::size_t i) {
        probed[i] = true;
        SearchResult r = unlimited(candidates[i]);
        bounds.push_back({candidates[i], r.plan.cost.stepTime});
        if (r.plan.cost.fitsMemory && r.leastCommunication.cost.fitsMemory && !unsplittable(r)) {
            settled.push_back(candidates[i]);
            consider(std::move(r));
        } else if (i == 0) {
            firstProbe = std::move(r);
        }
    };
    // The first setting bounds every other (each adds time to every plan):
    // when its fastest plan fits, it is the answer.
    probe(0);
    const double fastest = bounds.front().second;
    if (!best && firstProbe && !firstProbe->planSpecs.empty())
        if (auto setting = settingAtBound(graph, mesh, options.cost, candidates, firstProbe->planSpecs, fastest)) {
            // That plan, costed under another setting, fits and runs there
            // in the first setting's step time, which no plan of any
            // setting undercuts: the setting holds the best plan of all,
            // and its own search (with the memory limit, for the plan that
            // communicates least among those that fit) is the only one left.
            auto &[index, probeCost] = *setting;
            SearchOptions o = reporting(options, true);
            o.cost.techniques = candidates[index];
            SearchResult r = search(mesh, o);
            finished();
            ++tried;
            evaluated += r.stats.plansEvaluated;
            // Tap's search under a memory limit may miss the plan that fits
            // (a heuristic across classes): the probe's plan is one.
            if (cost::Objective::of(probeCost) < objectiveOf(r.plan)) {
                r.plan = firstProbe->plan;
                r.plan.costOptions = o.cost;
                r.plan.cost = std::move(probeCost);
                r.planSpecs = firstProbe->planSpecs;
                r.stats.copiesApart = firstProbe->stats.copiesApart;
            }
            settled.push_back(candidates[index]);
            consider(std::move(r));
        }
    bool noneFits = false;
    if (!best) {
        // The last setting keeps the least memory of all for every plan
        // (the most recomputation, the highest ZeRO stage, the most
        // micro-batches): when its plan does not fit, no plan of any
        // setting fits, and its plan needs the least memory.
        SearchOptions o = reporting(options, true);
        o.cost.techniques = candidates.back();
        SearchResult r = search(mesh, o);
        finished();
        ++tried;
        evaluated += r.stats.plansEvaluated;
        noneFits = !r.plan.cost.fitsMemory;
        consider(std::move(r));
        // Its plan may split the batch further than its micro-batches can
        // (a batch of 8 over 8 devices in 8 micro-batches): then the
        // settings before it, the least memory first, until one's plan runs.
        for (std::size_t i = candidates.size() - 1; noneFits && i-- > 0 && unsplittable(*best);) {
            SearchOptions again = reporting(options, false);
            again.cost.techniques = candidates[i];
            SearchResult other = search(mesh, again);
            ++tried;
            evaluated += other.stats.plansEvaluated;
            if (other.plan.cost.fitsMemory)
                noneFits = false;  // the limit was the micro-batches': the waves below go on
            consider(std::move(other));
        }
    }
    auto done = [&] {
        return noneFits || (fitting() && fitting()->plan.cost.stepTime <= fastest * (1 + 1e-9));
    };
    // The least model-state memory any plan of a setting needs: every
    // parameter split over every device, with the bytes the setting keeps
    // on the device. A setting over capacity by this alone cannot fit.
    double parameters = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Parameter))
        parameters += static_cast<double>(graph.tensor(t).elementCount());
    parameters /= static_cast<double>(std::max<std::int64_t>(1, mesh.deviceCount()));
    auto cannotFit = [&](const cost::Techniques &t) {
        const auto &o = options.cost;
        const double bytes = o.parameterBytes + o.gradientBytes + (t.offloadOptimizer ? 0 : o.optimizerBytes);
        return parameters * bytes > static_cast<double>(mesh.device.memoryBytes);
    };
    // Not worth a search: no faster than a setting whose best plan is known
    // (settled), or than one whose bound the best plan that fits meets; or
    // it cannot fit (the least-memory setting, searched first, answers for
    // the plans that do not).
    auto skipped = [&](const cost::Techniques &t) {
        if (cannotFit(t))
            return true;
        // The optimizer goes to the host only where nothing fits on the
        // device (--offload-optimizer auto), however the host's update
        // compares: on CPU ranks the host is the device.
        if (t.offloadOptimizer && fitting())
            return true;
        if (std::any_of(settled.begin(), settled.end(), [&](const cost::Techniques &s) { return noFasterThan(s, t); }))
            return true;
        if (!fitting())
            return false;
        const double bar = fitting()->plan.cost.stepTime * (1 - 1e-9);
        return std::any_of(bounds.begin(), bounds.end(),
                           [&](const auto &b) { return b.second >= bar && noFasterThan(b.first, t); });
    };
    // Candidates in waves, one search per hardware thread, kept in order:
    // the plan chosen does not depend on the threads. Once a plan fits,
    // a setting that bounds two or more of those left is probed first.
    const std::size_t threads =
        options.threads > 0 ? options.threads : std::max<std::size_t>(1, std::thread::hardware_concurrency());
    const std::size_t last = candidates.size() - 1;  // searched above
    std::size_t next = 1;
    while (next < last && !done()) {
        std::vector<std::size_t> wave;
        for (; next < last && wave.size() < threads && !done(); ++next) {
            if (skipped(candidates[next]))
                continue;
            if (fitting())
                // The tightest bound not yet known that covers this setting
                // and another left: the latest such setting.
                for (std::size_t p = next; p >= 1; --p) {
                    if (probed[p] || !noFasterThan(candidates[p], candidates[next]))
                        continue;
                    if (noFasterThan(candidates[p], candidates[0])) {
                        probed[p] = true;  // as fast as the first: its bound is known
                        continue;
                    }
                    std::size_t covered = 0;
                    for (std::size_t j = next; j < last; ++j)
                        covered += !skipped(candidates[j]) && noFasterThan(candidates[p], candidates[j]) ? 1 : 0;
                    if (covered >= 2) {
                        probe(p);
                        break;
                    }
                }
            if (!skipped(candidates[next]))
                wave.push_back(next);
        }
        std::vector<std::future<SearchResult>> running;
        for (std::size_t i : wave) {
            SearchOptions o = reporting(options, i == wave.front());
            o.cost.techniques = candidates[i];
            o.threads = std::max<std::size_t>(1, threads / wave.size());  // the wave's searches share the threads
            running.push_back(std::async(wave.size() > 1 ? std::launch::async : std::launch::deferred,
                                         [&search, &mesh, o] { return search(mesh, o); }));
        }
        for (std::size_t k = 0; k < running.size(); ++k) {
            SearchResult r = running[k].get();
            finished();
            ++tried;
            evaluated += r.stats.plansEvaluated;
            if (r.plan.cost.fitsMemory && !r.stats.memoryBound && !unsplittable(r))
                settled.push_back(candidates[wave[k]]);
            consider(std::move(r));
        }
    }
    if (noneFits) {
        // Say what keeps the model from fitting.
        const auto &m = best->plan.cost.memory;
        const std::int64_t states = m.parameters + m.gradients + m.optimizer;
        best->plan.searchWarnings.push_back(
            "no setting of the memory techniques fits: with " + cost::describe(best->plan.costOptions.techniques) +
            " the plan needs " + gib(static_cast<double>(m.total())) + " per device, " +
            gib(static_cast<double>(states)) + " of it model states (" +
            fmt::format("{:g}", best->plan.costOptions.bytesPerParameter()) + " bytes per parameter)" +
            (states > mesh.device.memoryBytes ? ", more than the device's " +
                                                    gib(static_cast<double>(mesh.device.memoryBytes)) + " alone"
                                              : std::string()));
    }
    if (best->planSpecs.empty()) {
        simplifyTechniques(best->plan, graph, choices);
    } else {
        cost::PlanCoster coster(graph, mesh, best->plan.costOptions);
        plan::completePlan(best->plan, graph, best->planSpecs, plan::SpecSource::Search, coster);
        best->leastCommunication.model.fingerprint = best->plan.model.fingerprint;
        plan::completePlan(best->leastCommunication, graph, best->leastCommunicationSpecs, plan::SpecSource::Search,
                           coster);
        simplify(best->plan, graph, choices, best->planSpecs, &coster);
        best->planSpecs.clear();
        best->leastCommunicationSpecs.clear();
    }
    best->stats.techniquesTried = tried;
    best->stats.plansEvaluated = evaluated;
    best->stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return std::move(*best);
}

namespace {

// simplifyTechniques with the plan's specs by tensor id (planSpecs).
// Each setting is ranked on the plan's totals, by one coster that sums its
// charges again per setting; the plan is costed whole once, on the setting
// kept.
void simplify(plan::Plan &plan, const ir::Graph &graph, const TechniqueChoices &choices,
              const std::vector<sharding::ShardingSpec> &specs, cost::PlanCoster *given)
{
    std::optional<cost::PlanCoster> made;
    cost::PlanCoster *coster = given;
    cost::CostOptions kept = plan.costOptions;
    cost::Objective objective = objectiveOf(plan);
    auto tryWithout = [&](auto change) {
        cost::CostOptions o = kept;
        change(o.techniques);
        if (o == kept)
            return;
        if (!coster)
            coster = &made.emplace(graph, plan.mesh, o);
        coster->setOptions(o);
        const auto theirs = cost::Objective::of(coster->totals(specs));
        if (noWorse(theirs, objective)) {
            kept = o;
            objective = theirs;
        }
    };
    if (!choices.offloadOptimizer)
        tryWithout([](cost::Techniques &t) { t.offloadOptimizer = false; });
    if (!choices.microBatches)
        tryWithout([](cost::Techniques &t) { t.microBatches = 1; });
    if (!choices.zeroStage)
        for (int stage = plan.costOptions.techniques.zeroStage; stage-- > 0;)
            tryWithout([stage](cost::Techniques &t) { t.zeroStage = stage; });
    if (!choices.recompute) {
        for (const auto &[kind, mode] : std::map(plan.costOptions.techniques.recomputeLayers))
            tryWithout([&kind = kind](cost::Techniques &t) { t.recomputeLayers.erase(kind); });
        tryWithout([](cost::Techniques &t) {
            if (t.recomputeLayers.empty())
                t.recompute = cost::Recompute::None;
        });
    }
    if (kept == plan.costOptions)
        return;
    plan.costOptions = kept;
    coster->setOptions(kept);
    plan.cost = coster->cost(specs);
}

} // namespace

void simplifyTechniques(plan::Plan &plan, const ir::Graph &graph, const TechniqueChoices &choices)
{
    simplify(plan, graph, choices, plan::planSpecs(plan, graph, plan.model.source));
}

plan::Plan chooseTechniques(const plan::Plan &plan, const ir::Graph &graph, const TechniqueChoices &choices)
{
    const auto specs = plan::planSpecs(plan, graph, plan.model.source);
    // Every setting ranked on the plan's totals by one coster; the best
    // costed whole. The optimizer goes to the host only where no setting
    // keeping it on the device fits (as searchTechniques has it).
    std::optional<cost::PlanCoster> coster;
    std::optional<std::pair<cost::CostOptions, cost::Objective>> best, onDevice;
    for (const cost::Techniques &t : techniqueCandidates(choices, hasAttentionCore(graph), modelBatch(graph),
                                                         cost::attentionLayerKinds(graph))) {
        // Micro-batches the plan's specs cannot split run nowhere (Megatron
        // on 2x4 splits a batch of 8 over the data axis: 8 micro-batches of
        // one sample cannot be): no setting to choose, unless asked for
        // (the plan command then says why).
        if (!choices.microBatches && microBatchProblem(graph, specs, plan.mesh, t.microBatches))
            continue;
        cost::CostOptions o = plan.costOptions;
        o.techniques = t;
        if (!coster)
            coster.emplace(graph, plan.mesh, o);
        coster->setOptions(o);
        const auto objective = cost::Objective::of(coster->totals(specs));
        if (!best || objective < best->second)
            best = {o, objective};
        if (!t.offloadOptimizer && (!onDevice || objective < onDevice->second))
            onDevice = {o, objective};
    }
    if (onDevice && onDevice->second.fits())
        best = onDevice;
    if (!best)
        return plan;
    plan::Plan p = plan;
    p.costOptions = best->first;
    coster->setOptions(p.costOptions);
    p.cost = coster->cost(specs);
    simplify(p, graph, choices, specs);
    return p;
}

std::vector<std::string> techniqueReasons(const plan::Plan &plan, const ir::Graph &graph)
{
    const cost::Techniques &used = plan.costOptions.techniques;
    const auto specs = plan::planSpecs(plan, graph, plan.model.source);
    std::vector<std::string> lines;
    // One coster, its charges summed again per setting.
    std::optional<cost::PlanCoster> coster;
    auto without = [&](const std::string &name, auto change) {
        cost::CostOptions o = plan.costOptions;
        change(o.techniques);
        if (!coster)
            coster.emplace(graph, plan.mesh, o);
        coster->setOptions(o);
        const cost::PlanCost c = coster->totals(specs);
        const double saves = static_cast<double>(c.memory.total() - plan.cost.memory.total());
        const double costs = plan.cost.stepTime - c.stepTime;
        std::string line = name + ": saves " + gib(saves) + " per device, ";
        line += costs > 0 ? "costs " + duration(costs) + " per step"
                          : costs < 0 ? "saves " + duration(-costs) + " per step" : "no time";
        if (plan.cost.fitsMemory && !c.fitsMemory)
            line += "; needed to fit (" + gib(static_cast<double>(c.memory.total())) + " without it)";
        lines.push_back(std::move(line));
    };
    if (used.flashAttention)
        without("flash attention (no s x s scores kept; scores computed again in backward)",
                [](cost::Techniques &t) { t.flashAttention = false; });
    if (used.recompute != cost::Recompute::None || !used.recomputeLayers.empty())
        without(std::string(used.recompute == cost::Recompute::Full || !used.recomputeLayers.empty()
                                ? "full recomputation (each layer keeps its input, runs its forward again)"
                                : "selective recomputation (attention scores computed again)") +
                    (used.recomputeLayers.empty() ? "" : " of " + [&] {
                        std::string kinds;
                        for (const auto &[kind, mode] : used.recomputeLayers)
                            kinds += (kinds.empty() ? "" : ", ") + kind;
                        return kinds;
                    }()),
                [](cost::Techniques &t) {
                    t.recompute = cost::Recompute::None;
                    t.recomputeLayers.clear();
                });
    if (used.zeroStage > 0)
        without("ZeRO-" + std::to_string(used.zeroStage) +
                    (used.zeroStage == 1   ? " (optimizer state sharded"
                     : used.zeroStage == 2 ? " (optimizer state and gradients sharded"
                                           : " (parameters, gradients and optimizer state sharded") +
                    " over the axes each parameter is replicated on)",
                [](cost::Techniques &t) { t.zeroStage = 0; });
    if (used.microBatches > 1)
        without(std::to_string(used.microBatches) + " micro-batches (activations of one kept at a time)",
                [](cost::Techniques &t) { t.microBatches = 1; });
    if (used.offloadOptimizer)
        without("optimizer offload (master weights and Adam's moments in host memory, updated there; gradients "
                "and parameters over the host link)",
                [](cost::Techniques &t) { t.offloadOptimizer = false; });
    return lines;
}

} // namespace tapestry::search
