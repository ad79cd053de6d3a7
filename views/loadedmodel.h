#pragma once

#include "ir/graph.h"
#include "layout/viewgraph.h"
#include "passes/coarsegraph.h"
#include "passes/subgraphclasses.h"

#include <QMetaType>
#include <QString>
#include <QStringList>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace tapestry::views {

// What a load worker hands back to the GUI thread: the model, its coarse
// graph and its classes, as one immutable value.
struct LoadedModel {
    QString source;  // what the user opened: a path or zoo:NAME
    std::shared_ptr<const ir::Graph> graph;
    std::shared_ptr<const passes::CoarseGraph> coarse;
    std::shared_ptr<const passes::SubgraphClasses> classes;
    std::string fingerprint;  // plan::modelFingerprint of the graph: what plans are checked against
    double loadSeconds = 0;
    double pruneSeconds = 0;
    QStringList notes;  // what the loader guessed (io::LoadOptions::note), shown with the status
    QString error;  // set instead of the fields above when loading failed
};

// Loads, coarsens and prunes; throws TapestryError. Safe on a worker thread.
// `cancelled` is polled between stages.
LoadedModel loadModelForView(const QString &source, const std::atomic_bool *cancelled = nullptr);

// The coarse nodes a view node shows: itself, or every node of a block's
// instances.
std::vector<passes::NodeId> coarseNodesOf(const LoadedModel &model, const layout::ViewNode &node);

} // namespace tapestry::views

Q_DECLARE_METATYPE(tapestry::views::LoadedModel)
