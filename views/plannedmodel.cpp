#include "plannedmodel.h"

#include "ir/error.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <QElapsedTimer>

namespace tapestry::views {

PlannedModel groupPlan(const LoadedModel &model, plan::Plan p)
{
    PlannedModel out;
    out.specs = plan::planSpecs(p, *model.graph, model.source.toStdString());
    std::map<std::string, std::string> opToClass;
    std::map<std::string, int> opToNode;
    for (std::size_t i = 0; i < model.graph->opCount(); ++i) {
        const auto &name = model.graph->ops()[i].name;
        const auto cls = model.classes->classOfOp[i];
        if (cls.valid())
            opToClass[name] = "class " + std::to_string(cls.value);
        const auto node = model.coarse->nodeOf(ir::OpId(static_cast<std::int32_t>(i)));
        if (node.valid())
            opToNode[name] = node.value;
    }
    out.byClass = cost::aggregate(p.cost.byOp, opToClass);
    for (const auto &[op, totals] : p.cost.byOp) {
        auto it = opToNode.find(op);
        if (it != opToNode.end())
            out.byNode[it->second] += totals;
    }
    out.plan = std::make_shared<const plan::Plan>(std::move(p));
    return out;
}

PlannedModel derivePlan(const LoadedModel &model, const PlanRequest &request)
{
    try {
        const auto sizes = sharding::parseMeshShape(request.meshShape.toStdString());
        const auto profile = sharding::findMeshProfile(request.profile.toStdString());
        const auto mesh = profile.mesh(sizes, sharding::defaultAxisNames(sizes.size()));
        QElapsedTimer timer;
        timer.start();
        plan::Plan p;
        const std::string source = model.source.toStdString();
        if (request.method == QLatin1String("tap")) {
            search::SearchOptions options;
            options.pinned = request.pinned;
            p = search::tapSearch(*model.graph, *model.classes, source, mesh, options).plan;
        } else {
            const auto method = search::referenceMethodFromString(request.method.toStdString());
            if (!method)
                throw TapestryError(Error{request.method.toStdString(), {}, "unknown plan method"});
            p = search::referencePlan(*model.graph, source, mesh, *method);
        }
        const double seconds = timer.nsecsElapsed() / 1e9;
        PlannedModel out = groupPlan(model, std::move(p));
        out.searchSeconds = seconds;
        return out;
    } catch (const std::exception &e) {
        PlannedModel failed;
        failed.error = QString::fromUtf8(e.what());
        return failed;
    }
}

} // namespace tapestry::views
