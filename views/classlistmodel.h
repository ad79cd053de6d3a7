#pragma once

#include "loadedmodel.h"

#include <QAbstractTableModel>

namespace tapestry::views {

// The unique subgraph classes of the open model: one row per class with its
// instance count, ops and parameters per instance and share of the graph.
class ClassListModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Name, Instances, Ops, Parameters, Share, ColumnCount };
    enum Role { ClassIdRole = Qt::UserRole, SortRole };

    explicit ClassListModel(QObject *parent = nullptr);
    void setModel(const LoadedModel &model);
    // Per-class share of the step cost (0..1), shown in the Share column once
    // a plan is costed; without one the column shows the share of ops.
    void setCostShares(const QVector<double> &shares);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
    int rowOfClass(int classId) const;

private:
    QString patternOf(int classId) const;  // the scopes of its instances, as "model/layers.*"
    LoadedModel m_model;
    QVector<int> m_rows;  // class ids with at least minDuplicate instances
    QVector<double> m_costShares;
    // The scope every listed class starts with ("transformer/", "model/"):
    // left out of the names shown, which it only lengthens, and kept in
    // their tooltips and order.
    QString m_commonScope;
};

} // namespace tapestry::views
