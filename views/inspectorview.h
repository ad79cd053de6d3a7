#pragma once

#include "layout/viewgraph.h"
#include "loadedmodel.h"

#include <QTreeWidget>

#include <functional>

namespace tapestry::views {

// Facts about the selected view node: a folded class block (its instances,
// parameters) or a coarse node (member ops, tensors with shapes, dtypes and
// bytes). Extra sections (sharding, cost) come from providers the plan layer
// installs, so this view needs no knowledge of plans.
class InspectorView : public QTreeWidget {
    Q_OBJECT
public:
    explicit InspectorView(QWidget *parent = nullptr);

    void setModel(const LoadedModel &model);
    void showViewNode(const layout::ViewNode *node);
    void showNothing();

    // Adds rows for a tensor under `parent` (sharding spec, shard shape, ...).
    using TensorSection = std::function<void(ir::TensorId, QTreeWidgetItem *parent)>;
    void setTensorSection(TensorSection section) { m_tensorSection = std::move(section); }
    // Adds top-level sections for a coarse node (cost breakdown, ...).
    using NodeSection = std::function<void(passes::NodeId, QTreeWidget *tree)>;
    void setNodeSection(NodeSection section) { m_nodeSection = std::move(section); }

    QTreeWidgetItem *addRow(QTreeWidgetItem *parent, const QString &key, const QString &value = {});

private:
    void addTensor(QTreeWidgetItem *parent, ir::TensorId t);

    LoadedModel m_model;
    TensorSection m_tensorSection;
    NodeSection m_nodeSection;
};

} // namespace tapestry::views
