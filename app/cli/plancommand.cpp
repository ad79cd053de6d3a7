#include "cli/command.h"
#include "cli/modelargs.h"
#include "cli/planreport.h"

#include "ir/error.h"
#include "plan/planjson.h"
#include "search/referenceplan.h"

#include <iostream>

namespace tapestry::cli {

namespace {

int runPlan(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli plan: expected one MODEL (try 'tapestry-cli plan --help')\n";
        return BadInput;
    }
    const std::string searchName = args.value("--search").value_or("");
    const auto method = search::referenceMethodFromString(searchName);
    if (!method)
        throw TapestryError(Error{"--search", {}, searchName.empty()
                                                      ? "is required (megatron, dp, replicate)"
                                                      : "unknown search '" + searchName +
                                                            "' (known: megatron, dp, replicate)"});
    const sharding::Mesh mesh = meshFromArgs(args);
    const std::string model = args.positional[0];
    const auto graph = loadModelFromArgs(model, args);
    search::ReferenceOptions options;
    options.sequenceParallel = args.has("--sequence-parallel");
    options.cost.overlap = args.has("--overlap");
    const plan::Plan p = search::referencePlan(graph, model, mesh, *method, options);
    if (auto path = args.value("-o"))
        plan::writePlanFile(*path, p);
    if (args.has("--json")) {
        auto j = planReportJson(p);
        if (auto path = args.value("-o"))
            j["plan_file"] = *path;
        std::cout << j.dump(2) << '\n';
    } else {
        printPlanReport(p, std::cout);
        if (auto path = args.value("-o"))
            std::cout << "\nplan written to " << *path << '\n';
    }
    return Ok;
}

Registration plan([] {
    Command c;
    c.name = "plan";
    c.usage = "plan MODEL --mesh SHAPE --search METHOD [--axes A,B] [--mesh-profile F] [-o plan.json] [--json]";
    c.summary = "derive a tensor-parallel plan and cost it";
    c.details = "Methods: megatron (column/row-parallel linears by module name, heads split, vocabulary-\n"
                "parallel embedding; data parallel on the other mesh axes), dp (batch split over every\n"
                "axis, gradients all-reduced), replicate.\n";
    c.options = modelOptions();
    for (auto &o : meshOptions())
        c.options.push_back(o);
    c.options.push_back({"--search", "METHOD", "megatron, dp or replicate"});
    c.options.push_back({"--sequence-parallel", "", "megatron: norms and residuals on sequence shards"});
    c.options.push_back({"--overlap", "", "model backward communication overlapping backward compute"});
    c.options.push_back({"-o", "FILE", "write the plan (tapestry.plan JSON)"});
    c.options.push_back({"--json", "", "print the summary as one JSON object"});
    c.run = runPlan;
    return c;
}());

} // namespace
} // namespace tapestry::cli
