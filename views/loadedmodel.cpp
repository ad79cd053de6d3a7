#include "loadedmodel.h"

#include "io/modelloader.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/fingerprint.h"

#include <QElapsedTimer>

#include <atomic>

namespace tapestry::views {

LoadedModel loadModelForView(const QString &source, const std::atomic_bool *cancelled)
{
    auto check = [&] {
        if (cancelled && cancelled->load())
            throw TapestryError(Error{source.toStdString(), {}, "cancelled"});
    };
    LoadedModel m;
    m.source = source;
    QElapsedTimer timer;
    timer.start();
    io::LoadOptions options;
    options.note = [&m](const std::string &line) { m.notes << QString::fromStdString(line); };
    auto graph = std::make_shared<ir::Graph>(io::loadModel(source.toStdString(), options));
    m.loadSeconds = timer.nsecsElapsed() / 1e9;
    check();
    timer.restart();
    auto coarse = std::make_shared<passes::CoarseGraph>(passes::Coarsen().run(*graph));
    check();
    auto classes = std::make_shared<passes::SubgraphClasses>(passes::Prune().run(*graph, *coarse));
    m.pruneSeconds = timer.nsecsElapsed() / 1e9;
    m.fingerprint = plan::modelFingerprint(*graph);
    m.graph = std::move(graph);
    m.coarse = std::move(coarse);
    m.classes = std::move(classes);
    return m;
}

std::vector<passes::NodeId> coarseNodesOf(const LoadedModel &model, const layout::ViewNode &node)
{
    if (node.kind == layout::ViewNode::Kind::Coarse)
        return {node.node};
    std::vector<passes::NodeId> nodes;
    const auto &cls = model.classes->classes[node.cls.index()];
    for (auto i : node.instances)
        nodes.insert(nodes.end(), cls.instances[i].nodes.begin(), cls.instances[i].nodes.end());
    return nodes;
}

} // namespace tapestry::views
