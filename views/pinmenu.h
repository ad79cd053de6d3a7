#pragma once

#include "layout/viewgraph.h"

#include <QMenu>

namespace tapestry::views {

class PlanDocument;

// A node's context menu: every legal spec of each of its weights with what
// it would cost, pinned through the document when chosen; whether pins go
// to the whole class; the class' plan candidates.
class PinMenu : public QMenu {
    Q_OBJECT
public:
    PinMenu(PlanDocument *document, const layout::ViewNode &node, QWidget *parent = nullptr);

    // Set when the weights' alternatives could not be explained; the menu
    // is then incomplete and not to be shown.
    QString error() const { return m_error; }

signals:
    void candidatesRequested(int classId);

private:
    QString m_error;
};

} // namespace tapestry::views
