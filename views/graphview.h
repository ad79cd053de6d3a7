#pragma once

#include <QGraphicsView>

namespace tapestry::views {

// The main canvas: wheel zooms around the cursor, dragging the background
// pans, fitAll() shows the whole graph.
class GraphView : public QGraphicsView {
    Q_OBJECT
public:
    explicit GraphView(QWidget *parent = nullptr);

    // Fits the whole scene in the viewport (between 0.35 and 1.5 times its
    // size; a graph too tall for 0.35 shows its top), clear of the
    // reserved bottom-right corner (setReservedCorner): the content is
    // fitted beside the corner or above it, whichever draws it larger.
    void fitAll();
    // The viewport's bottom-right area a widget covers (the minimap);
    // empty: none.
    void setReservedCorner(QSize size) { m_reserved = size; }
    void zoomBy(qreal factor);
    qreal zoom() const { return transform().m11(); }
    void centerOnItem(QGraphicsItem *item);

signals:
    void viewportMoved();

protected:
    void wheelEvent(QWheelEvent *event) override;
    void scrollContentsBy(int dx, int dy) override;
    void resizeEvent(QResizeEvent *event) override;

private:
    QSize m_reserved;
};

// A bird's-eye view of the same scene with the main view's visible area
// outlined; clicking or dragging in it moves the main view.
class Minimap : public QGraphicsView {
    Q_OBJECT
public:
    explicit Minimap(GraphView *main, QWidget *parent = nullptr);
    void refit();

protected:
    void drawForeground(QPainter *painter, const QRectF &rect) override;
    void mousePressEvent(QMouseEvent *event) override;
    void mouseMoveEvent(QMouseEvent *event) override;
    void resizeEvent(QResizeEvent *event) override;

private:
    GraphView *m_main;
};

} // namespace tapestry::views
