#include "pipelinedock.h"

#include "plandocument.h"

#include "ir/error.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QPainter>
#include <QPaintEvent>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace tapestry::views {

namespace {

QString duration(double s)
{
    return s >= 1 ? QStringLiteral("%1 s").arg(s, 0, 'f', 3) : QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', 3);
}

} // namespace

PipelineView::PipelineView(QWidget *parent) : QWidget(parent)
{
    setObjectName(QStringLiteral("pipelineView"));
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
}

void PipelineView::setTimeline(const cost::PipelineTimeline &timeline, const std::vector<QString> &stageNames)
{
    m_timeline = timeline;
    m_names = stageNames;
    update();
}

void PipelineView::clear()
{
    m_timeline = {};
    m_names.clear();
    update();
}

void PipelineView::paintEvent(QPaintEvent *)
{
    QPainter painter(this);
    painter.fillRect(rect(), palette().base());
    const auto &stages = m_timeline.stages;
    if (stages.empty() || m_timeline.makespan <= 0)
        return;
    const QFontMetrics fm(font());
    int labelWidth = 0;
    for (const auto &n : m_names)
        labelWidth = std::max(labelWidth, fm.horizontalAdvance(n));
    const int left = labelWidth + 12, right = 8, top = 6, legend = fm.height() + 8;
    const int rows = static_cast<int>(stages.size());
    const double rowHeight = std::max(6.0, (height() - top - legend - 4.0) / rows);
    const double scale = (width() - left - right) / m_timeline.makespan;
    const QColor forward(70, 130, 200), backward(90, 170, 110), idle(palette().alternateBase().color());
    for (int s = 0; s < rows; ++s) {
        const double y = top + s * rowHeight;
        const QRectF row(left, y + 1, m_timeline.makespan * scale, rowHeight - 2);
        painter.fillRect(row, idle);  // waiting: the bubble
        if (s < static_cast<int>(m_names.size())) {
            painter.setPen(palette().text().color());
            painter.drawText(QRectF(4, y, labelWidth + 4, rowHeight), Qt::AlignVCenter | Qt::AlignLeft, m_names[s]);
        }
        for (const auto &slot : stages[static_cast<std::size_t>(s)]) {
            const QRectF r(left + slot.start * scale, y + 1, std::max(0.5, (slot.end - slot.start) * scale),
                           rowHeight - 2);
            QColor c = slot.backward ? backward : forward;
            if (slot.chunk % 2 == 1)
                c = c.darker(125);  // the second chunk of an interleaved stage
            painter.fillRect(r, c);
            const QString n = QString::number(slot.microBatch);
            if (r.width() > fm.horizontalAdvance(n) + 4 && r.height() > fm.height()) {
                painter.setPen(Qt::white);
                painter.drawText(r, Qt::AlignCenter, n);
            }
        }
    }
    // The legend.
    const double y = top + rows * rowHeight + 4;
    int x = left;
    for (const auto &[colour, text] : {std::pair{forward, tr("forward")}, {backward, tr("backward")}, {idle, tr("idle (bubble)")}}) {
        painter.fillRect(QRectF(x, y + 2, 12, fm.height() - 4), colour);
        painter.setPen(palette().text().color());
        painter.drawText(QPointF(x + 16, y + fm.ascent()), text);
        x += 16 + fm.horizontalAdvance(text) + 14;
    }
}

