#include "inspectordock.h"

#include "inspectorview.h"
#include "plandocument.h"

#include "analysis/explain.h"
#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "layout/viewgraph.h"

#include <QLocale>

#include <set>

namespace tapestry::views {

namespace {
// Where an alternative's row keeps its tensor and its index in the explanation.
constexpr int kTensorRole = Qt::UserRole + 1;
constexpr int kAlternativeRole = Qt::UserRole + 2;
} // namespace

InspectorDock::InspectorDock(PlanDocument *document, QWidget *parent)
    : QDockWidget(tr("Inspector"), parent), m_document(document), m_view(new InspectorView(this))
{
    setObjectName(QStringLiteral("inspector"));
    setWidget(m_view);
    connect(m_view, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem *item) {
        if (!item || !item->data(0, kTensorRole).isValid())
            return;
        const std::string tensor = item->data(0, kTensorRole).toString().toStdString();
        const auto index = static_cast<std::size_t>(item->data(0, kAlternativeRole).toInt());
        try {
            const auto explanation = m_document->explainer()->explainTensor(tensor);
            if (index < explanation.alternatives.size())
                m_document->pinTensor(tensor, explanation.alternatives[index].spec, m_document->pinWholeClass());
        } catch (const std::exception &e) {
            emit failed(QString::fromUtf8(e.what()));
        }
    });
    connect(m_view, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem *item) {
        if (item && item->data(0, Qt::UserRole).isValid())
            emit tensorChosen(ir::TensorId(item->data(0, Qt::UserRole).toInt()));
    });
    installSections();
}

