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
    // The plan's layout of the edge's tensor, drawn as a second line under
    // the shape (each device's block, where the tensor is split) with its
    // long form as the tooltip; `emphasis` (0 to 1) thickens and colours
    // the edge by the collectives that move the tensor (its share of the
    // costliest edge's).
    void setSharding(const QString &note, const QString &tooltip, qreal emphasis);
    QString note() const { return m_note; }
    qreal emphasis() const { return m_emphasis; }
    // Where the label (both lines) is drawn.
    QRectF labelRect() const;
    // The font edge labels are drawn in, and sized in for the layout: fixed
    // width, so that Graphviz's estimate of a label's width (Courier) is
    // the width drawn.
    static QFont labelFont();
    QRectF boundingRect() const override;
    void paint(QPainter *painter, const QStyleOptionGraphicsItem *option, QWidget *widget) override;

private:
    QString m_label;
    QPointF m_labelPos;
    QString m_note;
    qreal m_emphasis = 0;
    QPolygonF m_arrow;
};

} // namespace tapestry::views
