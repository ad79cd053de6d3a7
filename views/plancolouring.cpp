#include "plancolouring.h"

#include "palette.h"
#include "plandocument.h"

#include <QObject>
#include <QStringList>

#include <algorithm>

namespace tapestry::views {

QColor shardingColour(const PlanDocument &document, const layout::ViewNode &node)
{
    const auto &planned = document.planned();
    const auto &model = document.model();
    if (!planned.plan)
        return neutralColor();
    ir::TensorId biggest;
    for (auto n : coarseNodesOf(model, node)) {
        for (auto t : model.coarse->node(n).parameters)
            if (!biggest.valid() || model.graph->tensor(t).elementCount() > model.graph->tensor(biggest).elementCount())
                biggest = t;
        if (node.kind == layout::ViewNode::Kind::Block && biggest.valid())
            break;
    }
    if (!biggest.valid())
        return neutralColor();
    const auto &spec = planned.specs[biggest.index()];
    int splits = 0, dim = -1;
    for (const auto &pl : spec.placements)
        if (pl.isShard()) {
            ++splits;
            dim = pl.dim;
        }
    if (splits == 0)
        return QColor(0xe0e0e0);
    if (splits > 1)
        return QColor(0xce93d8);
    const int rank = static_cast<int>(model.graph->tensor(biggest).shape.size());
    // The output features are the last dim of an [in, out] weight, the
    // first of the [out, in] a Gemm reads transposed (torch's nn.Linear as
    // ONNX exports it on 2-D inputs).
    int outputDim = rank - 1, inputDim = rank - 2;
    for (ir::OpId c : model.graph->tensor(biggest).consumers) {
        const ir::Op &op = model.graph->op(c);
        if (op.type == "Gemm" && rank == 2 && op.inputs.size() > 1 && op.inputs[1] == biggest &&
            ir::intAttr(op.attributes, "transB").value_or(0) != 0)
            std::swap(outputDim, inputDim);
        break;
    }
    if (dim == outputDim)
        return QColor(0x90caf9);  // columns (output features)
    if (dim == inputDim)
        return QColor(0xa5d6a7);  // rows (input features)
    return QColor(0xffe082);
}

QColor costColour(const PlanDocument &document, const layout::ViewNode &node)
{
    const auto &planned = document.planned();
    if (!planned.plan || planned.byNode.empty())
        return neutralColor();
    double most = 0;
    for (const auto &[_, t] : planned.byNode)
        most = std::max(most, t.total());
    double mine = 0;
    for (auto n : coarseNodesOf(document.model(), node)) {
        auto it = planned.byNode.find(n.value);
        if (it != planned.byNode.end())
            mine += it->second.total();
    }
    if (node.kind == layout::ViewNode::Kind::Block) {
        // A block's heat is that of one instance, comparable with single nodes.
        mine /= std::max<std::size_t>(1, node.instances.size());
    }
    return heatColor(most > 0 ? mine / most : 0);
}

QColor differenceColour(const PlanDocument &document, const layout::ViewNode &node)
{
    const auto &model = document.model();
    for (auto n : coarseNodesOf(model, node)) {
        const auto &cn = model.coarse->node(n);
        for (const auto *list : {&cn.parameters, &cn.outputs})
            for (auto t : *list)
                if (document.differingTensors().count(model.graph->tensor(t).name))
                    return QColor(0xffb74d);
    }
    return QColor(0xeceff1);
}

QString colouringLegend(int colouring, bool planShown)
{
    auto swatch = [](QColor c, const QString &what) {
        return QStringLiteral("<span style=\"color:%1\">&#9632;</span>&nbsp;%2").arg(c.name(), what);
    };
    const QString sep = QStringLiteral(" &nbsp; ");
    QString nodes;
    switch (colouring) {
    case 1:
        nodes = QObject::tr("Nodes by their largest weight:") + QLatin1Char(' ') +
                QStringList{swatch(QColor(0xe0e0e0), QObject::tr("replicated")),
                            swatch(QColor(0x90caf9), QObject::tr("split by columns")),
                            swatch(QColor(0xa5d6a7), QObject::tr("by rows")),
                            swatch(QColor(0xffe082), QObject::tr("another dim")),
                            swatch(QColor(0xce93d8), QObject::tr("on several axes"))}
                    .join(sep);
        break;
    case 2:
        nodes = QObject::tr("Nodes by time:") + QLatin1Char(' ') +
                QStringList{swatch(heatColor(0), QObject::tr("least")), swatch(heatColor(0.5), QObject::tr("half")),
                            swatch(heatColor(1), QObject::tr("the costliest node (a class: one layer)"))}
                    .join(sep);
        break;
    case 3:
        nodes = QObject::tr("Nodes:") + QLatin1Char(' ') +
                QStringList{swatch(QColor(0xffb74d), QObject::tr("a weight or output differs from the compared plan")),
                            swatch(QColor(0xeceff1), QObject::tr("the same"))}
                    .join(sep);
        break;
    default:
        nodes = QObject::tr("Nodes: the colour of their class in Unique subgraphs, ×N its copies");
        break;
    }
    if (!planShown)
        return nodes;
    return nodes + QStringLiteral(" &nbsp;|&nbsp; ") +
           QObject::tr("Edges: shape, <span style=\"color:#bf360c\">each device's block</span> where split, "
                       "&Sigma; a partial sum; <span style=\"color:#e65100\"><b>orange</b></span> where "
                       "collectives move it, heavier the costlier");
}

} // namespace tapestry::views
