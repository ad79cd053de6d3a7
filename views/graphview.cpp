#include "graphview.h"

#include <QMouseEvent>
#include <QScrollBar>
#include <QWheelEvent>

namespace tapestry::views {

GraphView::GraphView(QWidget *parent) : QGraphicsView(parent)
{
    setRenderHint(QPainter::Antialiasing);
    setDragMode(ScrollHandDrag);
    setTransformationAnchor(AnchorUnderMouse);
    setViewportUpdateMode(BoundingRectViewportUpdate);
    // Items are many and mostly still: cache by item, index by BSP tree.
    setOptimizationFlag(DontSavePainterState);
}

void GraphView::fitAll()
{
    if (!scene())
        return;
    fitInView(scene()->sceneRect(), Qt::KeepAspectRatio);
    // A tall graph (96 layers collapsed is still long) fitted whole is
    // unreadable; never zoom out below a readable scale, show the top instead.
    if (zoom() < 0.35) {
        resetTransform();
        scale(0.35, 0.35);
        centerOn(scene()->sceneRect().center().x(), scene()->sceneRect().top() + viewport()->height() / 0.7);
    } else if (zoom() > 1.5) {
        resetTransform();
        scale(1.5, 1.5);
    }
    emit viewportMoved();
}

void GraphView::zoomBy(qreal factor)
{
    const qreal next = std::clamp(zoom() * factor, 0.05, 4.0);
    scale(next / zoom(), next / zoom());
    emit viewportMoved();
}

void GraphView::centerOnItem(QGraphicsItem *item)
{
    if (item) {
        centerOn(item);
        emit viewportMoved();
    }
}

void GraphView::wheelEvent(QWheelEvent *event)
{
    zoomBy(std::pow(1.0015, event->angleDelta().y()));
    event->accept();
}

void GraphView::scrollContentsBy(int dx, int dy)
{
    QGraphicsView::scrollContentsBy(dx, dy);
    emit viewportMoved();
}

void GraphView::resizeEvent(QResizeEvent *event)
{
    QGraphicsView::resizeEvent(event);
    emit viewportMoved();
}

Minimap::Minimap(GraphView *main, QWidget *parent) : QGraphicsView(parent), m_main(main)
{
    setScene(main->scene());
    setInteractive(false);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setRenderHint(QPainter::Antialiasing);
    setFrameShape(QFrame::Box);
    connect(main, &GraphView::viewportMoved, viewport(), qOverload<>(&QWidget::update));
}

void Minimap::refit()
{
    if (scene() != m_main->scene())
        setScene(m_main->scene());
    if (scene())
        fitInView(scene()->sceneRect(), Qt::KeepAspectRatio);
    viewport()->update();
}

void Minimap::drawForeground(QPainter *painter, const QRectF &)
{
    const QRectF visible = m_main->mapToScene(m_main->viewport()->rect()).boundingRect();
    painter->setPen(QPen(QColor(0x1565c0), 2 / transform().m11()));
    painter->setBrush(QColor(21, 101, 192, 40));
    painter->drawRect(visible);
}

void Minimap::mousePressEvent(QMouseEvent *event)
{
    m_main->centerOn(mapToScene(event->position().toPoint()));
}

void Minimap::mouseMoveEvent(QMouseEvent *event)
{
    if (event->buttons() & Qt::LeftButton)
        m_main->centerOn(mapToScene(event->position().toPoint()));
}

void Minimap::resizeEvent(QResizeEvent *event)
{
    QGraphicsView::resizeEvent(event);
    refit();
}

} // namespace tapestry::views
