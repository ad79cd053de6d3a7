#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"

#include <QDockWidget>

namespace tapestry::views {

class MeshView;
class PlanDocument;
struct CollectiveStep;

// The "Device mesh" dock: the mesh view with its step buttons. Shows the
// document's selected node (its main weight and its collectives, step by
// step) or a tensor asked for.
class MeshDock : public QDockWidget {
    Q_OBJECT
public:
    explicit MeshDock(PlanDocument *document, QWidget *parent = nullptr);

    MeshView *view() const { return m_view; }
    // A tensor as the plan splits it over the mesh.
    void showTensor(ir::TensorId tensor);
    // A coarse node's largest weight (or first output), with the node's
    // collectives as steps: the moved tensor before and after each.
    void showNode(passes::NodeId node);
    // The steps showNode shows for `node`, in the plan's order.
    QVector<CollectiveStep> collectiveSteps(passes::NodeId node) const;

signals:
    void failed(const QString &message);

private:
    PlanDocument *m_document;
    MeshView *m_view;
};

} // namespace tapestry::views
