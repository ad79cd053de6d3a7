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
    void setPlanned(const PlannedModel &planned, const std::map<int, QString> &classNames);
    void clearCharts();
    // Series names and bar categories of the step chart, for tests.
    QStringList stepCategories() const;

private:
    QChartView *m_step;
    QChartView *m_memory;
};

} // namespace tapestry::views
