#pragma once

#include "plannedmodel.h"

#include <QWidget>

QT_BEGIN_NAMESPACE
class QChart;
class QChartView;
QT_END_NAMESPACE

namespace tapestry::views {

// Where the step goes, as stacked bars: compute and communication per
// subgraph class and outside classes, communication per collective kind,
// and memory per device (parameters, gradients, optimizer states,
// activations) against the device's capacity.
class CostChartsView : public QWidget {
    Q_OBJECT
public:
    explicit CostChartsView(QWidget *parent = nullptr);
    // Charts of the plan's cost. Drawn when the view is on screen: the
    // studio hands it every edit, and charts nobody sees are not rebuilt.
    void setPlanned(const PlannedModel &planned, const std::map<int, QString> &classNames);
    void clearCharts();
    // Series names and bar categories of the step chart, for tests.
    QStringList stepCategories() const;

protected:
    void showEvent(QShowEvent *event) override;

private:
    void draw();

    QChartView *m_step;
    QChartView *m_memory;
    // What setPlanned() was last given, until it is drawn.
    PlannedModel m_pending;
    std::map<int, QString> m_pendingNames;
    bool m_stale = false;
};

} // namespace tapestry::views
