#include "classesdock.h"

#include "classlistmodel.h"

#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QTableView>

namespace tapestry::views {

ClassesDock::ClassesDock(QWidget *parent)
    : QDockWidget(tr("Unique subgraphs"), parent), m_table(new QTableView(this)), m_model(new ClassListModel(this)),
      m_proxy(new QSortFilterProxyModel(this))
{
    setObjectName(QStringLiteral("classes"));
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(ClassListModel::SortRole);
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setSelectionMode(QAbstractItemView::SingleSelection);
    m_table->verticalHeader()->hide();
    // The numbers keep the room their contents need; the class name takes
    // what is left, wrapped at its scope separators (rows as tall as their
    // names need), elided on the left only where one scope is wider than
    // the column; whole in its tooltip. A narrow dock never cuts an
    // instance count or a parameter count.
    m_table->horizontalHeader()->setStretchLastSection(false);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->horizontalHeader()->setSectionResizeMode(ClassListModel::Name, QHeaderView::Stretch);
    m_table->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->setTextElideMode(Qt::ElideLeft);
    m_table->setWordWrap(true);
    connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex &current) {
        if (current.isValid())
            emit classActivated(current.data(ClassListModel::ClassIdRole).toInt());
    });
    setWidget(m_table);
}

void ClassesDock::setModel(const LoadedModel &model)
{
    m_model->setModel(model);
    m_table->resizeColumnsToContents();
}

void ClassesDock::showCosts(const LoadedModel &model, const PlannedModel &planned)
{
    const double step = planned.plan ? planned.plan->cost.stepTime : 0;
    QVector<double> shares;
    if (model.classes && step > 0)
        for (const auto &c : model.classes->classes) {
            auto it = planned.byClass.find("class " + std::to_string(c.id.value));
            shares.push_back(it == planned.byClass.end() ? 0.0 : it->second.total() / step);
        }
    m_model->setCostShares(shares);
}

void ClassesDock::selectClass(int classId)
{
    const int row = classId >= 0 ? m_model->rowOfClass(classId) : -1;
    if (row >= 0)
        m_table->selectRow(m_proxy->mapFromSource(m_model->index(row, 0)).row());
    else
        m_table->clearSelection();
}

int ClassesDock::currentClass() const
{
    const QModelIndex current = m_table->currentIndex();
    return current.isValid() ? current.data(ClassListModel::ClassIdRole).toInt() : -1;
}

QString ClassesDock::className(int classId) const
{
    const int row = m_model->rowOfClass(classId);
    return row >= 0 ? m_model->index(row, ClassListModel::Name).data().toString() : QString();
}

std::map<int, QString> ClassesDock::classNames() const
{
    std::map<int, QString> names;
    for (int row = 0; row < m_model->rowCount(); ++row) {
        const auto index = m_model->index(row, ClassListModel::Name);
        // The name in full, as the graph writes it.
        names[index.data(ClassListModel::ClassIdRole).toInt()] = index.data(ClassListModel::SortRole).toString();
    }
    return names;
}

} // namespace tapestry::views
