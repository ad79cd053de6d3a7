#include "meshdock.h"

#include "meshview.h"
#include "plandocument.h"

#include "analysis/collectivetransition.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLocale>
#include <QPushButton>
#include <QVBoxLayout>

#include <set>

namespace tapestry::views {

MeshDock::MeshDock(PlanDocument *document, QWidget *parent)
    : QDockWidget(tr("Device mesh"), parent), m_document(document), m_view(new MeshView(this))
{
    setObjectName(QStringLiteral("mesh"));
    auto *panel = new QWidget(this);
    auto *layout = new QVBoxLayout(panel);
    layout->setContentsMargins(2, 2, 2, 2);
    layout->addWidget(m_view, 1);
    auto *stepRow = new QHBoxLayout;
    auto *prev = new QPushButton(tr("◀ Prev"), panel);
    auto *play = new QPushButton(tr("Play"), panel);
    play->setCheckable(true);
    auto *next = new QPushButton(tr("Next ▶"), panel);
    auto *speed = new QComboBox(panel);
    for (const auto &[label, value] : {std::pair{"¼×", 0.25}, {"½×", 0.5}, {"1×", 1.0}, {"2×", 2.0}})
        speed->addItem(QString::fromUtf8(label), value);
    speed->setCurrentIndex(2);
    speed->setToolTip(tr("How fast Play moves the pieces"));
    auto *exportMesh = new QPushButton(tr("Export…"), panel);
    stepRow->addWidget(prev);
    stepRow->addWidget(play);
    stepRow->addWidget(speed);
    stepRow->addWidget(next);
    stepRow->addStretch(1);
    stepRow->addWidget(exportMesh);
    layout->addLayout(stepRow);
    setWidget(panel);
    connect(prev, &QPushButton::clicked, m_view, &MeshView::previous);
    connect(next, &QPushButton::clicked, m_view, &MeshView::next);
    connect(play, &QPushButton::toggled, m_view, &MeshView::play);
    connect(m_view, &MeshView::playingChanged, play, [play](bool on) {
        play->setChecked(on);
        play->setText(on ? tr("Pause") : tr("Play"));
    });
    connect(speed, &QComboBox::currentIndexChanged, m_view,
            [this, speed](int i) { m_view->setSpeed(speed->itemData(i).toDouble()); });
    connect(exportMesh, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export mesh diagram"), QStringLiteral("mesh.png"),
                                                          tr("PNG image (*.png);;SVG drawing (*.svg)"));
        QString error;
        if (!path.isEmpty() && !m_view->exportImage(path, &error))
            emit failed(error.isEmpty() ? tr("%1: cannot draw the image").arg(path) : error);
    });
    connect(m_document, &PlanDocument::planChanged, this, [this] {
        const auto &plan = *m_document->planned().plan;
        m_view->setMesh(plan.mesh, plan.axisCarries);
    });
    connect(m_document, &PlanDocument::selectionChanged, this, [this](int, passes::NodeId node) {
        if (node.valid())
            showNode(node);
    });
}

void MeshDock::showTensor(ir::TensorId tensor)
{
    const auto &planned = m_document->planned();
    if (!planned.plan || !tensor.valid() || tensor.index() >= planned.specs.size())
        return;
    const auto &t = m_document->model().graph->tensor(tensor);
    m_view->setMesh(planned.plan->mesh, planned.plan->axisCarries);
    m_view->setTensor(QString::fromStdString(t.name), t.shape, planned.specs[tensor.index()]);
}

void MeshDock::showNode(passes::NodeId node)
{
    const auto &planned = m_document->planned();
    if (!planned.plan)
        return;
    const auto &graph = *m_document->model().graph;
    const auto &cn = m_document->model().coarse->node(node);
    ir::TensorId shown;
    for (auto t : cn.parameters)
        if (!shown.valid() || graph.tensor(t).elementCount() > graph.tensor(shown).elementCount())
            shown = t;
    if (!shown.valid() && !cn.outputs.empty())
        shown = cn.outputs.front();
    if (!shown.valid())
        return;
    showTensor(shown);
    m_view->setSteps(collectiveSteps(node));
}

QVector<CollectiveStep> MeshDock::collectiveSteps(passes::NodeId node) const
{
    const auto &planned = m_document->planned();
    QVector<CollectiveStep> steps;
    if (!planned.plan || !node.valid())
        return steps;
    const auto &graph = *m_document->model().graph;
    const auto &cn = m_document->model().coarse->node(node);
    const auto &p = *planned.plan;
    std::set<std::string> opNames;
    for (auto o : cn.ops)
        opNames.insert(graph.op(o).name);
    for (const auto &c : p.cost.collectives) {
        if (!opNames.count(c.op))
            continue;
        const auto transition = analysis::collectiveTransition(graph, p.mesh, planned.specs, c);
        if (!transition)
            continue;
        CollectiveStep step;
        step.axis = transition->axis;
        step.tensor = QString::fromStdString(c.tensor);
        step.shape = graph.tensor(transition->tensor).shape;
        step.before = transition->before;
        step.after = transition->after;
        QString change;
        switch (c.kind) {
        case sharding::CollectiveKind::AllReduce:
            change = tr("partial sums → whole on every device");
            break;
        case sharding::CollectiveKind::AllGather:
            change = tr("split → whole on every device");
            break;
        case sharding::CollectiveKind::ReduceScatter:
            change = tr("partial sums → summed and split");
            break;
        case sharding::CollectiveKind::AllToAll:
            change = tr("split on one dim → split on another");
            break;
        }
        step.title = QStringLiteral("%1 %2 of %3 over %4")
                         .arg(QString::fromLatin1(cost::toString(c.phase).data()),
                              QString::fromLatin1(sharding::toString(c.kind).data()),
                              QString::fromStdString(c.tensor), QString::fromStdString(c.axis));
        step.detail = tr("%1 per device, %2 ms · %3")
                          .arg(QLocale().formattedDataSize(c.bytes, 1, QLocale::DataSizeIecFormat))
                          .arg(c.time * 1e3, 0, 'f', 3)
                          .arg(change);
        step.kind = c.kind;
        step.phase = QString::fromLatin1(cost::toString(c.phase).data());
        step.reason = QString::fromStdString(c.reason);
        step.bytes = c.bytes;
        step.wireBytes = c.wireBytes;
        step.seconds = c.time;
        steps.push_back(step);
    }
    return steps;
}

} // namespace tapestry::views
