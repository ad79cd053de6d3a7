#pragma once

#include "ir/graph.h"

#include <QDockWidget>

namespace tapestry::views {

class InspectorView;
class PlanDocument;

// The "Inspector" dock: the selected node or tensor, with the document's
// plan for it (sharding, cost, collectives, the alternatives to pin).
class InspectorDock : public QDockWidget {
    Q_OBJECT
public:
    explicit InspectorDock(PlanDocument *document, QWidget *parent = nullptr);

    InspectorView *view() const { return m_view; }

signals:
    // The user picked a tensor's row.
    void tensorChosen(ir::TensorId tensor);
    void failed(const QString &message);

private:
    void installSections();

    PlanDocument *m_document;
    InspectorView *m_view;
};

} // namespace tapestry::views
