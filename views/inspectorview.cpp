#include "inspectorview.h"

#include <QHeaderView>
#include <QLocale>
#include <QStyledItemDelegate>

namespace tapestry::views {

namespace {

// Elides on the left, so that a tensor's name keeps its module and kind.
class LeftElidingDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem *option, const QModelIndex &index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        option->textElideMode = Qt::ElideLeft;
    }
};

} // namespace

InspectorView::InspectorView(QWidget *parent) : QTreeWidget(parent)
{
    setColumnCount(2);
    setHeaderLabels({tr("Property"), tr("Value")});
    header()->setSectionResizeMode(0, QHeaderView::Interactive);
    header()->resizeSection(0, 190);
    setAlternatingRowColors(true);
    setUniformRowHeights(true);
    // Long names keep their distinguishing ends ("…self_attn.q_proj.weight");
    // values their beginnings, where the sharding is.
    setItemDelegateForColumn(0, new LeftElidingDelegate(this));
    showNothing();
}

void InspectorView::setModel(const LoadedModel &model)
{
    m_model = model;
    showNothing();
}

QTreeWidgetItem *InspectorView::addRow(QTreeWidgetItem *parent, const QString &key, const QString &value)
{
    auto *item = parent ? new QTreeWidgetItem(parent) : new QTreeWidgetItem(this);
    item->setText(0, key);
    item->setText(1, value);
    item->setToolTip(0, key);
    item->setToolTip(1, value);
    return item;
}

void InspectorView::showNothing()
{
    clear();
    addRow(nullptr, tr("Nothing selected"), tr("click a node or a class"));
}

namespace {

// The element type as framework code writes it short (bf16, fp32), so that a
// spec, its shape and its type fit the value column; the Type row under the
// tensor spells it out.
QString shortType(ir::DType dtype)
{
    switch (dtype) {
    case ir::DType::F32:
        return QStringLiteral("fp32");
    case ir::DType::F16:
        return QStringLiteral("fp16");
    case ir::DType::BF16:
        return QStringLiteral("bf16");
    case ir::DType::F64:
        return QStringLiteral("fp64");
    default:
        return QString::fromLatin1(ir::toString(dtype).data());
    }
}

} // namespace

void InspectorView::addTensor(QTreeWidgetItem *parent, ir::TensorId t)
{
    const auto &tensor = m_model.graph->tensor(t);
    auto *item = addRow(parent, QString::fromStdString(tensor.name),
                        QString::fromStdString(layout::shapeLabel(tensor.shape)) + QStringLiteral("  ") +
                            shortType(tensor.dtype));
    item->setData(0, Qt::UserRole, t.value);
    addRow(item, tr("Type"), QString::fromLatin1(ir::toString(tensor.dtype).data()));
    addRow(item, tr("Role"), QString::fromLatin1(ir::toString(tensor.role).data()));
    addRow(item, tr("Bytes"), QLocale().formattedDataSize(tensor.byteCount(), 2, QLocale::DataSizeIecFormat));
    if (m_tensorSection)
        m_tensorSection(t, item);
}

void InspectorView::showViewNode(const layout::ViewNode *node)
{
    if (!node || !m_model.graph) {
        showNothing();
        return;
    }
    clear();
    const QLocale locale;
    const auto &graph = *m_model.graph;
    if (node->kind == layout::ViewNode::Kind::Block) {
        const auto &cls = m_model.classes->classes[node->cls.index()];
        addRow(nullptr, tr("Class"), QString::number(cls.id.value));
        addRow(nullptr, tr("Blocks"), QString::fromStdString(node->title));
        auto *instances = addRow(nullptr, tr("Instances here"), QString::number(node->instances.size()));
        for (auto i : node->instances)
            addRow(instances, QString::fromStdString(cls.instances[i].scope));
        addRow(nullptr, tr("Instances in the model"), QString::number(cls.instances.size()));
        addRow(nullptr, tr("Ops per instance"), QString::number(cls.opsPerInstance));
        addRow(nullptr, tr("Parameters per instance"), locale.toString(static_cast<qlonglong>(cls.parametersPerInstance)));
        const auto &rep = cls.instances[node->instances.front()];
        auto *params = addRow(nullptr, tr("Parameters"), QString::number(rep.parameters.size()));
        for (auto t : rep.parameters)
            addTensor(params, t);
        params->setExpanded(true);
        auto *ins = addRow(nullptr, tr("Inputs"), QString::number(rep.inputs.size()));
        for (auto t : rep.inputs)
            addTensor(ins, t);
        auto *outs = addRow(nullptr, tr("Outputs"), QString::number(rep.outputs.size()));
        for (auto t : rep.outputs)
            addTensor(outs, t);
        addRow(nullptr, tr("Hint"), tr("double-click the block to expand its first instance"));
        return;
    }
    const auto &cn = m_model.coarse->node(node->node);
    addRow(nullptr, tr("Node"), QString::fromUtf8(cn.name.data(), static_cast<qsizetype>(cn.name.size())));
    addRow(nullptr, tr("Kind"), QString::fromLatin1(passes::toString(cn.kind).data()));
    if (node->cls.valid())
        addRow(nullptr, tr("Class"), tr("%1 (instance %2)").arg(node->cls.value).arg(node->instances.front()));
    auto *ops = addRow(nullptr, tr("Ops"), QString::number(cn.ops.size()));
    for (auto o : cn.ops)
        addRow(ops, QString::fromStdString(graph.op(o).type), QString::fromStdString(graph.op(o).name));
    ops->setExpanded(true);
    auto *params = addRow(nullptr, tr("Parameters"), QString::number(cn.parameters.size()));
    for (auto t : cn.parameters)
        addTensor(params, t);
    params->setExpanded(true);
    auto *ins = addRow(nullptr, tr("Inputs"), QString::number(cn.inputs.size()));
    for (auto t : cn.inputs)
        addTensor(ins, t);
    ins->setExpanded(true);
    auto *outs = addRow(nullptr, tr("Outputs"), QString::number(cn.outputs.size()));
    for (auto t : cn.outputs)
        addTensor(outs, t);
    outs->setExpanded(true);
    if (m_nodeSection)
        m_nodeSection(cn.id, this);
}

} // namespace tapestry::views
