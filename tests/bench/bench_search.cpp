// Derivation time of the searches: tap with model loading, coarsening and
// pruning excluded and included, against depth and for large presets on 2D
// meshes; exact against tap at 24 layers. Prints figures, asserts nothing.
// "gpt" also times the whole `plan -o` path stage by stage (load, coarsen
// and prune, search, building and costing the plans, writing the plan
// file's JSON), for GPT-2 on 8 devices and GPT-3 175B on 2x8, and prints
// the 1000 / 12 layers ratio of the search and of the whole; and the whole
// as `tapestry-cli plan -o` runs it, the memory techniques chosen with the
// plan (searchTechniques, the reasons for each technique) and its ratio.
// "presets": every zoo preset on 8, 2x4 and 2x2x2 with its search time and
// its gap to the best reference plan under the planner's objective (tap is
// never to be worse: a row marked WORSE is a bug).
// "techniques": every zoo preset on 8, 2x4 and 8x8 with the memory
// techniques chosen with the plan (search time, settings searched, what
// it chose, fit, gap to the best reference plan with its techniques).
// "onelayer": every zoo preset cut to one layer (T5: one encoder and one
// decoder layer) on 2, 8 and 2x4, with its search time and its gap to the
// best reference plan: where the layer is no class, pruning finds small
// ones inside it (query, key and value projections), whose layouts
// multiply the searches of the rest.
// "moe": the mixtures of experts among the config.json samples on 8 and
// 8x8, their experts searched as one and every expert searched.
// "shapes": the shape search (pipeline x data x tensor) of the flagship
// presets on 64 and 1,024 devices.
// Arguments: case names to run (gpt, gpt2d, llama70b, llama8b, gpt3, mixtral,
// moe, resnet, mesh3d, exact, presets, techniques, onelayer, shapes); all when none are given.
#include "cost/objective.h"
#include "io/modelloader.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/planjson.h"
#include "search/exactsearch.h"
#include "search/techniquesearch.h"
#include "search/referenceplan.h"
#include "search/shapesearch.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <chrono>
#include <cstdio>
#include <set>
#include <string>

using namespace tapestry;

