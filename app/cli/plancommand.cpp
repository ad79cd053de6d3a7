#include "cli/command.h"
#include "cli/modelargs.h"
#include "cli/planreport.h"

#include "analysis/pinpropagation.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/planjson.h"
#include "search/axisconstraint.h"
#include "search/exactsearch.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"

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

// Loads, coarsens and prunes the model, then runs the named search.
search::SearchResult searchPlan(const std::string &method, const std::string &model, const Args &args,
                                const sharding::Mesh &mesh, double &loadSeconds)
{
    const auto start = std::chrono::steady_clock::now();
    const auto graph = loadModelFromArgs(model, args);
    const auto coarse = passes::Coarsen().run(graph);
    const auto classes = passes::Prune().run(graph, coarse);
    loadSeconds = secondsSince(start);

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
    if (axisNamesGiven(args)) {
        std::vector<std::string> names;
        for (const auto &a : mesh.axes)
            names.push_back(a.name);
        options.axisRoles = search::axisRolesFromNames(names, args.value("--axes") ? "--axes" : "--mesh");
    }
    if (auto from = args.value("--keep-pins")) {
        if (method != "tap")
            throw TapestryError(Error{"--keep-pins", {}, "works with --search tap only"});
        options.pinned = analysis::pinsOf(plan::readPlanFile(*from));
    }
    auto result = method == "exact" ? search::exactSearch(graph, coarse, model, mesh, options)
                                    : search::tapSearch(graph, coarse, classes, model, mesh, options);
    bar.finish();
    return result;
}

int runPlan(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli plan: expected one MODEL (try 'tapestry-cli plan --help')\n";
        return BadInput;
    }
    const std::string searchName = args.value("--search").value_or("");
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
    if (searched) {
        result = searchPlan(searchName, model, args, mesh, loadSeconds);
        // Taken, not copied: on a deep model the plan holds every tensor's
        // spec and every op's cost, and the report reads only the stats and
        // the least-communication plan from the result.
        p = std::move(result->plan);
    } else {
        const auto graph = loadModelFromArgs(model, args);
        search::ReferenceOptions options;
        options.sequenceParallel = args.has("--sequence-parallel");
        options.cost.overlap = args.has("--overlap");
        p = search::referencePlan(graph, model, mesh, *reference, options);
    }
    if (auto path = args.value("-o"))
        plan::writePlanFile(*path, p);
    if (args.has("--json")) {
        auto j = planReportJson(p);
        if (result)
            addSearchReport(j, *result, loadSeconds);
        if (auto path = args.value("-o"))
            j["plan_file"] = *path;
        std::cout << j.dump(2) << '\n';
    } else {
        printPlanReport(p, std::cout);
        if (result)
            printSearchReport(*result, loadSeconds, std::cout);
        if (auto path = args.value("-o"))
            std::cout << "\nplan written to " << *path << '\n';
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
                "program solved by CBC: optimal, slow, the yardstick tap is checked against), megatron (column/row-parallel linears by module\n"
                "name, heads split, vocabulary-parallel embedding; data parallel on the other mesh\n"
                "axes), dp (batch split over every axis, gradients all-reduced), replicate.\n"
                "Axis names given with --axes (or in --mesh's parentheses) are constraints for tap\n"
                "and exact: an axis named data (dp, batch) splits the batch and no weight, model\n"
                "(tensor, tp, mp) splits weights and not the batch, sequence (seq, sp, cp) splits\n"
                "the sequence and no weight; other names leave their axis free. Without --axes the\n"
                "default names constrain nothing and the report says what each axis carries.\n"
                "With --keep-pins, tap holds the weights a user pinned (specs marked override, as the\n"
                "studio saves them) and chooses everything else around them.\n"
                "Searches show a progress bar on stderr when they outlast a second and stderr is a\n"
                "terminal.\n";
    c.options = modelOptions();
    for (auto &o : meshOptions())
        c.options.push_back(o);
    c.options.push_back({"--search", "METHOD", kMethods});
    c.options.push_back({"--keep-pins", "PLAN", "tap: keep every override (pin) of PLAN and search the rest around them"});
    c.options.push_back({"--time-limit", "S", "exact: wall-clock limit of the whole search, the strategy tables included (default 60 s)"});
    c.options.push_back({"--sequence-parallel", "", "megatron: norms and residuals on sequence shards"});
    c.options.push_back({"--overlap", "", "model backward communication overlapping backward compute"});
    c.options.push_back({"-o", "FILE", "write the plan (tapestry.plan JSON)"});
    c.options.push_back({"--json", "", "print the summary as one JSON object"});
    c.run = runPlan;
    return c;
}());

} // namespace
} // namespace tapestry::cli
