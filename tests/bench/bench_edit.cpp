// The studio's edit path on a large model: pinning one weight of every
// layer (a class edit) and costing the plan again, as the studio does for
// each pin (plan::Recoster: what the edit changed), beside costing the
// whole plan afresh. The studio's target is one frame (16 ms) for
// gpt3-175b. Prints figures only (best of several runs); nothing asserts
// on timings.
#include "io/modelloader.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "cost/costmodel.h"
#include "plan/plan.h"
#include "analysis/candidates.h"
#include "analysis/explain.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

using namespace tapestry;

namespace {

double bestMs(const std::function<void()> &work, int runs = 5)
{
    double best = 1e300;
    for (int r = 0; r < runs; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        work();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

} // namespace

int main(int argc, char **argv)
{
    const std::string source = argc > 1 ? argv[1] : "zoo:gpt3-175b";
    const std::string shape = argc > 2 ? argv[2] : "8";
    const auto graph = io::loadModel(source);
    const auto coarse = passes::Coarsen().run(graph);
    const auto classes = passes::Prune().run(graph, coarse);
    const auto sizes = sharding::parseMeshShape(shape);
    const auto mesh = sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
    const auto plan = search::referencePlan(graph, source, mesh, search::ReferenceMethod::Megatron);

    // The class' first weight, pinned to its cheapest other choice.
    const auto &cls = classes.classes.front();
    std::string weight;
    for (auto t : cls.instances[cls.representative].parameters)
        if (weight.empty() && graph.tensor(t).shape.size() >= 2)
            weight = graph.tensor(t).name;
    double explainerMs = 0, explainMs = 0;
    analysis::Explanation explanation;
    explainerMs = bestMs([&] { analysis::Explainer e(graph, plan, source); });
    analysis::Explainer explainer(graph, plan, source);
    explainMs = bestMs([&] { explanation = explainer.explainTensor(weight); });
    const auto &alt = explanation.alternatives.size() > 1 ? explanation.alternatives[1] : explanation.alternatives[0];

    plan::Plan edited = plan;
    const double pinMs = bestMs([&] {
        edited = plan;
        for (std::size_t i = 0; i < cls.instances.size(); ++i) {
            const auto same = analysis::counterparts(graph, classes, 0, i);
            for (const auto &[name, spec] : alt.changes)
                if (auto t = graph.findTensor(name))
                    if (auto it = same.find(*t); it != same.end())
                        edited.specs[graph.tensor(it->second).name] = {spec, plan::SpecSource::Override};
        }
    });
    const double recostMs = bestMs([&] { plan::recostPlan(edited, graph, source); });
    // The studio's path: one Recoster per model, the derived plan costed
    // first, then the edit costs what it changes.
    plan::Recoster recoster(graph);
    double incrementalMs = 1e300;
    std::size_t resolved = 0;
    for (int r = 0; r < 5; ++r) {
        plan::Plan before = plan, after = edited;
        recoster.recost(before, source);
        const auto t0 = std::chrono::steady_clock::now();
        recoster.recost(after, source);
        incrementalMs =
            std::min(incrementalMs, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        resolved = recoster.resolvedOps();
        if (!(after.cost == edited.cost)) {
            std::printf("bench_edit: the incremental cost differs from a fresh one\n");
            return 1;
        }
    }
    std::vector<sharding::ShardingSpec> specs;
    const double validateMs = bestMs([&] { specs = plan::planSpecs(edited, graph, source); });
    const double evaluateMs = bestMs([&] { cost::evaluatePlan(graph, edited.mesh, specs, edited.costOptions); });

    std::printf("bench_edit: %s on %s (megatron plan), %zu ops, class of %zu instances\n", source.c_str(),
                mesh.toString().c_str(), graph.opCount(), cls.instances.size());
    std::printf("  pin %s to %s in every instance\n", weight.c_str(), alt.spec.toPlacements().c_str());
    std::printf("  explainer built (once per plan)   %8.2f ms\n", explainerMs);
    std::printf("  alternatives of the weight        %8.2f ms\n", explainMs);
    std::printf("  apply to every instance           %8.2f ms\n", pinMs);
    std::printf("  re-cost the whole plan            %8.2f ms\n", recostMs);
    std::printf("    of which: check the plan         %8.2f ms\n", validateMs);
    std::printf("              cost every op          %8.2f ms\n", evaluateMs);
    std::printf("  re-cost what the edit changed     %8.2f ms  (%zu of %zu ops resolved again)\n", incrementalMs,
                resolved, graph.opCount());
    std::printf("  edit (apply + re-cost)            %8.2f ms  (target: 16 ms, one frame; %.2f ms costing it all)\n",
                pinMs + incrementalMs, pinMs + recostMs);
    std::printf("  step time %.3f ms -> %.3f ms\n", plan.cost.stepTime * 1e3, edited.cost.stepTime * 1e3);
    return 0;
}