namespace {

double since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

sharding::Mesh mesh(const std::string &shape)
{
    const auto text = sharding::parseMeshText(shape);
    return sharding::findMeshProfile("dgx-h100")
        .mesh(text.sizes, text.names.empty() ? sharding::defaultAxisNames(text.sizes.size()) : text.names);
}

struct Timing {
    double search = 0, total = 0, stepTime = 0;
    std::size_t evaluated = 0;
};

Timing runTap(const std::string &source, const std::string &shape, const search::SearchOptions &options = {})
{
    const auto start = std::chrono::steady_clock::now();
    const auto g = io::loadModel(source);
    const auto classes = passes::Prune().run(g, passes::Coarsen().run(g));
    const auto r = search::tapSearch(g, classes, source, mesh(shape), options);
    return {r.stats.seconds, since(start), r.plan.cost.stepTime, r.stats.plansEvaluated};
}

void printTap(const std::string &label, const std::string &source, const std::string &shape)
{
    Timing t;
    try {
        t = runTap(source, shape);
    } catch (const TapestryError &e) {
        // A preset whose weights cannot fit the profile's devices on this
        // mesh has no plan to time; say so and go on with the other cases.
        std::printf("%-28s %-15s %s\n", label.c_str(), shape.c_str(), e.what());
        return;
    }
    std::printf("%-28s %-15s %12.2f %14.2f %12zu %14.4f\n", label.c_str(), shape.c_str(), t.search * 1e3, t.total * 1e3,
                t.evaluated, t.stepTime * 1e3);
}

// tap against the best reference plan that applies, under the objective.
// The best reference plan under the objective, by name ("" when none
// applies); with `techniques`, each with its memory techniques chosen.
std::pair<std::string, cost::Objective> bestReference(const ir::Graph &g, const std::string &source,
                                                      const sharding::Mesh &m, bool techniques)
{
    std::string bestName;
    auto best = cost::Objective::worst();
    for (const auto &[name, plan] : search::applicableReferencePlans(g, source, m)) {
        const auto theirs =
            cost::Objective::of(techniques ? search::chooseTechniques(plan, g, {}).cost : plan.cost);
        if (theirs < best) {
            best = theirs;
            bestName = name;
        }
    }
    return {bestName, best};
}

void printPresetGap(const std::string &source, const std::string &shape)
{
    const auto start = std::chrono::steady_clock::now();
    try {
        const auto g = io::loadModel(source);
        const auto m = mesh(shape);
        const auto classes = passes::Prune().run(g, passes::Coarsen().run(g));
        const auto r = search::tapSearch(g, classes, source, m);
        const double total = since(start);
        const auto mine = cost::Objective::of(r.plan.cost);
        const auto [bestName, best] = bestReference(g, source, m, false);
        const bool worse = !bestName.empty() && !noWorse(mine, best);
        const double gap = bestName.empty() || best.overshoot != mine.overshoot
                               ? 0.0
                               : 100.0 * (mine.stepTime - best.stepTime) / best.stepTime;
        std::printf("%-28s %-15s %12.2f %14.2f %14.4f %-14s %+9.2f%% %s%s\n", source.c_str(), shape.c_str(),
                    r.stats.seconds * 1e3, total * 1e3, r.plan.cost.stepTime * 1e3,
                    bestName.empty() ? "(none)" : bestName.c_str(), gap, mine.fits() ? "" : "no fit ",
                    worse ? "WORSE" : "");
    } catch (const TapestryError &e) {
        std::printf("%-28s %-15s %s\n", source.c_str(), shape.c_str(), e.what());
    }
    std::fflush(stdout);
}

// The search with the memory techniques chosen (searchTechniques, as
// `plan` runs it): its time, the settings it searched, what it chose,
// whether the plan fits, and its gap to the best reference plan with its
// own techniques chosen (a row marked WORSE is a bug).
void printTechniques(const std::string &source, const std::string &shape)
{
    const auto start = std::chrono::steady_clock::now();
    try {
        const auto g = io::loadModel(source);
        const auto m = mesh(shape);
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        auto run = [&](const sharding::Mesh &mm, const search::SearchOptions &o) {
            return search::tapSearch(g, coarse, classes, source, mm, o);
        };
        const auto r = search::searchTechniques(run, g, source, m, {}, {});
        const double total = since(start);
        const auto mine = cost::Objective::of(r.plan.cost);
        const auto [bestName, best] = bestReference(g, source, m, true);
        const bool worse = !bestName.empty() && !noWorse(mine, best);
        const double gap = bestName.empty() || best.overshoot != mine.overshoot
                               ? 0.0
                               : 100.0 * (mine.stepTime - best.stepTime) / best.stepTime;
        std::printf("%-22s %-9s %10.1f %10.1f %4zu %10.1f %9.2f %-5s %-14s %+8.2f%% %-s%s\n", source.c_str(),
                    shape.c_str(), r.stats.seconds * 1e3, total * 1e3, r.stats.techniquesTried,
                    r.plan.cost.stepTime * 1e3, static_cast<double>(r.plan.cost.memory.total()) / (1 << 30),
                    mine.fits() ? "yes" : "no", bestName.empty() ? "(none)" : bestName.c_str(), gap,
                    cost::describe(r.plan.costOptions.techniques).c_str(), worse ? " WORSE" : "");
    } catch (const TapestryError &e) {
        std::printf("%-22s %-9s %s\n", source.c_str(), shape.c_str(), e.what());
    }
    std::fflush(stdout);
}

// tap on `preset` from 12 to 1000 layers, the whole `plan -o` path stage
// by stage (load, coarsen and prune, search, building and costing the
// plans, writing the plan file's JSON), and the 1000 / 12 layers ratios of
// the search and of the whole.
void printDepth(const std::string &preset, const std::string &shape)
{
    double firstSearch = 0, lastSearch = 0, firstWhole = 0, lastWhole = 0, firstCommand = 0, lastCommand = 0;
    for (int layers : {12, 48, 96, 384, 1000}) {
        const std::string source = "zoo:" + preset + "?layers=" + std::to_string(layers);
        const auto start = std::chrono::steady_clock::now();
        const auto g = io::loadModel(source);
        const double load = since(start);
        const auto pruneStart = std::chrono::steady_clock::now();
        const auto classes = passes::Prune().run(g, passes::Coarsen().run(g));
        const double prune = since(pruneStart);
        const auto searchStart = std::chrono::steady_clock::now();
        const auto r = search::tapSearch(g, classes, source, mesh(shape));
        const double searchAndBuild = since(searchStart);
        const auto writeStart = std::chrono::steady_clock::now();
        const std::size_t bytes = plan::writePlanJson(r.plan).size();
        const double write = since(writeStart), whole = since(start);
        std::printf("%-28s %-15s %12.2f %14.2f %12zu %14.4f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f  %zu bytes\n",
                    (preset + " " + std::to_string(layers) + " layers").c_str(), shape.c_str(), r.stats.seconds * 1e3,
                    (load + prune + searchAndBuild) * 1e3, r.stats.plansEvaluated, r.plan.cost.stepTime * 1e3,
                    load * 1e3, prune * 1e3, r.stats.seconds * 1e3, (searchAndBuild - r.stats.seconds) * 1e3,
                    write * 1e3, whole * 1e3, bytes);
        (layers == 12 ? firstSearch : lastSearch) = r.stats.seconds;
        (layers == 12 ? firstWhole : lastWhole) = whole;

        // As the command runs it: the techniques chosen with the plan.
        const auto commandStart = std::chrono::steady_clock::now();
        const auto cg = io::loadModel(source);
        const auto coarse = passes::Coarsen().run(cg);
        const auto cclasses = passes::Prune().run(cg, coarse);
        auto run = [&](const sharding::Mesh &mm, const search::SearchOptions &o) {
            return search::tapSearch(cg, coarse, cclasses, source, mm, o);
        };
        const auto chosen = search::searchTechniques(run, cg, source, mesh(shape), {}, {});
        const auto reasons = search::techniqueReasons(chosen.plan, cg);
        const std::size_t commandBytes = plan::writePlanJson(chosen.plan).size();
        const double command = since(commandStart);
        std::printf("%-28s %-15s %12.2f %14s %12zu %14.4f %59.2f  %zu bytes, %zu settings, %zu reasons\n",
                    (preset + " " + std::to_string(layers) + " plan -o").c_str(), shape.c_str(),
                    chosen.stats.seconds * 1e3, "", chosen.stats.plansEvaluated, chosen.plan.cost.stepTime * 1e3,
                    command * 1e3, commandBytes, chosen.stats.techniquesTried, reasons.size());
        (layers == 12 ? firstCommand : lastCommand) = command;
    }
    std::printf("%s on %s: search time 1000 / 12 layers: %.2fx; whole plan -o (load, prune, search, build, write) "
                "1000 / 12 layers: %.2fx; with the memory techniques chosen, as tapestry-cli plan -o runs it: "
                "%.2fx\n",
                preset.c_str(), shape.c_str(), lastSearch / firstSearch, lastWhole / firstWhole,
                lastCommand / firstCommand);
}

} // namespace

