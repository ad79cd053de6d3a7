#include "classlistmodel.h"

#include "layout/viewgraph.h"
#include "palette.h"

#include <QLocale>

namespace tapestry::views {

ClassListModel::ClassListModel(QObject *parent) : QAbstractTableModel(parent) {}

void ClassListModel::setModel(const LoadedModel &model)
{
    beginResetModel();
    m_model = model;
    m_rows.clear();
    m_costShares.clear();
    if (model.classes)
        for (const auto &c : model.classes->classes)
            if (static_cast<int>(c.instances.size()) >= model.classes->minDuplicate)
                m_rows.push_back(c.id.value);
    m_commonScope.clear();
    for (int i = 0; i < m_rows.size(); ++i) {
        const QString pattern = patternOf(m_rows[i]);
        const auto slash = pattern.indexOf(QLatin1Char('/'));
        const QString scope = slash > 0 && slash + 1 < pattern.size() ? pattern.left(slash + 1) : QString();
        if (scope.isEmpty() || (i > 0 && scope != m_commonScope)) {
            m_commonScope.clear();
            break;
        }
        m_commonScope = scope;
    }
    endResetModel();
}

void ClassListModel::setCostShares(const QVector<double> &shares)
{
    m_costShares = shares;
    if (!m_rows.isEmpty())
        emit dataChanged(index(0, Share), index(static_cast<int>(m_rows.size()) - 1, Share));
}

QString ClassListModel::patternOf(int classId) const
{
    std::vector<std::string> scopes;
    for (const auto &i : m_model.classes->classes[static_cast<std::size_t>(classId)].instances)
        scopes.push_back(i.scope);
    return QString::fromStdString(layout::scopePattern(scopes));
}

int ClassListModel::rowCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int ClassListModel::columnCount(const QModelIndex &parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

int ClassListModel::rowOfClass(int classId) const
{
    return static_cast<int>(m_rows.indexOf(classId));
}

QVariant ClassListModel::data(const QModelIndex &index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const int id = m_rows[index.row()];
    const auto &cls = m_model.classes->classes[static_cast<std::size_t>(id)];
    const double opShare = m_model.graph && m_model.graph->opCount()
                               ? static_cast<double>(cls.opsPerInstance * cls.instances.size()) /
                                     static_cast<double>(m_model.graph->opCount())
                               : 0.0;
    const double share = id < m_costShares.size() ? m_costShares[id] : opShare;
    switch (role) {
    case ClassIdRole:
        return id;
    case Qt::DecorationRole:
        return index.column() == Name ? QVariant(classColor(id)) : QVariant();
    case Qt::TextAlignmentRole:
        return index.column() == Name ? QVariant() : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    case Qt::ToolTipRole: {
        const QString pattern = patternOf(id);
        switch (index.column()) {
        case Instances:
            return tr("%1: %n instance(s) in the model", nullptr, static_cast<int>(cls.instances.size())).arg(pattern);
        case Parameters:
            return tr("%1: %2 parameters per instance")
                .arg(pattern, QLocale().toString(static_cast<qlonglong>(cls.parametersPerInstance)));
        default:
            return pattern;
        }
    }
    case SortRole:
    case Qt::DisplayRole: {
        const bool sort = role == SortRole;
        switch (index.column()) {
        case Name: {
            const QString pattern = patternOf(id);
            if (sort)
                return pattern;
            // A zero-width space after each scope separator, where the
            // list's word wrap may break a name too long for the column
            // ("encoder/" over "block.*"), rather than eliding it.
            QString shown = pattern.mid(m_commonScope.size());
            return shown.replace(QLatin1Char('/'), QStringLiteral("/\u200B"));
        }
        case Instances:
            return sort ? QVariant(static_cast<qlonglong>(cls.instances.size()))
                        : QVariant(QStringLiteral("×%1").arg(cls.instances.size()));
        case Ops:
            return static_cast<qlonglong>(cls.opsPerInstance);
        case Parameters:
            return sort ? QVariant(static_cast<qlonglong>(cls.parametersPerInstance))
                        : QVariant(QString::fromStdString(layout::countLabel(cls.parametersPerInstance)));
        case Share:
            return sort ? QVariant(share) : QVariant(QStringLiteral("%1 %").arg(share * 100, 0, 'f', 1));
        }
        return {};
    }
    }
    return {};
}

QVariant ClassListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || (role != Qt::DisplayRole && role != Qt::ToolTipRole))
        return {};
    // Short headers, so that the numbers keep their room in a narrow dock;
    // the tooltips say them in full.
    const bool tip = role == Qt::ToolTipRole;
    switch (section) {
    case Name:
        if (tip && !m_commonScope.isEmpty())
            return tr("The class: its instances' scopes inside %1, * where they differ").arg(m_commonScope);
        return tip ? tr("The class: its instances' scopes, * where they differ") : tr("Class");
    case Instances:
        return tip ? tr("Instances of the class in the model") : tr("×");
    case Ops:
        return tip ? tr("Ops per instance") : tr("Ops");
    case Parameters:
        return tip ? tr("Parameters per instance") : tr("Params");
    case Share:
        if (m_costShares.isEmpty())
            return tip ? tr("The class's share of the model's ops") : tr("Share");
        return tip ? tr("The class's share of the plan's step time") : tr("Share");
    }
    return {};
}

} // namespace tapestry::views
