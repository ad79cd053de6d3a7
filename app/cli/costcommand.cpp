#include "cli/command.h"
#include "cli/modelargs.h"
#include "cli/planreport.h"

#include "plan/planjson.h"

#include <iostream>

namespace tapestry::cli {

namespace {

int runCost(const Args &args)
{
    if (args.positional.size() != 2) {
        std::cerr << "tapestry-cli cost: expected MODEL and PLAN (try 'tapestry-cli cost --help')\n";
        return BadInput;
    }
    const std::string model = args.positional[0], planFile = args.positional[1];
    const auto graph = loadModelFromArgs(model, args);
    plan::Plan p = plan::readPlanFile(planFile);
    plan::recostPlan(p, graph, planFile);
    if (auto path = args.value("-o"))
        plan::writePlanFile(*path, p);
    if (args.has("--json"))
        args.report() << planReportJson(p).dump(2) << '\n';
    else
        printPlanReport(p, args.report());
    return Ok;
}

Registration cost([] {
    Command c;
    c.name = "cost";
    c.usage = "cost MODEL PLAN [--batch B] [--seq S] [-o FILE] [--json]";
    c.summary = "re-cost a plan (after hand edits) on its mesh";
    c.details = "The plan must have been made for MODEL (same fingerprint) and give every tensor a\n"
                "legal spec; otherwise the command names the tensor and exits 2. A plan that does not\n"
                "fit in device memory is still costed, and the report says so.\n";
    c.options = modelOptions();
    c.options.push_back({"-o", "FILE", "write the re-costed plan (- for stdout; the report then goes to stderr)"});
    c.options.push_back({"--json", "", "print the summary as one JSON object"});
    c.run = runCost;
    return c;
}());

} // namespace
} // namespace tapestry::cli