PipelineDock::PipelineDock(PlanDocument *document, QWidget *parent)
    : QDockWidget(tr("Pipeline schedule"), parent), m_document(document), m_view(new PipelineView(this)),
      m_caption(new QLabel(this)), m_measuredCaption(new QLabel(this)), m_measured(new PipelineView(this))
{
    setObjectName(QStringLiteral("pipeline"));
    auto *panel = new QWidget(this);
    auto *layout = new QVBoxLayout(panel);
    layout->setContentsMargins(4, 4, 4, 4);
    m_caption->setObjectName(QStringLiteral("pipelineCaption"));
    m_caption->setWordWrap(true);
    layout->addWidget(m_caption);
    // The stage boundaries, editable: the step, the bubble and the memory
    // follow at once (undoable like any edit).
    m_editor = new QWidget(panel);
    auto *row = new QHBoxLayout(m_editor);
    row->setContentsMargins(0, 0, 0, 0);
    row->addWidget(new QLabel(tr("Cuts before layers:"), m_editor));
    m_cuts = new QLineEdit(m_editor);
    m_cuts->setObjectName(QStringLiteral("pipelineCuts"));
    m_cuts->setToolTip(tr("The first layer of each stage after the first (of each chunk, interleaved), "
                          "rising; Enter re-costs the pipeline"));
    row->addWidget(m_cuts, 1);
    auto *balanceButton = new QPushButton(tr("Balance"), m_editor);
    balanceButton->setToolTip(tr("Cut where the slowest stage is least loaded"));
    row->addWidget(balanceButton);
    m_problem = new QLabel(m_editor);
    m_problem->setObjectName(QStringLiteral("pipelineProblem"));
    row->addWidget(m_problem);
    layout->addWidget(m_editor);
    layout->addWidget(m_view, 1);
    m_measuredCaption->setObjectName(QStringLiteral("pipelineMeasuredCaption"));
    m_measuredCaption->setWordWrap(true);
    layout->addWidget(m_measuredCaption);
    layout->addWidget(m_measured, 1);
    m_measuredCaption->hide();
    m_measured->hide();
    setWidget(panel);
    connect(m_cuts, &QLineEdit::returnPressed, this, &PipelineDock::applyCuts);
    connect(balanceButton, &QPushButton::clicked, this, &PipelineDock::balance);
    connect(document, &PlanDocument::planChanged, this, &PipelineDock::refresh);
    connect(document, &PlanDocument::modelLoaded, this, &PipelineDock::refresh);
    refresh();
}

QString PipelineDock::caption() const
{
    return m_caption->text();
}

bool PipelineDock::applyCuts()
{
    std::vector<int> cuts;
    for (const QString &part : m_cuts->text().split(QLatin1Char(','), Qt::SkipEmptyParts)) {
        bool ok = false;
        const int layer = part.trimmed().toInt(&ok);
        if (!ok) {
            m_problem->setText(tr("'%1' is not a layer number").arg(part.trimmed()));
            return false;
        }
        cuts.push_back(layer);
    }
    if (cuts.empty()) {
        m_problem->setText(tr("no cuts given: Balance chooses them"));
        return false;
    }
    m_problem->clear();
    QString error;
    auto conn = connect(m_document, &PlanDocument::failed, this, [&error](const QString &m) { error = m; });
    const bool ok = m_document->setPipelineCuts(cuts);
    disconnect(conn);
    if (!ok)
        m_problem->setText(error);
    return ok;
}

bool PipelineDock::balance()
{
    m_problem->clear();
    const bool ok = m_document->setPipelineCuts({});
    refresh();  // the editor shows the cuts, balanced already or not
    return ok;
}

void PipelineDock::showMeasured(const plan::ReportPipeline &run, double predictedStep)
{
    cost::PipelineTimeline timeline;
    std::vector<QString> names;
    for (std::size_t s = 0; s < run.stages.size(); ++s) {
        timeline.stages.emplace_back();
        for (const auto &slot : run.stages[s]) {
            timeline.stages.back().push_back({slot.backward, slot.microBatch, slot.chunk, slot.start, slot.end});
            timeline.makespan = std::max(timeline.makespan, slot.end);
        }
        names.push_back(tr("stage %1").arg(s));
    }
    if (timeline.stages.empty())
        return;
    m_measured->setTimeline(timeline, names);
    m_measuredCaption->setText(tr("Measured, the run's last step: %1 ms (predicted %2 ms); the stages waited %3% "
                                  "of it for each other (bubble and sends; predicted %4%)")
                                   .arg(timeline.makespan * 1e3, 0, 'f', 3)
                                   .arg(predictedStep * 1e3, 0, 'f', 3)
                                   .arg(run.bubbleFraction * 100, 0, 'f', 1)
                                   .arg(run.predictedBubbleFraction * 100, 0, 'f', 1));
    m_measuredCaption->show();
    m_measured->show();
}

