#include "modelsummaryview.h"

#include <QHeaderView>
#include <QLocale>
#include <map>

namespace tapestry::views {

ModelSummaryView::ModelSummaryView(QWidget *parent) : QTreeWidget(parent)
{
    setColumnCount(2);
    setHeaderLabels({tr("Property"), tr("Value")});
    header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    setAlternatingRowColors(true);
}

void ModelSummaryView::setGraph(const ir::Graph &graph, const QString &source)
{
    clear();
    const QLocale locale;
    auto add = [this](QTreeWidgetItem *parent, const QString &key, const QString &value) {
        auto *item = parent ? new QTreeWidgetItem(parent) : new QTreeWidgetItem(this);
        item->setText(0, key);
        item->setText(1, value);
        return item;
    };
    add(nullptr, tr("Model"), source);
    add(nullptr, tr("Ops"), locale.toString(static_cast<qlonglong>(graph.opCount())));
    add(nullptr, tr("Tensors"), locale.toString(static_cast<qlonglong>(graph.tensorCount())));
    add(nullptr, tr("Parameters"), locale.toString(static_cast<qlonglong>(graph.parameterCount())));
    add(nullptr, tr("Parameter bytes"),
        locale.formattedDataSize(graph.parameterBytes(), 2, QLocale::DataSizeTraditionalFormat));
    std::map<std::string, int> histogram;
    for (const auto &op : graph.ops())
        ++histogram[op.type];
    auto *types = add(nullptr, tr("Op types"), QString::number(histogram.size()));
    for (const auto &[type, count] : histogram)
        add(types, QString::fromStdString(type), QString::number(count));
    types->setExpanded(true);
}

} // namespace tapestry::views
