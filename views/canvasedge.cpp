#include "canvasedge.h"

#include <QFontMetricsF>
#include <QPainter>
#include <QtMath>

namespace tapestry::views {

namespace {
QFont labelFont()
{
    QFont f;
    f.setPointSizeF(7.5);
    return f;
}
} // namespace

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

QRectF CanvasEdge::boundingRect() const
{
    QRectF r = QGraphicsPathItem::boundingRect().united(m_arrow.boundingRect());
    if (!m_label.isEmpty()) {
        const QFontMetricsF fm(labelFont());
        r = r.united(QRectF(m_labelPos.x() - fm.horizontalAdvance(m_label) / 2 - 2,
                            m_labelPos.y() - fm.height(), fm.horizontalAdvance(m_label) + 4,
                            fm.height() * 2));
    }
    return r;
}

void CanvasEdge::paint(QPainter *painter, const QStyleOptionGraphicsItem *option, QWidget *widget)
{
    painter->setRenderHint(QPainter::Antialiasing);
    QGraphicsPathItem::paint(painter, option, widget);
    painter->setBrush(pen().color());
    painter->setPen(Qt::NoPen);
    painter->drawPolygon(m_arrow);
    if (!m_label.isEmpty()) {
        painter->setFont(labelFont());
        painter->setPen(QColor(0x455a64));
        const QFontMetricsF fm(labelFont());
        painter->drawText(QPointF(m_labelPos.x() - fm.horizontalAdvance(m_label) / 2,
                                  m_labelPos.y() + fm.ascent() / 2),
                          m_label);
    }
}

} // namespace tapestry::views
