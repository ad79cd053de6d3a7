#include "cli/command.h"
#include "cli/modelargs.h"

#include "ir/scopetree.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <map>

namespace tapestry::cli {

namespace {

std::string humanCount(std::int64_t n)
{
    char buf[32];
    if (n >= 1'000'000'000)
        std::snprintf(buf, sizeof buf, "%.3fB", static_cast<double>(n) / 1e9);
    else if (n >= 1'000'000)
        std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(n) / 1e6);
    else if (n >= 1'000)
        std::snprintf(buf, sizeof buf, "%.1fK", static_cast<double>(n) / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
    return buf;
}

std::string humanBytes(std::int64_t n)
{
    char buf[32];
    const double d = static_cast<double>(n);
    if (d >= 1024.0 * 1024 * 1024)
        std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1024.0 * 1024 * 1024));
    else if (d >= 1024.0 * 1024)
        std::snprintf(buf, sizeof buf, "%.1f MiB", d / (1024.0 * 1024));
    else if (d >= 1024.0)
        std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024.0);
    else
        std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(n));
    return buf;
}

int runInspect(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli inspect: expected one MODEL (try 'tapestry-cli inspect --help')\n";
        return BadInput;
    }
    const auto graph = loadModelFromArgs(args.positional[0], args);
    std::map<std::string, int> opTypes;
    for (const auto &op : graph.ops())
        ++opTypes[op.type];
    std::map<std::string, int> opaque;
    for (const auto &op : graph.ops())
        if (!op.domain.empty())
            ++opaque[op.domain + "::" + op.type];
    const ir::ScopeTree scopes(graph);

    if (args.has("--json")) {
        nlohmann::json out = {
            {"model", args.positional[0]},
            {"name", graph.name},
            {"ops", graph.opCount()},
            {"tensors", graph.tensorCount()},
            {"parameters", graph.parameterCount()},
            {"parameter_bytes", graph.parameterBytes()},
            {"parameter_tensors", graph.tensorsWithRole(ir::Role::Parameter).size()},
            {"inputs", graph.tensorsWithRole(ir::Role::Input).size()},
            {"outputs", graph.tensorsWithRole(ir::Role::Output).size()},
            {"op_types", opTypes},
            {"opaque_ops", opaque},
            {"scope_depth", scopes.depth()},
        };
        std::cout << out.dump(2) << '\n';
        return Ok;
    }
    std::cout << "model       " << args.positional[0] << (graph.name.empty() ? "" : " (" + graph.name + ")")
              << "\nops         " << graph.opCount() << "\ntensors     " << graph.tensorCount()
              << "\nparameters  " << humanCount(graph.parameterCount()) << " ("
              << graph.parameterCount() << " elements, " << humanBytes(graph.parameterBytes())
              << ")\nscope depth " << scopes.depth() << "\n\nop types:\n";
    for (const auto &[type, count] : opTypes)
        std::printf("  %-28s %d\n", type.c_str(), count);
    if (!opaque.empty()) {
        std::cout << "\nopaque ops (custom domains, no sharding rule):\n";
        for (const auto &[type, count] : opaque)
            std::printf("  %-28s %d\n", type.c_str(), count);
    }
    std::cout << "\ninputs:\n";
    for (auto t : graph.tensorsWithRole(ir::Role::Input))
        std::cout << "  " << graph.tensor(t).name << " " << shapeString(graph.tensor(t).shape) << " "
                  << ir::toString(graph.tensor(t).dtype) << '\n';
    std::cout << "outputs:\n";
    for (auto t : graph.tensorsWithRole(ir::Role::Output))
        std::cout << "  " << graph.tensor(t).name << " " << shapeString(graph.tensor(t).shape) << " "
                  << ir::toString(graph.tensor(t).dtype) << '\n';
    return Ok;
}

Registration inspect([] {
    Command c;
    c.name = "inspect";
    c.usage = "inspect MODEL [--batch B] [--seq S] [--json]";
    c.summary = "ops, tensors, parameters and op histogram of a model";
    c.options = modelOptions();
    c.options.push_back({"--json", "", "print one JSON object (ops, tensors, parameters, "
                                       "parameter_bytes, op_types, opaque_ops, scope_depth)"});
    c.run = runInspect;
    return c;
}());

} // namespace
} // namespace tapestry::cli