int main(int argc, char **argv)
{
    std::set<std::string> cases(argv + 1, argv + argc);
    auto wanted = [&](const char *name) { return cases.empty() || cases.count(name); };
    std::printf("%-28s %-15s %12s %14s %12s %14s\n", "tap", "mesh", "search ms", "with load ms", "evaluated",
                "step ms");
    if (wanted("gpt")) {
        // The whole command stage by stage; "build" is what tapSearch spends
        // after its search: the searched plan and the least-communication
        // one built, their specs propagated and costed on the whole graph.
        std::printf("%-28s %-15s %12s %14s %12s %14s %9s %9s %9s %9s %9s %9s\n", "", "", "", "", "", "", "load",
                    "prune", "search", "build", "write", "whole");
        for (const auto &[preset, shape] : {std::pair{"gpt2", "8"}, std::pair{"gpt3-175b", "2x8"}})
            printDepth(preset, shape);
    }
    if (wanted("gpt2d"))
        printTap("tiny gpt2 1 layer", "zoo:gpt2?layers=1&batch=4&seq=32&hidden=64&heads=4&vocab=256", "2x2");
    if (wanted("llama70b"))
        printTap("llama3-70b", "zoo:llama3-70b", "2x8");
    if (wanted("llama8b"))
        printTap("llama3-8b", "zoo:llama3-8b", "8x8");
    if (wanted("gpt3"))
        printTap("gpt3-175b", "zoo:gpt3-175b", "2x8");
    // A mixture of experts (its experts tied) and a model of many classes
    // (its class layouts improved one at a time on 2D).
    if (wanted("mixtral")) {
        printTap("mixtral-8x7b", "zoo:mixtral-8x7b", "8");
        printTap("mixtral-8x7b", "zoo:mixtral-8x7b", "4x2");
    }
    // Mixtures of many experts (the config.json samples) on 8 and 8x8: the
    // search that runs one expert for all (SearchOptions::repeatsOnce)
    // against the one that runs every expert, where that takes under a
    // minute or so, with the two plans' step times (the same, or a bug).
    if (wanted("moe")) {
        std::printf("\n%-28s %-15s %12s %16s %10s %14s\n", "mixture (experts)", "mesh", "search ms",
                    "every expert ms", "ratio", "step ms");
        for (const auto &[config, experts] :
             {std::pair{"mixtral-8x7b", 8}, std::pair{"dbrx-base", 16}, std::pair{"qwen1.5-moe-a2.7b", 60},
              std::pair{"deepseek-v2-lite", 64}, std::pair{"qwen3-30b-a3b", 128}, std::pair{"deepseek-v3", 256}})
            for (const char *shape : {"8", "8x8"}) {
                const std::string source = std::string(TAPESTRY_SOURCE_DIR "/samples/configs/") + config + ".json";
                const std::string label = std::string(config) + " (" + std::to_string(experts) + ")";
                const Timing once = runTap(source, shape);
                std::printf("%-28s %-15s %12.2f", label.c_str(), shape, once.search * 1e3);
                if (experts > 128 && std::string(shape) != "8") {  // 659 s on this 2-core machine
                    std::printf(" %16s %10s %14.4f\n", "-", "-", once.stepTime * 1e3);
                    continue;
                }
                search::SearchOptions every;
                every.repeatsOnce = false;
                const Timing all = runTap(source, shape, every);
                std::printf(" %16.2f %9.1fx %14.4f%s\n", all.search * 1e3, all.search / once.search,
                            once.stepTime * 1e3, once.stepTime == all.stepTime ? "" : "  DIFFERS from every expert's");
            }
    }
    if (wanted("resnet"))
        printTap("resnet18 (onnx)", TAPESTRY_SOURCE_DIR "/samples/onnx/resnet18-shapes.onnx", "4x2");
    // 27 activation layouts per boundary on a 3D mesh; query, key and value
    // projected apart.
    if (wanted("mesh3d")) {
        printTap("gpt2", "zoo:gpt2", "2x2x2 (a, b, c)");
        printTap("bert-base", "zoo:bert-base", "2x2x2 (a, b, c)");
    }
    if (wanted("exact")) {
        const std::string source = "zoo:gpt2?layers=24";
        const auto g = io::loadModel(source);
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        const auto m = mesh("8");
        search::SearchOptions options;
        options.timeLimitSeconds = 600;
        const auto tap = search::tapSearch(g, classes, source, m, options);
        const auto exact = search::exactSearch(g, coarse, source, m, options);
        std::printf("\nexact vs tap, gpt2 24 layers on 8: exact %.3f s%s, tap %.3f s, ratio %.0fx; step time exact "
                    "%.4f ms, tap %.4f ms (%+.2f%%)\n",
                    exact.stats.seconds, exact.stats.optimal ? "" : " (time limit)", tap.stats.seconds,
                    exact.stats.seconds / tap.stats.seconds, exact.plan.cost.stepTime * 1e3,
                    tap.plan.cost.stepTime * 1e3,
                    100.0 * (tap.plan.cost.stepTime - exact.plan.cost.stepTime) / exact.plan.cost.stepTime);
    }
    if (wanted("presets")) {
        std::printf("\n%-28s %-15s %12s %14s %14s %-14s %10s\n", "preset", "mesh", "search ms", "with load ms",
                    "tap step ms", "best reference", "tap gap");
        for (const auto &preset : io::zoo::presets())
            for (const char *shape : {"8", "2x4", "2x2x2 (a, b, c)"})
                printPresetGap("zoo:" + preset.name, shape);
    }
    if (wanted("onelayer")) {
        std::printf("\n%-44s %-15s %12s %14s %14s %-14s %10s\n", "one layer", "mesh", "search ms", "with load ms",
                    "tap step ms", "best reference", "tap gap");
        for (const auto &preset : io::zoo::presets()) {
            if (preset.name == "mlp" || preset.name == "abc")
                continue;  // no layers
            const std::string source = "zoo:" + preset.name + "?layers=1" +
                                       (preset.name.rfind("t5", 0) == 0 ? "&decoder_layers=1" : "");
            for (const char *shape : {"2", "8", "2x4"})
                printPresetGap(source, shape);
        }
    }
    if (wanted("techniques")) {
        std::printf("\n%-22s %-9s %10s %10s %4s %10s %9s %-5s %-14s %9s %s\n", "preset", "mesh", "search ms",
                    "w/ load ms", "sets", "step ms", "GiB", "fits", "best reference", "tap gap", "techniques");
        for (const auto &preset : io::zoo::presets())
            for (const char *shape : {"8", "2x4", "8x8"})
                printTechniques("zoo:" + preset.name, shape);
    }
    if (wanted("shapes")) {
        // The shape search (pipeline x data x tensor) for the flagship
        // presets on 64 devices (8 nodes of 8) and 1,024 (128 of 8), the
        // dgx-a100 profile, Megatron's batch of 1,536 sequences (LLaMA-3 70B: 1,024 of
        // 2,048 tokens; of 8,192 its activations pass what a model may hold).
        std::printf("\n%-32s %8s %10s %8s  %s\n", "shapes", "devices", "search ms", "shapes", "best");
        const auto profile = sharding::findMeshProfile("dgx-a100");
        for (const char *source : {"zoo:gpt3-175b?batch=1536", "zoo:llama3-70b?batch=1024&seq=2048", "zoo:llama3-8b?batch=1536",
                                   "zoo:mixtral-8x7b?batch=1536"})
            for (int devices : {64, 1024}) {
                try {
                    const auto start = std::chrono::steady_clock::now();
                    const auto g = io::loadModel(source);
                    const auto classes = passes::Prune().run(g, passes::Coarsen().run(g));
                    search::ShapeOptions options;
                    options.devices = devices;
                    const auto r = search::searchShapes(g, classes, source, profile, options);
                    const auto &best = r.ranked.front();
                    std::printf("%-32s %8d %10.1f %8zu  %s, %s, %.3f s, %.1f TFLOP/s per device%s\n", source, devices,
                                since(start) * 1e3, r.ranked.size(), best.shape().c_str(),
                                std::string(cost::toString(best.recompute)).c_str(), best.cost.stepTime,
                                best.modelFlopsPerDevice / 1e12, best.cost.fitsMemory ? "" : " (does not fit)");
                } catch (const TapestryError &e) {
                    std::printf("%-32s %8d  %s\n", source, devices, e.what());
                }
            }
    }
    return 0;
}
