#include "pinmenu.h"

#include "plandocument.h"

#include "analysis/explain.h"

#include <set>
#include <string>

namespace tapestry::views {

namespace {
constexpr std::size_t kMaxWeights = 12;
} // namespace

PinMenu::PinMenu(PlanDocument *document, const layout::ViewNode &node, QWidget *parent) : QMenu(parent)
{
    if (node.cls.valid()) {
        auto *whole = addAction(tr("Pins apply to every instance of the class"));
        whole->setCheckable(true);
        whole->setChecked(document->pinWholeClass());
        connect(whole, &QAction::toggled, document, &PlanDocument::setPinWholeClass);
        addSeparator();
    }
    const auto &model = document->model();
    std::set<std::string> seen;
    try {
        for (auto n : coarseNodesOf(model, node)) {
            for (auto t : model.coarse->node(n).parameters) {
                const auto &tensor = model.graph->tensor(t);
                if (tensor.shape.size() < 2 || seen.size() >= kMaxWeights || !seen.insert(tensor.name).second)
                    continue;
                const auto explanation = document->explainer()->explainTensor(tensor.name);
                auto *sub = addMenu(tr("Pin %1").arg(QString::fromStdString(tensor.name)));
                sub->setToolTipsVisible(true);
                for (const auto &alt : explanation.alternatives) {
                    // The spec and what it moves (step, comm, memory) in the
                    // entry; the collectives it adds and removes, which make
                    // a line of a thousand pixels, in its tooltip.
                    const QString summary = QString::fromStdString(alt.summary);
                    QString text = summary.section(QStringLiteral("; "), 0, 0);
                    if (!alt.fits)
                        text = tr("⚠ does not fit in memory: %1").arg(text);
                    auto *action = sub->addAction(alt.chosen ? tr("✓ %1 (the plan's)").arg(text) : text);
                    action->setToolTip(summary);
                    action->setEnabled(!alt.chosen);
                    connect(action, &QAction::triggered, document, [document, name = tensor.name, spec = alt.spec] {
                        document->pinTensor(name, spec, document->pinWholeClass());
                    });
                }
            }
            if (node.kind == layout::ViewNode::Kind::Block && seen.size() >= kMaxWeights)
                break;
        }
    } catch (const std::exception &e) {
        m_error = QString::fromUtf8(e.what());
        return;
    }
    if (seen.empty())
        addAction(tr("No weights to pin here"))->setEnabled(false);
    if (node.cls.valid()) {
        addSeparator();
        addAction(tr("Plan candidates for this class…"), this,
                  [this, cls = node.cls.value] { emit candidatesRequested(cls); });
    }
}

} // namespace tapestry::views
