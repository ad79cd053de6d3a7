#include "cli/command.h"
#include "cli/modelargs.h"
#include "cli/planreport.h"
#include "cli/shapereport.h"

#include "analysis/pinpropagation.h"
#include "ir/error.h"
#include "cost/objective.h"
#include "export/exportplan.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/axisroles.h"
#include "plan/planjson.h"
#include "search/axisconstraint.h"
#include "search/exactsearch.h"
#include "search/pinnedplan.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "search/techniquesearch.h"
#include "cost/activationmemory.h"

#include <chrono>
#include <exception>
#include <iostream>
#include <optional>
#include <utility>

namespace tapestry::cli {

namespace {

constexpr const char *kMethods = "tap, exact, megatron, dp, replicate";

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A whole number >= `least` given to `flag`.
int intOption(const Args &args, const std::string &flag, int least, int most)
{
    const std::string text = *args.value(flag);
    std::size_t used = 0;
    long v = 0;
    try {
        v = std::stol(text, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used != text.size() || v < least || v > most)
        throw TapestryError(Error{flag, {}, "expects a whole number from " + std::to_string(least) + " to " +
                                                std::to_string(most) + ", got '" + text + "'"});
    return static_cast<int>(v);
}

// The memory techniques as the options fix them; "auto" (the default)
// leaves one to the search.
search::TechniqueChoices techniqueChoices(const Args &args, const ir::Graph &graph, const sharding::Mesh &mesh)
{
    search::TechniqueChoices c;
    // Axes named by role: ZeRO shards over the data axes, as FSDP and
    // Megatron's distributed optimizer shard over their data-parallel group.
    if (axisNamesGiven(args) || args.value("--target")) {
        c.zeroAxes.emplace();
        for (const auto &a : mesh.axes)
            if (plan::axisRoleFromName(a.name) == plan::AxisRole::Data)
                c.zeroAxes->push_back(a.name);
    }
    if (auto v = args.value("--flash-attention"); v && *v != "auto") {
        if (*v != "on" && *v != "off")
            throw TapestryError(Error{"--flash-attention", {}, "expects on, off or auto, got '" + *v + "'"});
        c.flashAttention = *v == "on";
    }
    if (auto v = args.value("--recompute"); v && *v != "auto") {
        const std::string expects = "expects none, selective, full, auto, or KIND=MODE,... by kind of layer "
                                    "(e.g. 'decoder/block.*/=full'), got '" + *v + "'";
        if (v->find('=') == std::string::npos) {
            c.recompute = cost::recomputeFromString(*v);
            if (!c.recompute)
                throw TapestryError(Error{"--recompute", {}, expects});
        } else {
            // Per kind of layer; the others none.
            c.recompute = cost::Recompute::None;
            const auto kinds = cost::attentionLayerKinds(graph);
            std::size_t start = 0;
            while (start <= v->size()) {
                const std::size_t end = std::min(v->find(',', start), v->size());
                const std::string item = v->substr(start, end - start);
                const std::size_t eq = item.rfind('=');
                const auto mode = eq == std::string::npos ? std::nullopt : cost::recomputeFromString(item.substr(eq + 1));
                if (!mode)
                    throw TapestryError(Error{"--recompute", {}, expects});
                const std::string kind = item.substr(0, eq);
                if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
                    std::string known;
                    for (const auto &k : kinds)
                        known += (known.empty() ? "" : ", ") + k;
                    throw TapestryError(Error{"--recompute", {}, "no attention layers of kind '" + kind +
                                                                    "' in the model (its kinds: " +
                                                                    (known.empty() ? "none" : known) + ")"});
                }
                c.recomputeLayers[kind] = *mode;
                start = end + 1;
            }
        }
    }
    if (auto v = args.value("--offload-optimizer"); v && *v != "auto") {
        if (*v != "on" && *v != "off")
            throw TapestryError(Error{"--offload-optimizer", {}, "expects on, off or auto, got '" + *v + "'"});
        c.offloadOptimizer = *v == "on";
    } else if (args.value("--target")) {
        c.offloadOptimizer = false;  // no framework export runs the optimizer on the host
    }
    if (auto v = args.value("--zero"); v && *v != "auto")
        c.zeroStage = intOption(args, "--zero", 0, 3);
    const std::int64_t batch = search::modelBatch(graph);
    if (args.value("--micro-batches") && *args.value("--micro-batches") != "auto") {
        c.microBatches = intOption(args, "--micro-batches", 1, 1 << 20);
        if (batch > 0 && batch % *c.microBatches != 0)
            throw TapestryError(Error{"--micro-batches", {}, "must divide the model's batch of " +
                                                                std::to_string(batch) + ", got " +
                                                                std::to_string(*c.microBatches)});
    }
    return c;
}

// Loads, coarsens and prunes the model, then runs the named search with
// the memory techniques the options leave to it.
search::SearchResult searchPlan(const std::string &method, const std::string &model, const ir::Graph &graph,
                                const Args &args, const sharding::Mesh &mesh, double &loadSeconds)
{
    const auto start = std::chrono::steady_clock::now();
    const auto coarse = passes::Coarsen().run(graph);
    const auto classes = passes::Prune().run(graph, coarse);
    loadSeconds += secondsSince(start);

    search::SearchOptions options;
    options.cost.overlap = args.has("--overlap");
    ProgressBar bar(method + " search");
    options.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
    if (auto limit = args.value("--time-limit")) {
        std::size_t used = 0;
        try {
            options.timeLimitSeconds = std::stod(*limit, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (used != limit->size() || !(options.timeLimitSeconds > 0))
            throw TapestryError(Error{"--time-limit", {}, "expects a positive number of seconds, got '" + *limit + "'"});
    }
    if (args.value("--threads"))
        options.threads = static_cast<std::size_t>(intOption(args, "--threads", 1, 1024));
    // A target's mesh is its axes' roles: the default names (model; data,
    // model) become constraints, as torch's and Megatron's meshes are.
    if (axisNamesGiven(args) || args.value("--target")) {
        std::vector<std::string> names;
        for (const auto &a : mesh.axes)
            names.push_back(a.name);
        options.axisRoles = search::axisRolesFromNames(names, args.value("--axes") ? "--axes" : "--mesh");
    }
    std::optional<plan::Plan> pinnedFrom;
    if (auto from = args.value("--keep-pins")) {
        if (method != "tap")
            throw TapestryError(Error{"--keep-pins", {}, "works with --search tap only"});
        pinnedFrom = plan::readPlanFile(*from);
        // A plan made for another model (its fingerprint), or one that does
        // not fit this model, is refused, as `cost` refuses it.
        plan::planSpecs(*pinnedFrom, graph, *from);
        options.pinned = analysis::pinsOf(*pinnedFrom);
    }
    auto run = [&](const sharding::Mesh &m, const search::SearchOptions &o) {
        return method == "exact" ? search::exactSearch(graph, coarse, model, m, o)
                                 : search::tapSearch(graph, coarse, classes, model, m, o);
    };
    auto result = search::searchTechniques(run, graph, model, mesh, options, techniqueChoices(args, graph, mesh));
    if (pinnedFrom)
        search::keepPinnedPlanIfBetter(result, *pinnedFrom, graph, *args.value("--keep-pins"));
    bar.finish();
    return result;
}

// --target: the plan must be one the framework expresses. The search ran
// with the axes' roles as constraints and no optimizer offload; where its
// plan still needs what the export refuses, the reference plans (replicate
// among them) are costed with the same techniques and the best that exports
// is taken. Returns the report's line; throws where no plan exports.
std::string keepToTarget(plan::Plan &p, const std::string &target, const ir::Graph &graph, const std::string &model,
                         const sharding::Mesh &mesh, const Args &args)
{
    if (target != "torch" && target != "jax" && target != "megatron")
        throw TapestryError(Error{"--target", {}, "expects torch, jax or megatron, got '" + target + "'"});
    auto refusal = [&](const plan::Plan &candidate) -> std::string {
        try {
            exports::exportPlanText(graph, candidate, model, target);
            return {};
        } catch (const TapestryError &e) {
            return e.what();
        }
    };
    const std::string why = refusal(p);
    if (why.empty())
        return target + " expresses this plan (export --to " + target + ")";
    std::optional<plan::Plan> best;
    std::string bestName;
    for (const auto &[name, method, sp] :
         {std::tuple{"megatron with sequence parallelism", search::ReferenceMethod::Megatron, true},
          std::tuple{"megatron", search::ReferenceMethod::Megatron, false},
          std::tuple{"dp", search::ReferenceMethod::DataParallel, false},
          // Every framework runs a model whole (with ZeRO sharding its
          // state where the techniques chose it): the plan of last resort.
          std::tuple{"replicate", search::ReferenceMethod::Replicate, false}}) {
        search::ReferenceOptions options;
        options.sequenceParallel = sp;
        options.cost.overlap = args.has("--overlap");
        plan::Plan candidate;
        try {
            candidate = search::chooseTechniques(search::referencePlan(graph, model, mesh, method, options), graph,
                                                 techniqueChoices(args, graph, mesh));
        } catch (const TapestryError &) {
            continue;  // the method does not apply (heads not divisible, ...)
        }
        if (!refusal(candidate).empty())
            continue;
        if (!best || cost::Objective::of(candidate.cost) < cost::Objective::of(best->cost)) {
            best = std::move(candidate);
            bestName = name;
        }
    }
    if (!best)
        throw TapestryError(Error{"--target", {}, "no plan " + target + " expresses: " + why});
    p = std::move(*best);
    return "the searched plan is not one " + target + " expresses (" + why + "); the best that is: " + bestName;
}

int runPlan(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli plan: expected one MODEL (try 'tapestry-cli plan --help')\n";
        return BadInput;
    }
    if (args.value("--devices"))
        return runShapes(args);
    const std::string searchName = args.value("--search").value_or("tap");
    const auto reference = search::referenceMethodFromString(searchName);
    const bool searched = searchName == "tap" || searchName == "exact";
    if (!reference && !searched)
        throw TapestryError(Error{"--search", {}, searchName.empty() ? std::string("is required (") + kMethods + ")"
                                                                     : "unknown search '" + searchName +
                                                                           "' (known: " + kMethods + ")"});
    const sharding::Mesh mesh = meshFromArgs(args);
    const std::string model = args.positional[0];

    std::optional<search::SearchResult> result;
    double loadSeconds = 0;
    plan::Plan p;
    const auto loadStart = std::chrono::steady_clock::now();
    const auto graph = loadModelFromArgs(model, args);
    loadSeconds = secondsSince(loadStart);
    if (searched) {
        result = searchPlan(searchName, model, graph, args, mesh, loadSeconds);
        // Taken, not copied: on a deep model the plan holds every tensor's
        // spec and every op's cost, and the report reads only the stats and
        // the least-communication plan from the result.
        p = std::move(result->plan);
    } else {
        search::ReferenceOptions options;
        options.sequenceParallel = args.has("--sequence-parallel");
        options.cost.overlap = args.has("--overlap");
        p = search::chooseTechniques(search::referencePlan(graph, model, mesh, *reference, options), graph,
                                     techniqueChoices(args, graph, mesh));
    }
    std::string targetNote;
    if (auto target = args.value("--target"))
        targetNote = keepToTarget(p, *target, graph, model, mesh, args);
    // A plan whose micro-batches its specs cannot split runs nowhere: said
    // here, not by the executor.
    if (auto problem = search::microBatchProblem(graph, plan::planSpecs(p, graph, model), p.mesh,
                                                 p.costOptions.techniques.microBatches))
        throw TapestryError(Error{"--micro-batches", {},
                                  std::to_string(p.costOptions.techniques.microBatches) + " micro-batches with the " +
                                      p.method + " plan: " + *problem + "; plan with fewer micro-batches"});
    const auto reasons = search::techniqueReasons(p, graph);
    if (auto path = args.value("-o"))
        plan::writePlanFile(*path, p);
    if (args.has("--json")) {
        auto j = planReportJson(p);
        j["techniques"]["reasons"] = reasons;
        if (result)
            addSearchReport(j, *result, loadSeconds);
        if (auto path = args.value("-o"))
            j["plan_file"] = *path;
        if (auto target = args.value("--target"))
            j["target"] = {{"framework", *target}, {"note", targetNote}};
        args.report() << j.dump(2) << '\n';
    } else {
        printPlanReport(p, args.report(), reasons);
        if (result)
            printSearchReport(*result, loadSeconds, args.report());
        if (!targetNote.empty())
            args.report() << "target        " << targetNote << '\n';
        if (auto path = args.value("-o"); path && *path != "-")
            args.report() << "\nplan written to " << *path << '\n';
    }
    return Ok;
}

Registration plan([] {
    Command c;
    c.name = "plan";
    c.usage = "plan MODEL --mesh SHAPE --search METHOD [--axes A,B] [--mesh-profile F] [--memory-gib G] "
              "[-o plan.json] [--json]";
    c.summary = "derive a tensor-parallel plan and cost it";
    c.details = "Methods: tap (TAP's search: every unique subgraph class searched once on one\n"
                "instance, the plan of least step time that fits in device memory; the report adds\n"
                "the plan that communicates least), exact (the whole coarse graph as one integer\n"
                "program solved by CBC: optimal, slow, the yardstick tap is checked against),\n"
                "megatron (column/row-parallel linear pairs found around an activation or an attention\n"
                "core, else by module name; heads split, vocabulary-parallel embedding; data parallel\n"
                "on the other mesh axes), dp (batch split over every axis, gradients all-reduced), replicate.\n"
                "Axis names given with --axes (or in --mesh's parentheses) are constraints for tap\n"
                "and exact: an axis named data (dp, batch) splits the batch and no weight, model\n"
                "(tensor, tp, mp) splits weights and not the batch, sequence (seq, sp, cp) splits\n"
                "the sequence and no weight; other names leave their axis free. Without --axes the\n"
                "default names constrain nothing and the report says what each axis carries.\n"
                "With --keep-pins, tap holds the weights a user pinned (specs marked override, as the\n"
                "studio saves them) and chooses everything else around them; where the plan the pins\n"
                "came from is still better, it is kept as it is (the report says so).\n"
                "Searches show a progress bar on stderr when they outlast a second and stderr is a\n"
                "terminal.\n";
    c.options = modelOptions();
    for (auto &o : meshOptions())
        c.options.push_back(o);
    c.options.push_back({"--devices", "N", "choose the mesh's shape for N devices: pipeline x data x tensor ranked by step time among those that fit (instead of --mesh)"});
    c.options.push_back({"--topology", "NODESxPER_NODE", "with --devices: the cluster's nodes and devices per node (default: the profile's devices per node)"});
    c.options.push_back({"--pipeline-stages", "P", "with --devices: only shapes of P pipeline stages"});
    c.options.push_back({"--tensor-parallel", "T", "with --devices: only shapes of tensor parallelism T"});
    c.options.push_back({"--search", "METHOD", kMethods});
    c.options.push_back({"--keep-pins", "PLAN", "tap: keep every override (pin) of PLAN and search the rest around them"});
    c.options.push_back({"--time-limit", "S", "exact: wall-clock limit of the whole search, the strategy tables included (default 60 s)"});
    c.options.push_back({"--threads", "N", "tap: threads the search runs on (default: one per hardware thread); the plan is the same on any number"});
    c.options.push_back({"--sequence-parallel", "", "megatron: norms and residuals on sequence shards"});
    c.options.push_back({"--overlap", "", "model backward communication overlapping backward compute"});
    c.options.push_back({"--flash-attention", "on|off|auto", "attention computed blockwise, no s x s scores kept (auto: on where the model has attention)"});
    c.options.push_back({"--recompute", "none|selective|full|auto|KIND=MODE,...",
                         "activation recomputation, plan-wide or by kind of layer ('decoder/block.*/=full'; auto: chosen with the plan)"});
    c.options.push_back({"--zero", "0|1|2|3|auto", "ZeRO stage over the axes each parameter is replicated on (auto: chosen)"});
    c.options.push_back({"--offload-optimizer", "on|off|auto",
                         "optimizer state and update on the host (ZeRO-Offload; auto: only where nothing else fits)"});
    c.options.push_back({"--micro-batches", "N|auto", "micro-batches per step, gradients accumulated; N divides the model's batch (auto: chosen)"});
    c.options.push_back({"--target", "torch|jax|megatron",
                         "keep to plans the framework's export expresses: the axes' names are roles, no optimizer "
                         "offload, and where the search's plan still cannot be exported, the best reference plan "
                         "that can"});
    c.options.push_back({"-o", "FILE", "write the plan (tapestry.plan JSON; - for stdout, the report then goes to stderr)"});
    c.options.push_back({"--json", "", "print the summary as one JSON object"});
    c.run = runPlan;
    return c;
}());

} // namespace
} // namespace tapestry::cli
