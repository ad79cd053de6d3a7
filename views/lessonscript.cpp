#include "lessonscript.h"

#include <QCoreApplication>
#include <QLocale>
#include <QStringList>

namespace tapestry::views {

namespace {

QString tr(const char *text)
{
    return QCoreApplication::translate("Lesson", text);
}

QString shapeText(const ir::Shape &shape)
{
    if (shape.empty())
        return QStringLiteral("a scalar");
    QStringList dims;
    for (auto d : shape)
        dims << QString::number(d);
    return dims.join(QStringLiteral("×"));
}

QString bytesText(qint64 bytes)
{
    return QLocale().formattedDataSize(bytes, 1, QLocale::DataSizeIecFormat);
}

QString secondsText(double s)
{
    if (s < 1e-3)
        return QStringLiteral("%1 µs").arg(s * 1e6, 0, 'f', 1);
    return QStringLiteral("%1 ms").arg(s * 1e3, 0, 'f', 2);
}

QString code(const QString &s)
{
    return QStringLiteral("<code>%1</code>").arg(s.toHtmlEscaped());
}

// The whole shape and one device's block of it.
QString blockText(const ir::Shape &shape, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh)
{
    const ir::Shape local = spec.localShape(shape, mesh);
    if (local == shape)
        return tr("all of it, %1").arg(shapeText(shape));
    return tr("a %1 block of its %2").arg(shapeText(local), shapeText(shape));
}

QString paragraph(const QString &s)
{
    return QStringLiteral("<p>%1</p>").arg(s);
}

// The specs of the tensors a lesson names, as they are on the mesh.
QString weightLine(const LessonSource &source, const std::string &name)
{
    const auto t = source.graph->findTensor(name);
    if (!t)
        return {};
    const auto &tensor = source.graph->tensor(*t);
    const auto spec = source.specOf(name);
    return tr("%1 (%2): %3; each device holds %4.")
        .arg(code(QString::fromStdString(name)), shapeText(tensor.shape), describeSpec(tensor.shape, spec, source.mesh),
             blockText(tensor.shape, spec, source.mesh));
}

// Two steps per collective of `node` (before, then after), the narration
// on the first and what the devices hold on the second; `steps` is
// source.stepsOf(node), returned.
QVector<CollectiveStep> addCollectives(Lesson &lesson, const LessonSource &source, const QString &node,
                                       const QString &heading, const QVector<CollectiveStep> &steps)
{
    for (int k = 0; k < steps.size(); ++k) {
        const CollectiveStep &c = steps[k];
        LessonStep before;
        before.node = node;
        before.frame = 2 * k + 1;
        before.title = tr("%1: %2 %3 (%4 of %5)")
                           .arg(heading, c.phase, QString::fromLatin1(sharding::toString(c.kind).data()))
                           .arg(k + 1)
                           .arg(steps.size());
        before.text = narrateCollective(c, source.mesh);
        lesson.steps.push_back(before);
        LessonStep after = before;
        after.frame = 2 * k + 2;
        after.title = tr("%1: after the %2").arg(heading, QString::fromLatin1(sharding::toString(c.kind).data()));
        after.text = paragraph(tr("After the %1 over %2, each device holds %3: %4.")
                                   .arg(QString::fromLatin1(sharding::toString(c.kind).data()),
                                        QString::fromStdString(source.mesh.axes[static_cast<std::size_t>(c.axis)].name),
                                        blockText(c.shape, c.after, source.mesh),
                                        describeSpec(c.shape, c.after, source.mesh)));
        lesson.steps.push_back(after);
    }
    return steps;
}

qint64 sentBy(const QVector<CollectiveStep> &steps)
{
    qint64 sent = 0;
    for (const auto &c : steps)
        sent += c.wireBytes;
    return sent;
}

} // namespace

QString describeSpec(const ir::Shape &shape, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh)
{
    QStringList parts;
    for (std::size_t a = 0; a < spec.placements.size() && a < mesh.axes.size(); ++a) {
        const auto &p = spec.placements[a];
        const QString axis = QString::fromStdString(mesh.axes[a].name);
        const int n = mesh.axes[a].size;
        if (p.isShard()) {
            const auto d = static_cast<std::size_t>(p.dim);
            const QString what = shape.size() == 2 ? (d == 0 ? tr("its rows") : tr("its columns"))
                                                   : tr("dim %1").arg(p.dim);
            parts << tr("%1 split %2 ways over %3").arg(what).arg(n).arg(axis);
        } else if (p.isPartial()) {
            parts << tr("partial sums over %1, to be added").arg(axis);
        } else if (mesh.axes.size() > 1) {
            parts << tr("whole along %1").arg(axis);
        }
    }
    if (parts.isEmpty())
        return tr("whole on every device");
    return parts.join(QStringLiteral(", "));
}

QString narrateCollective(const CollectiveStep &c, const sharding::Mesh &mesh)
{
    const auto &axis = mesh.axes[static_cast<std::size_t>(c.axis)];
    const QString axisName = QString::fromStdString(axis.name);
    const int n = axis.size;
    const bool gradient = c.reason.startsWith(QStringLiteral("gradient")) ||
                          c.reason.startsWith(QStringLiteral("weight gradient"));
    const QString subject = gradient ? tr("the gradient of %1").arg(code(c.tensor)) : code(c.tensor);
    const QString pass = c.phase == QStringLiteral("backward") ? tr("In the backward pass") : tr("In the forward pass");
    QString what;
    switch (c.kind) {
    case sharding::CollectiveKind::AllGather:
        what = tr("%1, each of the %2 devices along %3 holds a piece of %4 (%5) and the next op needs it whole "
                  "along %3. An <b>all-gather</b>: each device sends its piece to the other %6 and receives "
                  "theirs, so that all %2 hold the same, larger block.")
                   .arg(pass)
                   .arg(n)
                   .arg(axisName, subject, blockText(c.shape, c.before, mesh))
                   .arg(n - 1);
        break;
    case sharding::CollectiveKind::AllReduce:
        what = tr("%1, each of the %2 devices along %3 holds a <i>partial sum</i> of %4: the op before it "
                  "multiplied along a dimension that is split over %3, so each device summed only its part. An "
                  "<b>all-reduce</b> adds the %2 partial sums and gives every device the total. It runs as a "
                  "reduce-scatter then an all-gather, each device sending 2·(%2−1)/%2 of the tensor.")
                   .arg(pass)
                   .arg(n)
                   .arg(axisName, subject);
        break;
    case sharding::CollectiveKind::ReduceScatter:
        what = tr("%1, each of the %2 devices along %3 holds a <i>partial sum</i> of %4, and the plan stores the "
                  "result split over %3. A <b>reduce-scatter</b> adds the partial sums and leaves each device "
                  "only its 1/%2 of the total: half an all-reduce, (%2−1)/%2 of the tensor sent per device.")
                   .arg(pass)
                   .arg(n)
                   .arg(axisName, subject);
        break;
    case sharding::CollectiveKind::AllToAll:
        what = tr("%1, %2 is split along one dimension over %3 (%4) and the next op needs it split along "
                  "another. An <b>all-to-all</b>: each device keeps the part of its block that stays with it and "
                  "sends every other part to the device that owns it in the new split; nothing is added and "
                  "nothing is duplicated.")
                   .arg(pass, subject, axisName, describeSpec(c.shape, c.before, mesh));
        break;
    }
    const QString cost =
        tr("%1 is %2 whole; each device sends %3, about %4 on this mesh's %5 link.")
            .arg(subject, bytesText(c.bytes), bytesText(c.wireBytes), secondsText(c.seconds), axisName);
    QString text = paragraph(what) + paragraph(cost);
    if (!c.reason.isEmpty())
        text += QStringLiteral("<p><small>%1</small></p>").arg(tr("The plan's reason: %1.").arg(c.reason.toHtmlEscaped()));
    return text;
}

Lesson columnThenRowLesson(const LessonSource &source)
{
    Lesson lesson;
    lesson.title = tr("Lesson 1. Y = X·B·C: B split by columns, C by rows");
    const int n = static_cast<int>(source.mesh.deviceCount());
    LessonStep first;
    first.node = QStringLiteral("first");
    first.title = tr("B split by columns");
    first.text = paragraph(tr("The model computes Y = X·B·C with two matmuls. Megatron-LM splits it over %1 devices "
                              "so that the two matmuls need one collective between them all, and here is how.")
                               .arg(n)) +
                 paragraph(weightLine(source, "first.weight")) +
                 paragraph(tr("Every device has the whole input X, so it multiplies X by its own columns of B and "
                              "gets its own columns of T = X·B. Each column of T depends on one column of B only: "
                              "<b>no communication</b>, and nothing to add up. The mesh view colours each device's "
                              "block of B."));
    lesson.steps.push_back(first);
    LessonStep second;
    second.node = QStringLiteral("second");
    second.title = tr("C split by rows");
    second.text = paragraph(tr("The second matmul reads T as the first left it: split by columns. C is split by "
                               "<b>rows</b> to match, so that each device holds the rows of C its columns of T "
                               "multiply:")) +
                  paragraph(weightLine(source, "second.weight")) +
                  paragraph(tr("Each device multiplies without communication, but what it gets is only a "
                               "<i>partial sum</i> of Y: Y = Y<sub>0</sub> + Y<sub>1</sub> + … + Y<sub>%1</sub>, one term per "
                               "device.")
                                .arg(n - 1));
    lesson.steps.push_back(second);
    const auto steps = addCollectives(lesson, source, second.node, tr("Y"), source.stepsOf(second.node));
    LessonStep last;
    last.node = second.node;
    last.title = tr("What it cost");
    last.text = paragraph(tr("The whole step sent %1 per device for Y = X·B·C, in %2 collective(s) after the "
                             "second matmul and none between the two.")
                              .arg(bytesText(sentBy(steps)))
                              .arg(steps.size())) +
                paragraph(tr("Had C been split by columns too, T would have had to be gathered whole between the "
                             "matmuls on every step. Column then row is the pattern of a Megatron transformer "
                             "layer: its MLP is this lesson with an activation between the matmuls, and its "
                             "attention the same with the heads split, two all-reduces forward and two backward per "
                             "layer."));
    lesson.steps.push_back(last);
    return lesson;
}

Lesson twoDimensionalLesson(const LessonSource &source)
{
    Lesson lesson;
    lesson.title = tr("Lesson 2. A 2-layer MLP fully sharded on a 4x2 mesh");
    QString axes;
    for (const auto &a : source.mesh.axes)
        axes += (axes.isEmpty() ? QString() : tr(" and ")) +
                tr("%1 (%2 devices)").arg(QString::fromStdString(a.name)).arg(a.size);
    LessonStep intro;
    intro.node = QStringLiteral("mlp/fc1");
    intro.title = tr("Every tensor split over all 8 devices");
    intro.text = paragraph(tr("The devices form a grid with axes %1. The model is Z = relu(D·A)·B: D the input, A "
                              "and B the two layers' weights. Each is split over <b>both</b> axes, so each device "
                              "holds an eighth of every tensor: the least memory a plan can take, paid for in "
                              "collectives.")
                               .arg(axes)) +
                 paragraph(weightLine(source, "x")) + paragraph(weightLine(source, "mlp.fc1.weight")) +
                 paragraph(weightLine(source, "mlp.fc2.weight")) +
                 paragraph(tr("Before a device can multiply, it needs whole rows of the left operand against whole "
                              "columns of the right one along the dimension they share. The next steps show the "
                              "collectives that bring them, for the first layer and then the second."));
    lesson.steps.push_back(intro);
    const auto first = addCollectives(lesson, source, intro.node, tr("First layer"), source.stepsOf(intro.node));
    LessonStep second;
    second.node = QStringLiteral("mlp/fc2");
    second.title = tr("The second layer");
    second.text = paragraph(tr("After the ReLU, the first layer's output U is split over both axes as D was. The "
                               "second matmul multiplies U by B:")) +
                  paragraph(weightLine(source, "mlp.fc2.weight")) +
                  paragraph(tr("Its output must come back split as D is, ready for a next layer. Each collective "
                               "the plan runs for it follows, forward then backward."));
    lesson.steps.push_back(second);
    const auto then = addCollectives(lesson, source, second.node, tr("Second layer"), source.stepsOf(second.node));
    LessonStep last;
    last.node = second.node;
    last.title = tr("What it cost");
    const qint64 sent = sentBy(first) + sentBy(then);
    last.text = paragraph(tr("One training step sent %1 per device for the two layers. Forward, the gathers bring "
                             "whole rows and columns where a matmul needs them and the reduce-scatter adds the "
                             "partial sums and splits them in one go; backward mirrors it: each gather of the "
                             "forward pass becomes a reduce-scatter of a gradient.")
                              .arg(bytesText(sent))) +
                paragraph(tr("Compare with Lesson 1: a 1D split keeps whole copies of the activations on every "
                             "device; the 2D split keeps an eighth of everything and moves more, smaller "
                             "pieces."));
    lesson.steps.push_back(last);
    return lesson;
}

Lesson ownPlanLesson(const LessonSource &source, const QString &subject, const std::vector<NarratedNode> &nodes)
{
    Lesson lesson;
    lesson.title = tr("Your plan: %1").arg(subject);
    QVector<CollectiveStep> all;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        const NarratedNode &node = nodes[i];
        LessonStep intro;
        intro.node = node.name;
        intro.title = tr("How %1 lies on the mesh").arg(node.name);
        QString layout;
        for (ir::TensorId t : node.weights)
            layout += paragraph(weightLine(source, source.graph->tensor(t).name));
        const auto steps = source.stepsOf(node.name);
        QString opening;
        if (i == 0)
            opening = paragraph(nodes.size() > 1 ? tr("The plan on %1 runs %2 with collectives in %3 of its nodes; "
                                                      "each copy of it runs as this one.")
                                                       .arg(QString::fromStdString(source.mesh.toString()).toHtmlEscaped(),
                                                            code(subject))
                                                       .arg(nodes.size())
                                                 : tr("The plan on %1 splits this node's weights as follows.")
                                                       .arg(QString::fromStdString(source.mesh.toString()).toHtmlEscaped()));
        intro.text = opening +
                     (layout.isEmpty() ? paragraph(tr("%1 has no weight of its own: it follows the tensors it reads.")
                                                       .arg(code(node.name)))
                                       : layout) +
                     paragraph(steps.isEmpty() ? tr("Its inputs arrive as it computes on them: it runs no collective.")
                                               : tr("%1 runs %2 collective(s) in a training step; Next narrates each, "
                                                    "with the blocks before and after on the mesh.")
                                                     .arg(code(node.name))
                                                     .arg(steps.size()));
        lesson.steps.push_back(intro);
        all += addCollectives(lesson, source, node.name, node.name.section(QLatin1Char('/'), -2), steps);
    }
    if (!all.isEmpty() && !nodes.empty()) {
        LessonStep last;
        last.node = nodes.back().name;
        last.title = tr("What it cost");
        double seconds = 0;
        for (const auto &c : all)
            seconds += c.seconds;
        last.text = paragraph(tr("%1 sends %2 per device per step in %3 collective(s), about %4. Pin another spec "
                                 "on one of its weights (right-click a node) and open this lesson again to see what "
                                 "changes.")
                                  .arg(code(subject))
                                  .arg(bytesText(sentBy(all)))
                                  .arg(all.size())
                                  .arg(secondsText(seconds)));
        lesson.steps.push_back(last);
    }
    return lesson;
}

} // namespace tapestry::views
