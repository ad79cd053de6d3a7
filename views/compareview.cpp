#include "compareview.h"

#include <QHeaderView>
#include <QLocale>

namespace tapestry::views {

namespace {
QString ms(double seconds)
{
    return QStringLiteral("%1 ms").arg(seconds * 1e3, 0, 'f', 3);
}
QString signedMs(double seconds)
{
    return QStringLiteral("%1%2 ms").arg(seconds > 0 ? QStringLiteral("+") : QString()).arg(seconds * 1e3, 0, 'f', 3);
}
} // namespace

CompareView::CompareView(QWidget *parent) : QTreeWidget(parent)
{
    setColumnCount(4);
    header()->setSectionResizeMode(QHeaderView::ResizeToContents);
    setAlternatingRowColors(true);
    clearDiff();
}

void CompareView::clearDiff()
{
    clear();
    setHeaderLabels({tr("What"), tr("Plan A"), tr("Plan B"), tr("B − A")});
    auto *hint = new QTreeWidgetItem(this);
    hint->setText(0, tr("Plan › Compare with… to compare the open plan with another"));
}

void CompareView::setDiff(const analysis::PlanDiff &diff, const QString &nameA, const QString &nameB)
{
    clear();
    setHeaderLabels({tr("What"), nameA, nameB, tr("B − A")});
    auto row = [this](QTreeWidgetItem *parent, const QString &what, const QString &a, const QString &b, const QString &d) {
        auto *item = parent ? new QTreeWidgetItem(parent) : new QTreeWidgetItem(this);
        item->setText(0, what);
        item->setText(1, a);
        item->setText(2, b);
        item->setText(3, d);
        return item;
    };
    auto *step = row(nullptr, tr("Step time"), ms(diff.stepTimeA), ms(diff.stepTimeB), signedMs(diff.stepTimeDelta));
    step->setForeground(3, diff.stepTimeDelta > 0 ? QColor(0xc62828) : QColor(0x2e7d32));
    row(step, tr("Communication"), {}, {}, signedMs(diff.commDelta));
    row(step, tr("Compute"), {}, {}, signedMs(diff.computeDelta));
    row(step, tr("Memory per device"), {}, {},
        (diff.memoryDelta > 0 ? QStringLiteral("+") : QString()) +
            QLocale().formattedDataSize(diff.memoryDelta, 1, QLocale::DataSizeIecFormat));
    step->setExpanded(true);
    auto *classes = row(nullptr, tr("By subgraph class"), {}, {}, {});
    for (const auto &[name, g] : diff.byClass)
        row(classes, QString::fromStdString(name), ms(g.a.total()), ms(g.b.total()), signedMs(g.delta()));
    classes->setExpanded(true);
    auto *collectives = row(nullptr, tr("By collective"), {}, {}, {});
    for (const auto &[name, g] : diff.byCollective)
        row(collectives, QString::fromStdString(name), ms(g.a.total()), ms(g.b.total()), signedMs(g.delta()));
    collectives->setExpanded(true);
    auto *tensors = row(nullptr, tr("Tensors stored differently"), {}, {}, QString::number(diff.specs.size()));
    for (const auto &c : diff.specs)
        row(tensors, QString::fromStdString(c.tensor), QString::fromStdString(c.a.toPlacements()),
            QString::fromStdString(c.b.toPlacements()), {});
}

} // namespace tapestry::views
