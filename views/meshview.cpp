#include "meshview.h"

#include "imagefile.h"
#include "layout/viewgraph.h"
#include "palette.h"
#include "sharding/deviceblock.h"

#include <QBuffer>
#include <QPainter>
#include <QPainterPath>
#include <QSvgGenerator>

#include <cmath>

namespace tapestry::views {

MeshView::MeshView(QWidget *parent) : QWidget(parent)
{
    setMinimumSize(320, 220);
    m_player.setSingleShot(true);
    // Playing: from a frame as planned or after a collective, on to the
    // next collective's "before" frame, then its animation.
    connect(&m_player, &QTimer::timeout, this, [this] {
        if (!m_playing)
            return;
        if (m_frame % 2 == 0 && m_frame + 1 < frameCount()) {
            setFrame(m_frame + 1);
            m_player.start(static_cast<int>(400 / m_speed));
        } else if (m_frame % 2 == 1) {
            animateCollective();
        } else {
            play(false);
        }
    });
    m_motion.setStartValue(0.0);
    m_motion.setEndValue(1.0);
    m_motion.setEasingCurve(QEasingCurve::Linear);
    connect(&m_motion, &QVariantAnimation::valueChanged, this, [this](const QVariant &v) {
        if (m_transition >= 0)
            setTransition(v.toDouble());
    });
    connect(&m_motion, &QVariantAnimation::finished, this, [this] {
        if (m_transition < 0)
            return;
        m_transition = -1;
        setFrame(m_frame + 1);  // the collective's "after" frame
        if (m_playing)
            m_player.start(static_cast<int>(700 / m_speed));
    });
}

int MeshView::hops() const
{
    if (m_frame % 2 != 1 || m_steps.isEmpty())
        return 0;
    const auto &step = m_steps[(m_frame - 1) / 2];
    const int n = m_mesh.axes[static_cast<std::size_t>(step.axis)].size;
    return step.kind == sharding::CollectiveKind::AllReduce ? 2 * (n - 1) : n - 1;
}

void MeshView::animateCollective()
{
    if (m_frame % 2 != 1 || hops() <= 0)
        return;
    m_motion.stop();
    m_motion.setDuration(static_cast<int>(500.0 * hops() / m_speed));
    m_transition = 0;
    m_motion.start();
    update();
}

void MeshView::setTransition(double t)
{
    m_transition = m_frame % 2 == 1 && t >= 0 ? std::min(t, 1.0) : -1;
    update();
}

void MeshView::setMesh(const sharding::Mesh &mesh, const std::vector<plan::AxisCarries> &carries)
{
    m_mesh = mesh;
    m_carries = carries.size() == mesh.axes.size() ? carries : std::vector<plan::AxisCarries>{};
    setToolTip(axesLegend());
    update();
}

QString MeshView::axisLegend(std::size_t a) const
{
    const auto &axis = m_mesh.axes[a];
    // As deviceRect lays devices out: the last axis across, the others down.
    const QString direction = m_mesh.rank() == 1 ? QString()
                              : a + 1 == m_mesh.axes.size() ? tr(", columns")
                                                            : tr(", rows");
    QString line = tr("axis %1 (%2%3) carries %4")
                       .arg(QString::fromStdString(axis.name))
                       .arg(axis.size)
                       .arg(direction, QString::fromStdString(m_carries[a].toString()));
    if (!axisMatchesName(a)) {
        // Carrying the named role and more, or something else altogether.
        const plan::AxisRole named = *plan::axisRoleFromName(axis.name);
        const QString role = QString::fromUtf8(plan::toString(named).data());
        line += m_carries[a].has(named) ? tr(" — more than named") : tr(" — not %1 as named").arg(role);
    }
    return line;
}

bool MeshView::axisMatchesName(std::size_t a) const
{
    return !plan::axisRoleFromName(m_mesh.axes[a].name) || plan::carriesMatchName(m_carries[a], m_mesh.axes[a].name);
}

QString MeshView::axesLegend() const
{
    QStringList lines;
    for (std::size_t a = 0; a < m_carries.size(); ++a)
        lines << axisLegend(a);
    return lines.join(QLatin1Char('\n'));
}

void MeshView::setTensor(const QString &name, const ir::Shape &shape, const sharding::ShardingSpec &spec)
{
    m_tensor = name;
    m_shape = shape;
    m_spec = spec;
    m_steps.clear();
    setFrame(0);
}

void MeshView::setSteps(const QVector<CollectiveStep> &steps)
{
    m_steps = steps;
    setFrame(0);
}

void MeshView::clear()
{
    m_tensor.clear();
    m_shape.clear();
    m_steps.clear();
    setFrame(0);
}

void MeshView::setFrame(int frame)
{
    if (m_transition >= 0) {  // a frame set by hand ends the animation
        m_transition = -1;
        m_motion.stop();
    }
    m_frame = std::clamp(frame, 0, frameCount() - 1);
    update();
    emit frameChanged(m_frame);
}

void MeshView::next()
{
    setFrame(m_frame + 1);
}

void MeshView::previous()
{
    setFrame(m_frame - 1);
}

void MeshView::play(bool on)
{
    if (on == m_playing)
        return;
    m_playing = on;
    if (on) {
        if (m_frame + 1 >= frameCount())
            setFrame(0);
        if (m_frame % 2 == 1)
            animateCollective();
        else
            m_player.start(0);
    } else {
        m_player.stop();
        if (m_transition >= 0) {
            m_motion.stop();
            m_transition = -1;
            update();
        }
    }
    emit playingChanged(on);
}

const sharding::ShardingSpec &MeshView::shownSpec() const
{
    if (m_frame == 0 || m_steps.isEmpty())
        return m_spec;
    const auto &step = m_steps[(m_frame - 1) / 2];
    return (m_frame - 1) % 2 == 0 ? step.before : step.after;
}

const QString &MeshView::shownTensor() const
{
    return m_frame == 0 || m_steps.isEmpty() ? m_tensor : m_steps[(m_frame - 1) / 2].tensor;
}

const ir::Shape &MeshView::shownShape() const
{
    return m_frame == 0 || m_steps.isEmpty() ? m_shape : m_steps[(m_frame - 1) / 2].shape;
}

int MeshView::activeAxis() const
{
    if (m_frame == 0 || m_steps.isEmpty())
        return -1;
    return m_steps[(m_frame - 1) / 2].axis;
}

QString MeshView::caption() const
{
    if (m_tensor.isEmpty())
        return tr("Select a tensor or a node to see how it lies on the mesh");
    const QString base = QString::fromStdString(
        sharding::blockNotation(shownTensor().toStdString(), shownSpec(), static_cast<int>(shownShape().size()), m_mesh));
    if (m_frame == 0)
        return tr("%1 as planned · %2 on mesh %3").arg(base, QString::fromStdString(layout::shapeLabel(m_shape)),
                                                       QString::fromStdString(m_mesh.toString()));
    const auto &step = m_steps[(m_frame - 1) / 2];
    return tr("Step %1/%2 %3: %4 — %5 · %6")
        .arg((m_frame - 1) / 2 + 1)
        .arg(m_steps.size())
        .arg((m_frame - 1) % 2 == 0 ? tr("before") : tr("after"), step.title, base, step.detail);
}

QString MeshView::deviceLabel(int device) const
{
    const auto rank = static_cast<int>(shownShape().size());
    const auto block = sharding::deviceBlock(shownSpec(), rank, m_mesh, device);
    QString index;
    for (std::size_t d = 0; d < block.index.size(); ++d)
        if (block.blocks[d] > 1)
            index += QStringLiteral("%1%2/%3").arg(index.isEmpty() ? QString() : QStringLiteral(" ")).arg(block.index[d]).arg(block.blocks[d]);
    return index.isEmpty() ? tr("whole") : index;
}

void MeshView::paintEvent(QPaintEvent *)
{
    QPainter p(this);
    p.fillRect(rect(), palette().base());
    paintMesh(p, rect());
}

QFont MeshView::smallFont() const
{
    QFont small = font();
    small.setPointSizeF(std::max(6.0, font().pointSizeF() - 1.5));
    return small;
}

int MeshView::captionHeight(int width) const
{
    // The caption wrapped to the width, every line of it: at least two
    // lines (the height the grid starts below whatever the caption), at
    // most four.
    const QFontMetrics fm(font());
    const int wrapped = fm.boundingRect(QRect(0, 0, std::max(1, width), 10 * fm.height()),
                                        Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, caption())
                            .height();
    return std::clamp(wrapped, 2 * fm.height(), 4 * fm.height()) + 4;
}

QRectF MeshView::deviceRect(int device, const QRect &area) const
{
    if (m_mesh.axes.empty())
        return {};
    const int captionH =
        captionHeight(area.width() - 16) + static_cast<int>(m_carries.size()) * QFontMetrics(smallFont()).height() + 2;
    // Rows: every axis but the last; columns: the last axis. A 1D mesh too
    // narrow for its devices' labels wraps onto rows, in reading order.
    const int devices = m_mesh.deviceCount();
    const QRect grid = area.adjusted(12, captionH + 14, -12, -10);
    const qreal gap = 14;
    auto widthOf = [&](int columns) { return (grid.width() - gap * (columns - 1)) / columns; };
    const qreal labelW =
        QFontMetrics(smallFont()).horizontalAdvance(tr("dev %1 (%2)").arg(devices - 1).arg(devices - 1)) + 8;
    int cols = m_mesh.axes.back().size;
    if (m_mesh.rank() == 1)
        while (cols > 1 && widthOf(cols) < labelW)
            cols = (cols + 1) / 2;
    const int rows = (devices + cols - 1) / cols;
    const qreal tileW = widthOf(cols);
    const qreal tileH = std::min<qreal>((grid.height() - gap * (rows - 1)) / rows, tileW * 0.9);
    const int r = device / cols, c = device % cols;
    return QRectF(grid.left() + c * (tileW + gap), grid.top() + r * (tileH + gap), tileW, tileH);
}

void MeshView::paintMesh(QPainter &p, const QRect &area)
{
    p.setRenderHint(QPainter::Antialiasing);
    const QFontMetrics fm(font());
    p.setPen(palette().color(QPalette::Text));
    const QRect captionBox(area.left() + 8, area.top() + 4, area.width() - 16, captionHeight(area.width() - 16));
    p.drawText(captionBox, Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, caption());
    if (m_mesh.axes.empty())
        return;
    const QFont small = smallFont();
    const QFontMetrics smallFm(small);
    // One line per axis: what the plan does with it, flagged where its
    // name says otherwise.
    p.setFont(small);
    for (std::size_t a = 0; a < m_carries.size(); ++a) {
        const QRect line(captionBox.left(), captionBox.bottom() + 2 + static_cast<int>(a) * smallFm.height(),
                         captionBox.width(), smallFm.height());
        p.setPen(axisMatchesName(a) ? QColor(0x37474f) : QColor(0xbf360c));
        p.drawText(line, Qt::AlignLeft | Qt::AlignTop, smallFm.elidedText(axisLegend(a), Qt::ElideRight, line.width()));
    }
    p.setFont(font());
    p.setPen(palette().color(QPalette::Text));
    const int devices = m_mesh.deviceCount();
    const int rank = static_cast<int>(shownShape().size());
    const auto &spec = shownSpec();
    auto tileRect = [&](int device) { return deviceRect(device, area); };
    for (int device = 0; device < devices; ++device) {
        const QRectF tile = tileRect(device);
        p.setPen(QPen(QColor(0x90a4ae), 1));
        p.setBrush(QColor(0xfafafa));
        p.drawRoundedRect(tile, 5, 5);
        const auto coord = sharding::meshCoordinate(m_mesh, device);
        QString where;
        for (int c : coord)
            where += (where.isEmpty() ? QString() : QStringLiteral(",")) + QString::number(c);
        p.setFont(small);
        p.setPen(QColor(0x546e7a));
        // Narrow tiles (a wide multi-axis mesh) name the device by number only.
        const QString label = tr("dev %1 (%2)").arg(device).arg(where);
        p.drawText(tile.adjusted(4, 2, -4, 0), Qt::AlignLeft | Qt::AlignTop,
                   smallFm.horizontalAdvance(label) + 8 <= tile.width() ? label : QString::number(device));
        if (m_tensor.isEmpty() || rank == 0)
            continue;
        // The tensor as a rectangle (its last two dims), cut into blocks; this
        // device's block filled, coloured by which block it is.
        const auto block = sharding::deviceBlock(spec, rank, m_mesh, device);
        const std::int64_t rowsBlocks = rank >= 2 ? block.blocks[static_cast<std::size_t>(rank - 2)] : 1;
        const std::int64_t colBlocks = block.blocks[static_cast<std::size_t>(rank - 1)];
        const std::int64_t rowIndex = rank >= 2 ? block.index[static_cast<std::size_t>(rank - 2)] : 0;
        const std::int64_t colIndex = block.index[static_cast<std::size_t>(rank - 1)];
        const QRectF body = tile.adjusted(8, fm.height() + 4, -8, -fm.height() - 4);
        p.setPen(QPen(QColor(0xb0bec5), 1));
        p.setBrush(Qt::white);
        p.drawRect(body);
        const qreal bw = body.width() / static_cast<qreal>(colBlocks), bh = body.height() / static_cast<qreal>(rowsBlocks);
        const QRectF mine(body.left() + static_cast<qreal>(colIndex) * bw, body.top() + static_cast<qreal>(rowIndex) * bh, bw, bh);
        QColor fill = classColor(static_cast<int>(block.linearIndex()));
        p.setBrush(fill);
        p.drawRect(mine);
        if (!block.partialAxes.empty()) {
            p.setBrush(QBrush(fill.darker(160), Qt::BDiagPattern));
            p.drawRect(mine);
        }
        for (std::int64_t i = 1; i < colBlocks; ++i)
            p.drawLine(QPointF(body.left() + static_cast<qreal>(i) * bw, body.top()), QPointF(body.left() + static_cast<qreal>(i) * bw, body.bottom()));
        for (std::int64_t i = 1; i < rowsBlocks; ++i)
            p.drawLine(QPointF(body.left(), body.top() + static_cast<qreal>(i) * bh), QPointF(body.right(), body.top() + static_cast<qreal>(i) * bh));
        p.setPen(QColor(0x263238));
        const auto local = spec.localShape(shownShape(), m_mesh);
        p.drawText(tile.adjusted(4, 0, -4, -2), Qt::AlignHCenter | Qt::AlignBottom,
                   QString::fromStdString(layout::shapeLabel(local)) +
                       (block.partialAxes.empty() ? QString() : QStringLiteral(" Σ")));
        p.setFont(font());
    }
    // Arrows along the axis the current collective runs over, ring order.
    const int axis = activeAxis();
    if (axis < 0 || axis >= m_mesh.rank())
        return;
    p.setPen(QPen(QColor(0xe65100), 2));
    for (int device = 0; device < m_mesh.deviceCount(); ++device) {
        auto coord = sharding::meshCoordinate(m_mesh, device);
        const auto a = static_cast<std::size_t>(axis);
        coord[a] = (coord[a] + 1) % m_mesh.axes[a].size;
        if (coord[a] == 0 && m_mesh.axes[a].size <= 2 && sharding::meshCoordinate(m_mesh, device)[a] == 1)
            continue;  // a ring of two is one exchange
        int to = 0;
        for (std::size_t k = 0; k < coord.size(); ++k)
            to = to * m_mesh.axes[k].size + coord[k];
        const QPointF from = tileRect(device).center(), target = tileRect(to).center();
        QPainterPath path(from);
        const QPointF mid = (from + target) / 2 + QPointF(0, -12);
        path.quadTo(mid, target);
        p.setBrush(Qt::NoBrush);
        p.drawPath(path);
        const double angle = std::atan2(target.y() - mid.y(), target.x() - mid.x());
        QPolygonF head;
        head << target << target - QPointF(std::cos(angle - 0.4) * 9, std::sin(angle - 0.4) * 9)
             << target - QPointF(std::cos(angle + 0.4) * 9, std::sin(angle + 0.4) * 9);
        p.setBrush(QColor(0xe65100));
        p.drawPolygon(head);
    }
    if (m_transition >= 0)
        paintMotion(p, area);
}

void MeshView::paintMotion(QPainter &p, const QRect &area)
{
    const int total = hops();
    if (total <= 0 || m_steps.isEmpty())
        return;
    const auto &step = m_steps[(m_frame - 1) / 2];
    const auto a = static_cast<std::size_t>(step.axis);
    const int n = m_mesh.axes[a].size;
    const double progress = m_transition * total;
    const int hop = std::min(total - 1, static_cast<int>(progress));
    const double u = progress - hop;
    // Reduce-scatter, and the first half of an all-reduce, carry partial
    // sums (hatched); gathers and all-to-alls, finished blocks.
    const bool reducing = step.kind == sharding::CollectiveKind::ReduceScatter ||
                          (step.kind == sharding::CollectiveKind::AllReduce && hop < n - 1);
    const int rank = static_cast<int>(step.shape.size());
    auto deviceAt = [&](std::vector<int> coord, int position) {
        coord[a] = ((position % n) + n) % n;
        int d = 0;
        for (std::size_t k = 0; k < coord.size(); ++k)
            d = d * m_mesh.axes[k].size + coord[k];
        return d;
    };
    const QSizeF piece(18, 12);
    for (int device = 0; device < m_mesh.deviceCount(); ++device) {
        const auto coord = sharding::meshCoordinate(m_mesh, device);
        const int at = coord[a];
        // Ring algorithms pass to the next device; an all-to-all's round h
        // sends to the device h further along.
        const int ringHop = step.kind == sharding::CollectiveKind::AllReduce ? hop % (n - 1) : hop;
        const int to = step.kind == sharding::CollectiveKind::AllToAll ? deviceAt(coord, at + hop + 1)
                                                                       : deviceAt(coord, at + 1);
        // Whose block it carries: in a ring, the one that started ringHop devices back.
        const int origin = step.kind == sharding::CollectiveKind::AllToAll ? device : deviceAt(coord, at - ringHop);
        // An all-reduce's gathering half carries summed blocks: the after's.
        const sharding::ShardingSpec &spec =
            step.kind == sharding::CollectiveKind::AllReduce && !reducing ? step.after : step.before;
        const QColor fill = rank > 0 ? classColor(static_cast<int>(
                                           sharding::deviceBlock(spec, rank, m_mesh, origin).linearIndex()))
                                     : QColor(0x90a4ae);
        const QPointF from = deviceRect(device, area).center(), target = deviceRect(to, area).center();
        QPainterPath path(from);
        path.quadTo((from + target) / 2 + QPointF(0, -12), target);
        const double eased = u * u * (3 - 2 * u);  // smooth start and stop per hop
        const QPointF c = path.pointAtPercent(eased);
        const QRectF box(c - QPointF(piece.width() / 2, piece.height() / 2), piece);
        p.setPen(QPen(Qt::white, 1.5));
        p.setBrush(fill);
        p.drawRoundedRect(box, 2, 2);
        if (reducing) {
            p.setPen(Qt::NoPen);
            p.setBrush(QBrush(fill.darker(170), Qt::BDiagPattern));
            p.drawRoundedRect(box, 2, 2);
        }
    }
}

bool MeshView::exportImage(const QString &path, QString *error)
{
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    const QRect area(0, 0, std::max(width(), 640), std::max(height(), 400));
    if (path.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
        QSvgGenerator svg;
        svg.setOutputDevice(&buffer);
        svg.setSize(area.size());
        svg.setViewBox(area);
        QPainter p;
        if (!p.begin(&svg))
            return false;
        paintMesh(p, area);
        p.end();
    } else {
        QImage image(area.size() * 2, QImage::Format_ARGB32);
        image.fill(Qt::white);
        QPainter p(&image);
        p.scale(2, 2);
        paintMesh(p, area);
        p.end();
        if (!image.save(&buffer, "PNG"))
            return false;
    }
    return writeImageFile(path, bytes, error);
}

} // namespace tapestry::views
