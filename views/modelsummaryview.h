#pragma once

#include "ir/graph.h"

#include <QTreeWidget>

namespace tapestry::views {

// A table of the model's facts and its op histogram, as `tapestry-cli inspect`
// prints them.
class ModelSummaryView : public QTreeWidget {
    Q_OBJECT
public:
    explicit ModelSummaryView(QWidget *parent = nullptr);
    void setGraph(const ir::Graph &graph, const QString &source);
};

} // namespace tapestry::views
