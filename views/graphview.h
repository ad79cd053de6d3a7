#pragma once

#include <QGraphicsView>

namespace tapestry::views {

// The main canvas: wheel zooms around the cursor, dragging the background
// pans, fitAll() shows the whole graph.
class GraphView : public QGraphicsView {
    Q_OBJECT
public:
    explicit GraphView(QWidget *parent = nullptr);

    void fitAll();
    void zoomBy(qreal factor);
    qreal zoom() const { return transform().m11(); }
    void centerOnItem(QGraphicsItem *item);

signals:
    void viewportMoved();

protected:
    void wheelEvent(QWheelEvent *event) override;
    void scrollContentsBy(int dx, int dy) override;
    void resizeEvent(QResizeEvent *event) override;
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
