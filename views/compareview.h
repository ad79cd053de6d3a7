#pragma once

#include "analysis/plandiff.h"

#include <QTreeWidget>

namespace tapestry::views {

// Two plans side by side: step time, communication, compute and memory
// deltas, the cost per subgraph class and per collective kind in both, and
// every tensor the plans store differently.
class CompareView : public QTreeWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget *parent = nullptr);
    void setDiff(const analysis::PlanDiff &diff, const QString &nameA, const QString &nameB);
    void clearDiff();
};

} // namespace tapestry::views
