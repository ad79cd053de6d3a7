#include "plannedmodel.h"

#include "ir/error.h"
#include "search/pinnedplan.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <QElapsedTimer>

namespace tapestry::views {

PlannedModel groupPlan(const LoadedModel &model, plan::Plan p)
{
    PlannedModel out;
    const std::string input = model.source.toStdString();
    out.specs = model.fingerprint.empty() ? plan::planSpecs(p, *model.graph, input)
                                          : plan::planSpecs(p, *model.graph, input, model.fingerprint);
    // Summed in the breakdown's (name) order, as cost::aggregate sums; the
    // studio does this on every edit, so ops are found by the graph's name
    // index rather than through maps built per call.
    const std::string other = "(other)";
    std::vector<std::string> className;
    for (const auto &[op, totals] : p.cost.byOp) {
        const auto id = model.graph->findOp(op);
        const auto cls = id ? model.classes->classOfOp[id->index()] : passes::ClassId();
        if (cls.valid()) {
            if (className.size() <= cls.index())
                className.resize(cls.index() + 1);
            if (className[cls.index()].empty())
                className[cls.index()] = "class " + std::to_string(cls.value);
        }
        out.byClass[cls.valid() ? className[cls.index()] : other] += totals;
        const auto node = id ? model.coarse->nodeOf(*id) : passes::NodeId();
        if (node.valid())
            out.byNode[node.value] += totals;
    }
    out.plan = std::make_shared<const plan::Plan>(std::move(p));
    return out;
}

PlannedModel derivePlan(const LoadedModel &model, const PlanRequest &request, const PlanControl &control)
{
    try {
        const auto text = sharding::parseMeshText(request.meshShape.toStdString());
        const auto profile = sharding::findMeshProfile(request.profile.toStdString());
        const auto mesh =
            profile.mesh(text.sizes, text.names.empty() ? sharding::defaultAxisNames(text.sizes.size()) : text.names);
        QElapsedTimer timer;
        timer.start();
        plan::Plan p;
        const std::string source = model.source.toStdString();
        if (request.method == QLatin1String("tap")) {
            search::SearchOptions options;
            options.pinned = request.pinned;
            if (const auto cancel = control.cancel)
                options.cancelled = [cancel] { return cancel->load(); };
            options.progress = control.progress;
            auto run = [&](const sharding::Mesh &m, const search::SearchOptions &o) {
                return search::tapSearch(*model.graph, *model.coarse, *model.classes, source, m, o);
            };
            auto result = search::searchTechniques(run, *model.graph, source, mesh, options, request.techniques);
            if (request.pinnedFrom && !request.pinned.empty())
                search::keepPinnedPlanIfBetter(result, *request.pinnedFrom, *model.graph, "the pinned plan");
            p = std::move(result.plan);
        } else {
            const auto method = search::referenceMethodFromString(request.method.toStdString());
            if (!method)
                throw TapestryError(Error{request.method.toStdString(), {}, "unknown plan method"});
            p = search::chooseTechniques(search::referencePlan(*model.graph, source, mesh, *method), *model.graph,
                                         request.techniques);
        }
        const double seconds = timer.nsecsElapsed() / 1e9;
        PlannedModel out = groupPlan(model, std::move(p));
        out.searchSeconds = seconds;
        return out;
    } catch (const std::exception &e) {
        PlannedModel failed;
        failed.error = QString::fromUtf8(e.what());
        failed.cancelled = control.cancel && control.cancel->load();
        return failed;
    }
}

} // namespace tapestry::views
