#include "cli/command.h"
#include "cli/modelargs.h"

#include "plan/planjson.h"
#include "analysis/plandiff.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>

namespace tapestry::cli {

namespace {

std::string signedSeconds(double s)
{
    char buf[32];
    const double a = std::abs(s);
    const char *sign = s < 0 ? "-" : "+";
    if (a >= 1)
        std::snprintf(buf, sizeof buf, "%s%.3f s", sign, a);
    else if (a >= 1e-3)
        std::snprintf(buf, sizeof buf, "%s%.3f ms", sign, a * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%s%.3f us", sign, a * 1e6);
    return buf;
}

std::string signedBytes(double n)
{
    char buf[32];
    const double a = std::abs(n);
    const char *sign = n < 0 ? "-" : "+";
    if (a >= 1024.0 * 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%s%.2f GiB", sign, a / (1024.0 * 1024 * 1024));
    else if (a >= 1024.0 * 1024)
        std::snprintf(buf, sizeof buf, "%s%.2f MiB", sign, a / (1024.0 * 1024));
    else
        std::snprintf(buf, sizeof buf, "%s%.0f B", sign, a);
    return buf;
}

nlohmann::ordered_json groupsJson(const std::map<std::string, analysis::GroupDelta> &groups)
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (const auto &[name, g] : groups)
        j[name] = {{"a_s", g.a.total()},          {"b_s", g.b.total()},
                   {"delta_s", g.delta()},         {"comm_delta_s", g.b.comm - g.a.comm},
                   {"compute_delta_s", g.b.compute - g.a.compute},
                   {"collectives_a", g.a.collectives}, {"collectives_b", g.b.collectives}};
    return j;
}

void printGroups(const char *title, const std::map<std::string, analysis::GroupDelta> &groups)
{
    std::printf("\nby %s:\n  %-40s %12s %12s %12s\n", title, "", "comm", "compute", "total");
    for (const auto &[name, g] : groups)
        std::printf("  %-40s %12s %12s %12s\n", name.c_str(), signedSeconds(g.b.comm - g.a.comm).c_str(),
                    signedSeconds(g.b.compute - g.a.compute).c_str(), signedSeconds(g.delta()).c_str());
}

int runDiff(const Args &args)
{
    if (args.positional.size() != 2) {
        std::cerr << "tapestry-cli diff: expected two plans A and B (try 'tapestry-cli diff --help')\n";
        return BadInput;
    }
    const std::string fileA = args.positional[0], fileB = args.positional[1];
    const plan::Plan a = plan::readPlanFile(fileA), b = plan::readPlanFile(fileB);
    analysis::checkSameModel(a, b, fileA, fileB);
    const auto graph = loadModelFromArgs(args.value("--model").value_or(a.model.source), args);
    const analysis::PlanDiff diff = analysis::diffPlans(graph, a, b, fileA, fileB);

    if (args.has("--json")) {
        nlohmann::ordered_json j;
        j["a"] = {{"file", fileA}, {"method", a.method}, {"step_time_s", diff.stepTimeA}};
        j["b"] = {{"file", fileB}, {"method", b.method}, {"step_time_s", diff.stepTimeB}};
        auto specs = nlohmann::ordered_json::array();
        for (const auto &c : diff.specs)
            specs.push_back({{"tensor", c.tensor}, {"a", c.a.toPlacements()}, {"b", c.b.toPlacements()}});
        j["specs"] = specs;
        j["techniques"] = {{"a", cost::describe(diff.techniquesA)}, {"b", cost::describe(diff.techniquesB)}};
        j["step_time_delta_s"] = diff.stepTimeDelta;
        j["comm_delta_s"] = diff.commDelta;
        j["compute_delta_s"] = diff.computeDelta;
        j["memory_delta_bytes"] = diff.memoryDelta;
        j["by_class"] = groupsJson(diff.byClass);
        j["by_collective"] = groupsJson(diff.byCollective);
        std::cout << j.dump(2) << '\n';
        return Ok;
    }
    std::cout << "a: " << fileA << " (" << a.method << "), b: " << fileB << " (" << b.method << "), model "
              << a.model.source << "\n";
    if (!(diff.techniquesA == diff.techniquesB))
        std::cout << "techniques: a uses " << cost::describe(diff.techniquesA) << "; b uses "
                  << cost::describe(diff.techniquesB) << "\n";
    if (diff.specs.empty()) {
        std::cout << "the plans store every tensor alike\n";
    } else {
        std::printf("%zu tensor(s) stored differently:\n  %-48s %-28s %s\n", diff.specs.size(), "tensor", "a", "b");
        for (const auto &c : diff.specs)
            std::printf("  %-48s %-28s %s\n", c.tensor.c_str(), c.a.toPlacements().c_str(),
                        c.b.toPlacements().c_str());
    }
    std::printf("\nb against a: step %s (comm %s, compute %s), memory per device %s\n",
                signedSeconds(diff.stepTimeDelta).c_str(), signedSeconds(diff.commDelta).c_str(),
                signedSeconds(diff.computeDelta).c_str(), signedBytes(static_cast<double>(diff.memoryDelta)).c_str());
    printGroups("subgraph class", diff.byClass);
    printGroups("collective", diff.byCollective);
    return Ok;
}

Registration diff([] {
    Command c;
    c.name = "diff";
    c.usage = "diff A B [--model MODEL] [--batch B] [--seq S] [--json]";
    c.summary = "the tensors two plans store differently, and the cost difference";
    c.details = "Both plans must be for one model (same fingerprint); each is validated and costed again\n"
                "on its own mesh. Deltas are B minus A, in total and by subgraph class and collective\n"
                "kind. The model is the one A records (model.source) unless --model names another.\n";
    c.options = modelOptions();
    c.options.push_back({"--model", "MODEL", "load this model instead of the one the plans record"});
    c.options.push_back({"--json", "", "print the difference as one JSON object"});
    c.run = runDiff;
    return c;
}());

} // namespace
} // namespace tapestry::cli
