#pragma once

#include "cost/costoptions.h"
#include "cost/plancost.h"

#include "plan/plan.h"

#include <QWidget>

namespace tapestry::views {

// One line under the graph: step time, communication against compute, and
// memory per device against capacity (red when the plan does not fit), the
// memory bar split into parameters, gradients, optimizer state and
// activations, with the memory techniques the plan uses.
class CostSummaryBar : public QWidget {
    Q_OBJECT
public:
    explicit CostSummaryBar(QWidget *parent = nullptr);

    void setCost(const cost::PlanCost &cost, const QString &planLabel, const cost::Techniques &techniques = {}, const plan::PlanPipeline *pipeline = nullptr);
    void clearCost();
    // What a run of the plan measured ("measured 186 ms on 4 ranks"), shown
    // beside the prediction until the plan changes.
    void setMeasured(const QString &text);
    QString measuredText() const { return m_measuredText; }
    QString text() const { return m_text; }
    // The summary as last painted, elided to the room the bars leave it.
    QString shownText() const { return m_shownText; }
    bool fits() const { return m_fits; }
    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent *event) override;

private:
    bool m_hasCost = false;
    bool m_fits = true;
    double m_commShare = 0;
    double m_memoryShare = 0;
    // Shares of capacity (of the total when there is no capacity):
    // parameters, gradients, optimizer state, activations.
    double m_parts[4] = {0, 0, 0, 0};
    QString m_text;
    QString m_memoryText;
    QString m_measuredText;
    QString m_shownText;
};

} // namespace tapestry::views
