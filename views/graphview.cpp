#include "graphview.h"

#include <algorithm>

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
    const QRectF r = scene()->sceneRect();
    const qreal w = viewport()->width(), h = viewport()->height();
    if (r.width() <= 0 || r.height() <= 0 || w <= 0 || h <= 0) {
        fitInView(r, Qt::KeepAspectRatio);
        emit viewportMoved();
        return;
    }
    constexpr qreal kMargin = 0.98;  // as fitInView leaves a few pixels free
    auto fit = [&](qreal width, qreal height) {
        return width > 0 && height > 0 ? kMargin * std::min(width / r.width(), height / r.height()) : 0.0;
    };
    // The corner kept clear beside the content or below it, whichever
    // draws it larger: the view's scene rect takes that room too (the
    // scene's own is left as it is), so that the content sits clear of
    // the corner once fitted and scrolls clear of it when zoomed.
    qreal scale = fit(w, h);
    bool beside = false, below = false;
    if (!m_reserved.isEmpty()) {
        const qreal besideScale = fit(w - m_reserved.width(), h);
        const qreal aboveScale = fit(w, h - m_reserved.height());
        beside = besideScale >= aboveScale;
        below = !beside;
        scale = std::max(besideScale, aboveScale);
    }
    // A tall graph (96 layers collapsed is still long) fitted whole is
    // unreadable; never zoom out below a readable scale, show the top instead.
    const bool tall = scale < 0.35;
    scale = std::clamp(scale, 0.35, 1.5);
    QRectF room = r;
    if (beside)
        room.setRight(r.right() + m_reserved.width() / scale);
    if (below || tall)  // a tall graph's last nodes scroll up clear of the corner too
        room.setBottom(r.bottom() + m_reserved.height() / scale);
    setSceneRect(room);
    resetTransform();
    this->scale(scale, scale);
    QPointF centre = room.center();
    if (tall)
        centre.setY(r.top() + h / (2 * scale));
    centerOn(centre);
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
