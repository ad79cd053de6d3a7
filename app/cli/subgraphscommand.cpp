#include "cli/command.h"
#include "cli/modelargs.h"

#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>

namespace tapestry::cli {

namespace {

nlohmann::json tensorNames(const ir::Graph &graph, const std::vector<ir::TensorId> &tensors)
{
    nlohmann::json names = nlohmann::json::array();
    for (ir::TensorId t : tensors)
        names.push_back(graph.tensor(t).name);
    return names;
}

int runSubgraphs(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli subgraphs: expected one MODEL (try 'tapestry-cli subgraphs --help')\n";
        return BadInput;
    }
    const auto minDuplicate = args.integer("--min-duplicate").value_or(2);
    if (minDuplicate < 1 || minDuplicate > 1'000'000)
        throw TapestryError(Error{"--min-duplicate", {}, "expects a positive integer"});
    const auto graph = loadModelFromArgs(args.positional[0], args);

    // Timed from the loaded graph: the figure is the pruning's own cost.
    const auto start = std::chrono::steady_clock::now();
    const auto coarse = passes::Coarsen().run(graph);
    const auto result = passes::Prune(static_cast<int>(minDuplicate)).run(graph, coarse);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    if (args.has("--json")) {
        nlohmann::json classes = nlohmann::json::array();
        for (const auto &cls : result.classes) {
            nlohmann::json instances = nlohmann::json::array();
            for (const auto &inst : cls.instances) {
                nlohmann::json ops = nlohmann::json::array();
                for (ir::OpId op : inst.ops)
                    ops.push_back(graph.op(op).name);
                instances.push_back({{"scope", inst.scope},
                                     {"ops", ops},
                                     {"inputs", tensorNames(graph, inst.inputs)},
                                     {"outputs", tensorNames(graph, inst.outputs)}});
            }
            classes.push_back({{"id", cls.id.value},
                               {"representative", cls.instances[cls.representative].scope},
                               {"instances", instances},
                               {"ops_per_instance", cls.opsPerInstance},
                               {"parameters_per_instance", cls.parametersPerInstance}});
        }
        nlohmann::json out = {{"classes", classes},
                              {"coverage", result.coverage},
                              {"coarse_nodes", coarse.nodeCount()},
                              {"from_scopes", result.fromScopes},
                              {"seconds", seconds}};
        std::cout << out.dump(2) << '\n';
        return Ok;
    }
    std::cout << "model         " << args.positional[0] << "\nops           " << graph.opCount()
              << "\ncoarse nodes  " << coarse.nodeCount() << "\nclasses       "
              << result.classes.size() << (result.fromScopes ? "" : " (from structure; names carry no hierarchy)")
              << "\n\n";
    std::printf("  %-6s %10s %12s %16s  %s\n", "class", "instances", "ops/inst", "params/inst",
                "representative");
    for (const auto &cls : result.classes)
        std::printf("  %-6d %10zu %12zu %16lld  %s\n", cls.id.value, cls.instances.size(),
                    cls.opsPerInstance, static_cast<long long>(cls.parametersPerInstance),
                    cls.instances[cls.representative].scope.c_str());
    std::printf("\ncoverage      %.1f%% of ops in classes with at least %lld instances\n"
                "time          %.2f ms (coarsen + prune)\n",
                100.0 * result.coverage, static_cast<long long>(minDuplicate), 1e3 * seconds);
    return Ok;
}

Registration subgraphs([] {
    Command c;
    c.name = "subgraphs";
    c.usage = "subgraphs MODEL [--min-duplicate N] [--batch B] [--seq S] [--json]";
    c.summary = "unique subgraph classes and their instances";
    c.details =
        "Coarsens the model's ops into functional nodes and finds the blocks it repeats\n"
        "(TAP's graph pruning): the plan search runs once per class and reuses the\n"
        "class's plan for every instance.\n";
    c.options = modelOptions();
    c.options.push_back({"--min-duplicate", "N", "keep groups of at least N identical blocks (default 2)"});
    c.options.push_back({"--json", "", "print one JSON object (classes with id, representative, "
                                       "instances, ops_per_instance, parameters_per_instance; "
                                       "coverage; seconds)"});
    c.run = runSubgraphs;
    return c;
}());

} // namespace
} // namespace tapestry::cli
