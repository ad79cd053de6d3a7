#pragma once

#include <QGraphicsPathItem>
#include <QPointF>
#include <QVector>

namespace tapestry::views {

// A tensor flowing between two nodes: the spline Graphviz routed, an arrow
// head and the tensor's shape as label.
class CanvasEdge : public QGraphicsPathItem {
public:
    CanvasEdge(const QVector<QPointF> &splinePoints, const QString &label, QPointF labelPos,
               QGraphicsItem *parent = nullptr);

    QString label() const { return m_label; }
    QRectF boundingRect() const override;
    void paint(QPainter *painter, const QStyleOptionGraphicsItem *option, QWidget *widget) override;

private:
    QString m_label;
    QPointF m_labelPos;
    QPolygonF m_arrow;
};

} // namespace tapestry::views
