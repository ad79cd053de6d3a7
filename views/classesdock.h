#pragma once

#include "loadedmodel.h"
#include "plannedmodel.h"

#include <QDockWidget>

#include <map>

class QSortFilterProxyModel;
class QTableView;

namespace tapestry::views {

class ClassListModel;

// The "Unique subgraphs" dock: the model's classes in a sortable table.
class ClassesDock : public QDockWidget {
    Q_OBJECT
public:
    explicit ClassesDock(QWidget *parent = nullptr);

    QTableView *table() const { return m_table; }
    ClassListModel *model() const { return m_model; }
    QSortFilterProxyModel *proxy() const { return m_proxy; }

    void setModel(const LoadedModel &model);
    // Each class' share of the plan's step time, in the Share column.
    void showCosts(const LoadedModel &model, const PlannedModel &planned);
    // Selects the row of class `classId`; clears the selection for none.
    void selectClass(int classId);
    // The class of the current row; -1 when there is none.
    int currentClass() const;
    // The name shown for class `classId`; empty when the table has none.
    QString className(int classId) const;
    std::map<int, QString> classNames() const;

signals:
    // The user (or selectClass) made another class current.
    void classActivated(int classId);

private:
    QTableView *m_table;
    ClassListModel *m_model;
    QSortFilterProxyModel *m_proxy;
};

} // namespace tapestry::views
