#include "canvasedge.h"

#include <algorithm>

#include <QFontDatabase>
#include <QFontMetricsF>
#include <QPainter>
#include <QtMath>

namespace tapestry::views {

QFont CanvasEdge::labelFont()
{
    // 9 scene units (points) high, as the layout sizes it (fontsize 9).
    QFont f = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    f.setPixelSize(9);
    return f;
}

CanvasEdge::CanvasEdge(const QVector<QPointF> &points, const QString &label, QPointF labelPos,
                       QGraphicsItem *parent)
    : QGraphicsPathItem(parent), m_label(label), m_labelPos(labelPos)
{
    QPainterPath path;
    if (!points.isEmpty()) {
        path.moveTo(points.front());
        // Graphviz gives a cubic B-spline as 1 + 3k control points.
        int i = 1;
        for (; i + 2 < points.size(); i += 3)
            path.cubicTo(points[i], points[i + 1], points[i + 2]);
        for (; i < points.size(); ++i)
            path.lineTo(points[i]);
        if (points.size() >= 2) {
            const QPointF tip = points.back();
            const QPointF from = points[points.size() - 2];
            const qreal angle = std::atan2(tip.y() - from.y(), tip.x() - from.x());
            const qreal size = 7;
            m_arrow << tip << tip - QPointF(std::cos(angle - 0.4) * size, std::sin(angle - 0.4) * size)
                    << tip - QPointF(std::cos(angle + 0.4) * size, std::sin(angle + 0.4) * size);
        }
    }
    setPath(path);
    setPen(QPen(QColor(0x78909c), 1.2));
    setZValue(-1);
    if (!label.isEmpty())
        setToolTip(label);
}

void CanvasEdge::setSharding(const QString &note, const QString &tooltip, qreal emphasis)
{
    prepareGeometryChange();
    m_note = note;
    m_emphasis = std::clamp(emphasis, 0.0, 1.0);
    const QColor quiet(0x78909c), busy(0xe65100);
    auto mix = [&](int a, int b) { return static_cast<int>(a + (b - a) * m_emphasis); };
    setPen(QPen(m_emphasis > 0 ? QColor(mix(quiet.red(), busy.red()), mix(quiet.green(), busy.green()),
                                        mix(quiet.blue(), busy.blue()))
                               : quiet,
                1.2 + 3.0 * m_emphasis));
    setToolTip(tooltip.isEmpty() ? m_label : tooltip);
    update();
}

QRectF CanvasEdge::labelRect() const
{
    if (m_label.isEmpty())
        return {};
    const QFontMetricsF fm(labelFont());
    const qreal w = std::max(fm.horizontalAdvance(m_label), fm.horizontalAdvance(m_note));
    // The layout reserved two lines centred on the label's position.
    return QRectF(m_labelPos.x() - w / 2, m_labelPos.y() - fm.height(), w, 2 * fm.height());
}

QRectF CanvasEdge::boundingRect() const
{
    QRectF r = QGraphicsPathItem::boundingRect().united(m_arrow.boundingRect());
    if (!m_label.isEmpty())
        r = r.united(labelRect().adjusted(-2, -1, 2, 1));
    return r;
}

void CanvasEdge::paint(QPainter *painter, const QStyleOptionGraphicsItem *option, QWidget *widget)
{
    painter->setRenderHint(QPainter::Antialiasing);
    QGraphicsPathItem::paint(painter, option, widget);
    painter->setBrush(pen().color());
    painter->setPen(Qt::NoPen);
    painter->drawPolygon(m_arrow);
    if (m_label.isEmpty())
        return;
    painter->setFont(labelFont());
    const QFontMetricsF fm(labelFont());
    const QRectF box = labelRect();
    painter->setPen(QColor(0x455a64));
    painter->drawText(QPointF(m_labelPos.x() - fm.horizontalAdvance(m_label) / 2, box.top() + fm.ascent()), m_label);
    if (!m_note.isEmpty()) {
        painter->setPen(QColor(0xbf360c));
        painter->drawText(QPointF(m_labelPos.x() - fm.horizontalAdvance(m_note) / 2,
                                  box.top() + fm.height() + fm.ascent()),
                          m_note);
    }
}

} // namespace tapestry::views