QString PipelineDock::measuredCaption() const
{
    return m_measuredCaption->isHidden() ? QString() : m_measuredCaption->text();
}

void PipelineDock::refresh()
{
    // A run measured another plan (or none).
    m_measured->clear();
    m_measured->hide();
    m_measuredCaption->hide();
    const auto &planned = m_document->planned();
    const auto &model = m_document->model();
    m_editor->setVisible(planned.plan && planned.plan->pipeline);
    if (!planned.plan || !model.graph || !model.classes) {
        m_view->clear();
        m_caption->setText(tr("No plan open."));
        return;
    }
    const plan::Plan &p = *planned.plan;
    if (!p.pipeline) {
        m_view->clear();
        m_caption->setText(tr("This plan runs the whole model on each device group: one stage. "
                              "tapestry-cli plan MODEL --devices N chooses pipeline stages for a cluster."));
        return;
    }
    const auto &pp = *p.pipeline;
    QStringList cutText;
    for (int cut : pp.cuts)
        cutText << QString::number(cut);
    if (!m_cuts->hasFocus())
        m_cuts->setText(cutText.join(QStringLiteral(", ")));
    try {
        const auto layers = cost::modelLayers(*model.graph, *model.classes);
        const auto c =
            cost::pipelineCost(*model.graph, layers, p.cost, planned.specs, p.mesh, p.costOptions, pp.costed());
        // The forward's share of a micro-batch, from the plan's phases.
        double forward = 0, backward = 0;
        if (auto it = p.cost.byPhase.find("forward"); it != p.cost.byPhase.end())
            forward = it->second.total();
        if (auto it = p.cost.byPhase.find("backward"); it != p.cost.byPhase.end())
            backward = it->second.total();
        const double share = forward + backward > 0 ? forward / (forward + backward) : 1.0 / 3;
        const double send =
            pp.link.bandwidth > 0 ? pp.link.latency + static_cast<double>(c.p2pBytes) / pp.link.bandwidth : 0;
        const auto timeline = cost::pipelineTimeline(c, pp.schedule, pp.virtualStages,
                                                     p.costOptions.techniques.microBatches, share, send);
        std::vector<QString> names;
        for (std::size_t s = 0; s < c.stages.size(); ++s)
            names.push_back(tr("stage %1").arg(s));
        m_view->setTimeline(timeline, names);
        QString schedule = QString::fromUtf8(std::string(cost::toString(pp.schedule)).c_str());
        if (pp.virtualStages > 1)
            schedule += tr(" (%1 chunks a stage)").arg(pp.virtualStages);
        const int devices = p.mesh.deviceCount();
        m_caption->setText(tr("%1 stages of %2, %3, %4 micro-batches over %5: step %6, bubble %7%, "
                              "%8 GiB on the fullest stage%9")
                               .arg(pp.stages)
                               .arg(devices == 1 ? tr("one device") : tr("%1 devices").arg(devices))
                               .arg(schedule)
                               .arg(p.costOptions.techniques.microBatches)
                               .arg(QString::fromStdString(pp.link.name))
                               .arg(duration(c.stepTime))
                               .arg(100 * c.bubbleFraction, 0, 'f', 1)
                               .arg(static_cast<double>(c.peakMemory) / (1024.0 * 1024.0 * 1024.0), 0, 'f', 2)
                               .arg(c.fitsMemory ? QString() : tr(" (does not fit)")));
    } catch (const TapestryError &e) {
        m_view->clear();
        m_caption->setText(QString::fromStdString(e.error().toString()));
    }
}

} // namespace tapestry::views
