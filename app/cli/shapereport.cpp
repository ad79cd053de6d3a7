#include "cli/shapereport.h"

#include "cli/modelargs.h"
#include "cli/planreport.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/planjson.h"
#include "search/shapesearch.h"
#include "sharding/meshprofile.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace tapestry::cli {

namespace {

std::string gib(std::int64_t bytes)
{
    return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

std::string seconds(double s)
{
    return s >= 1 ? fmt::format("{:.3f} s", s) : fmt::format("{:.3f} ms", s * 1e3);
}

int wholeOption(const std::string &flag, const std::string &text)
{
    std::size_t used = 0;
    long n = 0;
    try {
        n = std::stol(text, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used != text.size() || n < 1 || n > sharding::kMaxMeshDevices)
        throw TapestryError(Error{flag, {}, "expects a whole number of devices from 1 to " +
                                                std::to_string(sharding::kMaxMeshDevices) + ", got '" + text + "'"});
    return static_cast<int>(n);
}

std::string schedule(const search::ShapeCandidate &c)
{
    if (c.pipeline == 1)
        return "-";
    if (c.schedule == cost::Schedule::Interleaved)
        return fmt::format("interleaved x{}", c.virtualStages);
    return std::string(cost::toString(c.schedule));
}

} // namespace

int runShapes(const Args &args)
{
    if (args.value("--mesh"))
        throw TapestryError(Error{"--devices", {}, "chooses the mesh's shape; --mesh fixes it: give one of them"});
    if (args.positional.size() != 1)
        throw TapestryError(Error{"plan", {}, "expected one MODEL (try 'tapestry-cli plan --help')"});
    search::ShapeOptions options;
    options.devices = wholeOption("--devices", *args.value("--devices"));
    auto profile = sharding::findMeshProfile(args.value("--mesh-profile").value_or(sharding::kDefaultMeshProfile));
    if (auto topology = args.value("--topology")) {
        const auto x = topology->find('x');
        if (x == std::string::npos)
            throw TapestryError(Error{"--topology", {}, "expects NODESxDEVICES_PER_NODE (8x8), got '" + *topology + "'"});
        const int nodes = wholeOption("--topology", topology->substr(0, x));
        const int perNode = wholeOption("--topology", topology->substr(x + 1));
        if (static_cast<long>(nodes) * perNode != options.devices)
            throw TapestryError(Error{"--topology", {}, fmt::format("{} nodes of {} are {} devices, not the {} of --devices",
                                                                    nodes, perNode, static_cast<long>(nodes) * perNode,
                                                                    options.devices)});
        options.devicesPerNode = perNode;
    }
    if (auto bytes = memoryFromArgs(args))
        profile.device.memoryBytes = *bytes;
    if (auto n = args.value("--pipeline-stages"))
        options.pipeline = wholeOption("--pipeline-stages", *n);
    if (auto n = args.value("--tensor-parallel"))
        options.tensor = wholeOption("--tensor-parallel", *n);
    if (auto flash = args.value("--flash-attention")) {
        if (*flash != "on" && *flash != "off" && *flash != "auto")
            throw TapestryError(Error{"--flash-attention", {}, "expects on, off or auto, got '" + *flash + "'"});
        options.flashAttention = *flash != "off";
    }
    if (auto r = args.value("--recompute"); r && *r != "auto") {
        const auto mode = cost::recomputeFromString(*r);
        if (!mode)
            throw TapestryError(Error{"--recompute", {}, "with --devices expects none, selective, full or auto, got '" + *r + "'"});
        options.recompute = *mode;
    }
    const std::string model = args.positional[0];
    const auto graph = loadModelFromArgs(model, args);
    const auto classes = passes::Prune().run(graph, passes::Coarsen().run(graph));
    ProgressBar bar("shape search");
    options.progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
    const auto result = search::searchShapes(graph, classes, model, profile, options);
    bar.finish();
    if (result.ranked.empty())
        throw TapestryError(Error{model, {}, "no shape of " + std::to_string(options.devices) + " devices applies" +
                                                 (result.skipped.empty() ? std::string() : ": " + result.skipped.front())});
    const int perNode = options.devicesPerNode > 0 ? options.devicesPerNode : profile.intraNodeDevices;
    if (args.has("--json")) {
        nlohmann::ordered_json j;
        j["model"] = model;
        j["devices"] = options.devices;
        j["devices_per_node"] = perNode;
        j["profile"] = profile.name;
        j["layers"] = result.layers;
        j["batch"] = result.batch;
        j["seconds"] = result.seconds;
        j["shapes"] = nlohmann::ordered_json::array();
        for (const auto &c : result.ranked) {
            nlohmann::ordered_json s;
            s["pipeline"] = c.pipeline;
            s["data"] = c.data;
            s["tensor"] = c.tensor;
            s["schedule"] = std::string(cost::toString(c.schedule));
            s["virtual_stages"] = c.virtualStages;
            s["micro_batches"] = c.microBatches;
            s["recompute"] = std::string(cost::toString(c.recompute));
            s["step_time_s"] = c.cost.stepTime;
            s["bubble_fraction"] = c.cost.bubbleFraction;
            s["p2p_s"] = c.cost.p2p;
            s["memory_per_device_bytes"] = c.cost.peakMemory;
            s["fits_memory"] = c.cost.fitsMemory;
            s["tokens_per_s"] = c.tokensPerSecond;
            s["model_flops_per_device"] = c.modelFlopsPerDevice;
            s["cuts"] = c.cost.cuts;
            j["shapes"].push_back(std::move(s));
        }
        j["skipped"] = result.skipped;
        if (auto path = args.value("-o")) {
            plan::writePlanFile(*path, search::shapePlan(graph, model, result.ranked.front()));
            j["plan_file"] = *path;
        }
        args.report() << j.dump(2) << '\n';
        return Ok;
    }
    auto &out = args.report();
    out << "model         " << model << " (" << result.layers << " layers, batch " << result.batch << ")\n";
    out << "cluster       " << options.devices << " x " << profile.device.name << ", nodes of " << perNode << " ["
        << profile.name << "]: " << profile.intraNode.name << " inside a node, " << profile.interNode.name
        << " between\n";
    out << fmt::format("shapes        {} costed in {:.2f} s ({} left out)\n\n", result.ranked.size(), result.seconds,
                       result.skipped.size());
    out << fmt::format("{:>4}  {:>8} {:>5} {:>6}  {:<15} {:>6}  {:<9} {:>12} {:>7} {:>12} {:>9}  {}\n", "rank", "pipeline",
                       "data", "tensor", "schedule", "micro", "recompute", "step", "bubble", "tokens/s", "TFLOP/s",
                       "memory per device");
    const std::size_t shown = std::min<std::size_t>(result.ranked.size(), 15);
    for (std::size_t i = 0; i < shown; ++i) {
        const auto &c = result.ranked[i];
        out << fmt::format("{:>4}  {:>8} {:>5} {:>6}  {:<15} {:>6}  {:<9} {:>12} {:>6.1f}% {:>12.0f} {:>9.1f}  {}{}\n",
                           i + 1, c.pipeline, c.data, c.tensor, schedule(c), c.microBatches,
                           std::string(cost::toString(c.recompute)), seconds(c.cost.stepTime),
                           100 * c.cost.bubbleFraction, c.tokensPerSecond, c.modelFlopsPerDevice / 1e12,
                           gib(c.cost.peakMemory), c.cost.fitsMemory ? "" : " (does not fit)");
    }
    if (shown < result.ranked.size())
        out << "      ... " << result.ranked.size() - shown << " more (--json lists every one)\n";
    const auto &best = result.ranked.front();
    out << "\nbest          " << best.shape() << ", " << schedule(best) << ", " << best.microBatches
        << " micro-batches, recomputation " << cost::toString(best.recompute) << "\n";
    out << "  stage mesh  " << best.stageMesh.toString();
    if (best.pipeline > 1)
        out << "; stages over " << best.pipelineLink;
    out << "\n";
    if (best.pipeline > 1) {
        std::string cuts;
        for (int c : best.cost.cuts)
            cuts += (cuts.empty() ? "" : ", ") + std::to_string(c);
        out << fmt::format("  stages      {} chunk(s) cut before layers {}; bubble {} ({:.1f}% of the step), "
                           "sends {} ({} each)\n",
                           best.cost.cuts.size() + 1, cuts, seconds(best.cost.bubble), 100 * best.cost.bubbleFraction,
                           seconds(best.cost.p2p), gib(best.cost.p2pBytes));
    }
    out << fmt::format("  memory      {} of {} on the fullest stage (model states {}, activations of {:.1f} micro-batch(es) {})\n",
                       gib(best.cost.peakMemory), gib(best.cost.memoryCapacity),
                       gib(best.cost.stages.front().modelStates), best.cost.stages.front().inFlight,
                       gib(best.cost.stages.front().activations));
    for (const auto &s : result.skipped)
        out << "left out      " << s << "\n";
    if (auto path = args.value("-o")) {
        plan::writePlanFile(*path, search::shapePlan(graph, model, best));
        if (*path != "-")
            out << "\nplan written to " << *path << " (the best shape's)\n";
    }
    return Ok;
}

} // namespace tapestry::cli
