#pragma once

#include "cost/pipeline.h"
#include "plan/plan.h"
#include "plan/runreport.h"

#include <QDockWidget>
#include <QWidget>

class QLabel;
class QLineEdit;

namespace tapestry::views {

class PlanDocument;

// The schedule of a pipelined plan as it runs one step: a row per stage,
// each micro-batch's forward and backward where the stage computes them,
// the bubble where it waits (cost::pipelineTimeline).
class PipelineView : public QWidget {
    Q_OBJECT
public:
    explicit PipelineView(QWidget *parent = nullptr);
    void setTimeline(const cost::PipelineTimeline &timeline, const std::vector<QString> &stageNames);
    void clear();
    const cost::PipelineTimeline &timeline() const { return m_timeline; }
    QSize minimumSizeHint() const override { return {320, 120}; }

protected:
    void paintEvent(QPaintEvent *event) override;

private:
    cost::PipelineTimeline m_timeline;
    std::vector<QString> m_names;
};

// View › Pipeline schedule: the open plan's pipeline, costed again from its
// cuts whenever the plan changes; a line saying how to get one where the
// plan runs on one stage.
class PipelineDock : public QDockWidget {
    Q_OBJECT
public:
    explicit PipelineDock(PlanDocument *document, QWidget *parent = nullptr);
    PipelineView *view() const { return m_view; }
    QString caption() const;
    // The stage boundaries as the editor shows them ("6, 12, 18"); set and
    // applied as a user types them and presses Enter (PlanDocument::setPipelineCuts).
    QLineEdit *cutsEdit() const { return m_cuts; }
    // Applies the editor's cuts; false (and a line saying why) where they
    // do not read as layer numbers or do not fit the pipeline.
    bool applyCuts();
    // Cuts balanced by the stages' costs again.
    bool balance();
    // The schedule as a run of the plan measured it (its last step, the
    // executor's report), under the predicted one; until the plan changes.
    void showMeasured(const plan::ReportPipeline &run, double predictedStep);
    PipelineView *measuredView() const { return m_measured; }
    QString measuredCaption() const;

private:
    void refresh();

    PlanDocument *m_document;
    PipelineView *m_view;
    QLabel *m_caption;
    QWidget *m_editor;
    QLineEdit *m_cuts;
    QLabel *m_problem;
    QLabel *m_measuredCaption;
    PipelineView *m_measured;
};

} // namespace tapestry::views
