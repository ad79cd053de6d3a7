#include "costchartsview.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QHorizontalStackedBarSeries>
#include <QLineSeries>
#include <QValueAxis>

#include <map>
#include <utility>

namespace tapestry::views {

CostChartsView::CostChartsView(QWidget *parent)
    : QWidget(parent), m_step(new QChartView(this)), m_memory(new QChartView(this))
{
    auto *layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_step, 3);
    layout->addWidget(m_memory, 2);
    setMinimumHeight(280);  // room for a bar per class and per collective
    for (auto *view : {m_step, m_memory})
        view->setRenderHint(QPainter::Antialiasing);
    clearCharts();
}

void CostChartsView::clearCharts()
{
    m_pending = {};
    m_pendingNames.clear();
    m_stale = false;
    for (auto *view : {m_step, m_memory}) {
        auto *chart = new QChart;
        chart->setTitle(tr("No plan"));
        view->setChart(chart);
    }
}

QStringList CostChartsView::stepCategories() const
{
    if (m_stale)
        const_cast<CostChartsView *>(this)->draw();
    for (auto *axis : m_step->chart()->axes(Qt::Vertical))
        if (auto *categories = qobject_cast<QBarCategoryAxis *>(axis))
            return categories->categories();
    return {};
}

void CostChartsView::setPlanned(const PlannedModel &planned, const std::map<int, QString> &classNames)
{
    if (!planned.plan) {
        clearCharts();
        return;
    }
    m_pending = planned;
    m_pendingNames = classNames;
    m_stale = true;
    if (isVisible())
        draw();
}

void CostChartsView::showEvent(QShowEvent *event)
{
    if (m_stale)
        draw();
    QWidget::showEvent(event);
}

void CostChartsView::draw()
{
    m_stale = false;
    const PlannedModel &planned = m_pending;
    const auto &classNames = m_pendingNames;
    const auto &cost = planned.plan->cost;
    // Step time: one bar per class (whole class, all instances) and one per
    // collective kind, compute and communication stacked, in ms.
    auto *compute = new QBarSet(tr("compute"));
    auto *comm = new QBarSet(tr("communication"));
    compute->setColor(QColor(0x64b5f6));
    comm->setColor(QColor(0xffa726));
    QStringList categories;
    for (const auto &[group, totals] : planned.byClass) {
        QString label = QString::fromStdString(group);
        if (group.rfind("class ", 0) == 0) {
            const int id = std::stoi(group.substr(6));
            if (auto it = classNames.find(id); it != classNames.end())
                label = it->second;
        } else {
            label = tr("outside classes");
        }
        categories << label;
        *compute << totals.compute * 1e3;
        *comm << totals.comm * 1e3;
    }
    // Collectives by kind and phase ("all-reduce · backward"), in step order.
    std::map<std::pair<int, std::string>, double> byKindPhase;
    for (const auto &c : cost.collectives)
        byKindPhase[{static_cast<int>(c.phase), std::string(sharding::toString(c.kind))}] += c.time;
    for (const auto &[key, seconds] : byKindPhase) {
        categories << QStringLiteral("%1 · %2")
                          .arg(QString::fromStdString(key.second),
                               QString::fromUtf8(cost::toString(static_cast<cost::Phase>(key.first))));
        *compute << 0.0;
        *comm << seconds * 1e3;
    }
    auto *stepSeries = new QHorizontalStackedBarSeries;
    stepSeries->append(compute);
    stepSeries->append(comm);
    auto *stepChart = new QChart;
    stepChart->addSeries(stepSeries);
    stepChart->setTitle(tr("Step time by class and by collective, forward and backward (ms)"));
    auto *categoryAxis = new QBarCategoryAxis;
    categoryAxis->append(categories);
    stepChart->addAxis(categoryAxis, Qt::AlignLeft);
    stepSeries->attachAxis(categoryAxis);
    auto *msAxis = new QValueAxis;
    msAxis->setLabelFormat(QStringLiteral("%.1f"));
    stepChart->addAxis(msAxis, Qt::AlignBottom);
    stepSeries->attachAxis(msAxis);
    stepChart->legend()->setAlignment(Qt::AlignBottom);
    m_step->setChart(stepChart);

    // Memory per device, stacked, with the capacity as a line.
    const double gib = 1024.0 * 1024 * 1024;
    auto *memorySeries = new QHorizontalStackedBarSeries;
    const std::pair<const char *, std::int64_t> parts[] = {{"parameters", cost.memory.parameters},
                                                           {"gradients", cost.memory.gradients},
                                                           {"optimizer", cost.memory.optimizer},
                                                           {"activations", cost.memory.activations}};
    const QColor colours[] = {QColor(0x81c784), QColor(0x4db6ac), QColor(0x9575cd), QColor(0xf06292)};
    int c = 0;
    for (const auto &[name, bytes] : parts) {
        auto *set = new QBarSet(tr(name));
        set->setColor(colours[c++]);
        *set << static_cast<double>(bytes) / gib;
        memorySeries->append(set);
    }
    auto *memoryChart = new QChart;
    memoryChart->addSeries(memorySeries);
    memoryChart->setTitle(cost.fitsMemory ? tr("Memory per device (GiB)") : tr("Memory per device (GiB): DOES NOT FIT"));
    auto *deviceAxis = new QBarCategoryAxis;
    deviceAxis->append(tr("device"));
    memoryChart->addAxis(deviceAxis, Qt::AlignLeft);
    memorySeries->attachAxis(deviceAxis);
    auto *gibAxis = new QValueAxis;
    const double capacity = static_cast<double>(cost.memoryCapacity) / gib;
    gibAxis->setRange(0, std::max(capacity, static_cast<double>(cost.memory.total()) / gib) * 1.05);
    memoryChart->addAxis(gibAxis, Qt::AlignBottom);
    memorySeries->attachAxis(gibAxis);
    auto *capacityLine = new QLineSeries;
    capacityLine->setName(tr("capacity"));
    capacityLine->setPen(QPen(QColor(0xc62828), 2, Qt::DashLine));
    *capacityLine << QPointF(capacity, -0.5) << QPointF(capacity, 0.5);
    memoryChart->addSeries(capacityLine);
    auto *lineY = new QValueAxis;
    lineY->setRange(-0.5, 0.5);
    lineY->setVisible(false);
    memoryChart->addAxis(lineY, Qt::AlignRight);
    capacityLine->attachAxis(gibAxis);
    capacityLine->attachAxis(lineY);
    memoryChart->legend()->setAlignment(Qt::AlignBottom);
    m_memory->setChart(memoryChart);
}

} // namespace tapestry::views
