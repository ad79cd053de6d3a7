#pragma once

#include <QColor>
#include <QGraphicsObject>
#include <QString>

namespace tapestry::views {

// What a drawn node shows. `key` is the caller's id for the node (a coarse
// node or a collapsed class block), handed back on selection.
struct NodeStyle {
    int key = -1;
    QString title;      // "attn/q_proj"
    QString subtitle;   // "Linear · 768×768"
    QColor fill;        // class colour, sharding colour or cost heat
    int repeat = 0;     // ×N badge when > 1 (a collapsed class)
    bool pinned = false;
    bool highlighted = false;  // member of the selected class
};

// A box of the graph view: title, subtitle, an optional ×N badge and pin.
class CanvasNode : public QGraphicsObject {
    Q_OBJECT
public:
    CanvasNode(NodeStyle style, QSizeF size, QGraphicsItem *parent = nullptr);

    const NodeStyle &style() const { return m_style; }
    void setStyle(NodeStyle style);
    QRectF boundingRect() const override;
    void paint(QPainter *painter, const QStyleOptionGraphicsItem *option, QWidget *widget) override;

    static QSizeF sizeFor(const NodeStyle &style);

private:
    NodeStyle m_style;
    QSizeF m_size;
};

} // namespace tapestry::views