void InspectorDock::installSections()
{
    m_view->setTensorSection([this](ir::TensorId t, QTreeWidgetItem *item) {
        const auto &planned = m_document->planned();
        if (!planned.plan || t.index() >= planned.specs.size())
            return;
        const auto &p = *planned.plan;
        const auto &tensor = m_document->model().graph->tensor(t);
        const auto &spec = planned.specs[t.index()];
        auto *sharding = m_view->addRow(item, tr("Sharding"), QString::fromStdString(spec.toPlacements()));
        m_view->addRow(sharding, tr("PartitionSpec"),
                       QString::fromStdString(spec.toPartitionSpec(static_cast<int>(tensor.shape.size()), p.mesh)));
        for (std::size_t a = 0; a < p.mesh.axes.size() && a < spec.placements.size(); ++a)
            m_view->addRow(sharding, tr("axis %1 (%2)").arg(QString::fromStdString(p.mesh.axes[a].name)).arg(p.mesh.axes[a].size),
                           QString::fromStdString(spec.placements[a].toString()));
        auto source = p.specs.find(tensor.name);
        if (source != p.specs.end())
            m_view->addRow(sharding, tr("Chosen by"), QString::fromLatin1(plan::toString(source->second.source).data()));
        const auto local = spec.localShape(tensor.shape, p.mesh);
        m_view->addRow(sharding, tr("Shard shape"), QString::fromStdString(layout::shapeLabel(local)));
        m_view->addRow(sharding, tr("Bytes per device"),
                       QLocale().formattedDataSize(spec.localElements(tensor.shape, p.mesh) * ir::byteSize(tensor.dtype), 2,
                                                   QLocale::DataSizeIecFormat));
        // The sharding first: in a narrow column it is what stays in view.
        item->setText(1, QString::fromStdString(spec.toPlacements()) + QStringLiteral("  ") + item->text(1));
        item->setToolTip(1, item->text(1));
        sharding->setExpanded(true);
        if (tensor.role == ir::Role::Parameter) {
            // ZeRO: the states over the axes this spec replicates the parameter on.
            const int stage = p.costOptions.techniques.zeroStage;
            const std::int64_t d = cost::zeroDegree(spec, p.mesh, p.costOptions.techniques);
            QStringList axes;
            for (std::size_t a = 0; a < p.mesh.axes.size() && a < spec.placements.size(); ++a)
                if (spec.placements[a].isReplicate() && p.mesh.axes[a].size > 1)
                    axes << QString::fromStdString(p.mesh.axes[a].name);
            const QString sharded = stage == 0   ? tr("nothing sharded")
                                    : stage == 1 ? tr("optimizer state sharded")
                                    : stage == 2 ? tr("gradient and optimizer state sharded")
                                                 : tr("parameter, gradient and optimizer state sharded");
            m_view->addRow(item, tr("ZeRO"),
                           d <= 1 ? tr("stage %1: split on every axis, nothing to shard").arg(stage)
                                  : tr("stage %1: %2 %3 ways over %4 — Plan ▸ Memory techniques to change")
                                        .arg(stage)
                                        .arg(sharded)
                                        .arg(d)
                                        .arg(axes.join(QStringLiteral(", "))));
        }
        if (tensor.role != ir::Role::Parameter || tensor.shape.size() < 2)
            return;
        // Why this spec and not another: every legal spec with its cost
        // delta; double-click one to pin it.
        try {
            const auto explanation = m_document->explainer()->explainTensor(tensor.name);
            auto *alternatives = m_view->addRow(item, tr("Alternatives"),
                                                tr("%1 — double-click one to pin it").arg(explanation.alternatives.size()));
            for (std::size_t i = 0; i < explanation.alternatives.size(); ++i) {
                const auto &alt = explanation.alternatives[i];
                auto *row = m_view->addRow(alternatives,
                                           QString::fromStdString(alt.spec.toPlacements()) +
                                               (alt.chosen ? tr("  ✓ chosen") : QString()),
                                           QString::fromStdString(alt.summary));
                row->setData(0, kTensorRole, QString::fromStdString(tensor.name));
                row->setData(0, kAlternativeRole, static_cast<int>(i));
                if (!alt.fits)
                    row->setForeground(1, QColor(0xc62828));
            }
        } catch (const std::exception &e) {
            m_view->addRow(item, tr("Alternatives"), QString::fromUtf8(e.what()));
        }
    });
    m_view->setNodeSection([this](passes::NodeId node, QTreeWidget *) {
        const auto &planned = m_document->planned();
        if (!planned.plan)
            return;
        const auto &p = *planned.plan;
        auto it = planned.byNode.find(node.value);
        const cost::CostTotals totals = it == planned.byNode.end() ? cost::CostTotals{} : it->second;
        // What the backward pass recomputes of this node, and why.
        const auto roles = cost::recomputeRoles(*m_document->model().graph);
        std::uint8_t role = 0;
        const auto &nodeOps = m_document->model().coarse->node(node).ops;
        for (auto o : nodeOps)
            role |= roles[o.index()];
        const auto &t = p.costOptions.techniques;
        // As the node's kind of layer is recomputed (Techniques::recomputeLayers).
        const cost::Recompute mode =
            nodeOps.empty() ? t.recompute
                            : cost::recomputeOf(t, cost::layerKind(m_document->model().graph->op(nodeOps.front()).name));
        QString recompute = tr("none: its activations are kept for the backward pass");
        if (mode == cost::Recompute::Full && (role & cost::kLayer))
            recompute = tr("full: the layer keeps its input and runs this forward again in backward");
        else if (mode == cost::Recompute::Selective && (role & (cost::kScore | cost::kContext)))
            recompute = tr("selective: the attention scores are computed again in backward");
        else if (t.flashAttention && (role & cost::kScore))
            recompute = tr("flash attention: no s×s scores kept, computed again in backward");
        else if (!(role & cost::kLayer))
            recompute = tr("none (outside the transformer layers)");
        m_view->addRow(nullptr, tr("Recomputation"), recompute);
        auto *costRow = m_view->addRow(nullptr, tr("Cost per step"), tr("%1 ms").arg(totals.total() * 1e3, 0, 'f', 3));
        m_view->addRow(costRow, tr("Compute"), tr("%1 ms").arg(totals.compute * 1e3, 0, 'f', 3));
        m_view->addRow(costRow, tr("Communication"), tr("%1 ms").arg(totals.comm * 1e3, 0, 'f', 3));
        m_view->addRow(costRow, tr("FLOPs per device"), QStringLiteral("%1 G").arg(totals.flops / 1e9, 0, 'f', 2));
        m_view->addRow(costRow, tr("Share of step"),
                       QStringLiteral("%1 %").arg(p.cost.stepTime > 0 ? totals.total() / p.cost.stepTime * 100 : 0, 0, 'f', 2));
        std::set<std::string> opNames;
        for (auto o : m_document->model().coarse->node(node).ops)
            opNames.insert(m_document->model().graph->op(o).name);
        auto *collectives = m_view->addRow(nullptr, tr("Collectives"));
        int count = 0;
        for (const auto &c : p.cost.collectives) {
            if (!opNames.count(c.op))
                continue;
            ++count;
            m_view->addRow(collectives,
                           QStringLiteral("%1 %2 on %3").arg(QString::fromLatin1(cost::toString(c.phase).data()),
                                                              QString::fromLatin1(sharding::toString(c.kind).data()),
                                                              QString::fromStdString(c.axis)),
                           tr("%1, %2 ms — %3")
                               .arg(QLocale().formattedDataSize(c.bytes, 1, QLocale::DataSizeIecFormat))
                               .arg(c.time * 1e3, 0, 'f', 3)
                               .arg(QString::fromStdString(c.reason)));
        }
        collectives->setText(1, count ? QString::number(count) : tr("none"));
        collectives->setExpanded(true);
        costRow->setExpanded(true);
    });
}

} // namespace tapestry::views
