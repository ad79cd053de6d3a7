#include "graphscene.h"

#include "canvasedge.h"

#include <QFontMetricsF>
#include <QGraphicsRectItem>
#include <QGraphicsSceneMouseEvent>
#include <QGraphicsSimpleTextItem>
#include <QPen>

#include <algorithm>

namespace tapestry::views {

GraphScene::GraphScene(QObject *parent) : QGraphicsScene(parent)
{
    setBackgroundBrush(QColor(0xfafafa));
    connect(this, &QGraphicsScene::selectionChanged, this, [this] { emit nodeSelected(selectedKey()); });
}

layout::LayoutRequest GraphScene::layoutRequest(const QVector<NodeStyle> &nodes,
                                                const QVector<EdgeSpec> &edges)
{
    layout::LayoutRequest request;
    for (const auto &n : nodes) {
        const QSizeF s = CanvasNode::sizeFor(n);
        // Room for the ×N card stack drawn below and right of the box.
        request.nodes.push_back({s.width() + (n.repeat > 1 ? 8 : 0), s.height() + (n.repeat > 1 ? 8 : 0)});
    }
    // Two lines per label: the shape, and under it the plan's block of it
    // per device (CanvasEdge::setSharding), never wider than the shape.
    for (const auto &e : edges)
        request.edges.push_back({e.from, e.to, e.label.isEmpty() ? std::string() : QString(e.label + QStringLiteral("\n") + e.label).toStdString()});
    return request;
}

void GraphScene::setContent(const QVector<NodeStyle> &nodes, const QVector<EdgeSpec> &edges,
                            const layout::LayoutResult &layout)
{
    const QSignalBlocker blocker(this);
    clear();
    m_nodes.clear();
    m_edges.clear();
    m_byKey.clear();
    m_bands.clear();  // deleted with the rest
    m_labelRoom = false;
    for (int i = 0; i < nodes.size(); ++i) {
        auto *item = new CanvasNode(nodes[i], CanvasNode::sizeFor(nodes[i]));
        const auto c = layout.centers.at(static_cast<std::size_t>(i));
        item->setPos(c.x, c.y);
        addItem(item);
        m_nodes.push_back(item);
        m_byKey.insert(nodes[i].key, item);
    }
    for (int i = 0; i < edges.size(); ++i) {
        QVector<QPointF> points;
        for (const auto &p : layout.edgePaths.at(static_cast<std::size_t>(i)))
            points.push_back({p.x, p.y});
        const auto l = layout.edgeLabels.at(static_cast<std::size_t>(i));
        auto *edge = new CanvasEdge(points, edges[i].label, {l.x, l.y});
        addItem(edge);
        m_edges.push_back(edge);
    }
    setSceneRect(QRectF(-20, -20, layout.width + 40, layout.height + 40));
}

void GraphScene::selectKey(int key)
{
    CanvasNode *node = m_byKey.value(key);
    if (node && node->isSelected() && selectedItems().size() == 1)
        return;
    {
        const QSignalBlocker blocker(this);
        clearSelection();
        if (node)
            node->setSelected(true);
    }
    emit nodeSelected(selectedKey());
}

int GraphScene::selectedKey() const
{
    for (QGraphicsItem *item : selectedItems())
        if (auto *node = dynamic_cast<CanvasNode *>(item))
            return node->style().key;
    return -1;
}

void GraphScene::contextMenuEvent(QGraphicsSceneContextMenuEvent *event)
{
    for (QGraphicsItem *item : items(event->scenePos()))
        if (auto *node = dynamic_cast<CanvasNode *>(item)) {
            selectKey(node->style().key);
            emit nodeContextMenu(node->style().key, event->screenPos());
            event->accept();
            return;
        }
    QGraphicsScene::contextMenuEvent(event);
}

void GraphScene::mouseDoubleClickEvent(QGraphicsSceneMouseEvent *event)
{
    for (QGraphicsItem *item : items(event->scenePos()))
        if (auto *node = dynamic_cast<CanvasNode *>(item)) {
            emit nodeActivated(node->style().key);
            event->accept();
            return;
        }
    QGraphicsScene::mouseDoubleClickEvent(event);
}

void GraphScene::setBands(const QVector<Band> &bands)
{
    for (QGraphicsItem *item : std::as_const(m_bands)) {
        removeItem(item);
        delete item;
    }
    m_bands.clear();
    QFont font;
    font.setPointSizeF(font.pointSizeF() * 1.1);
    font.setBold(true);
    // Room at the left for the labels, beside the nodes rather than under them.
    const QFontMetricsF metrics(font);
    double labelWidth = 0;
    for (const Band &b : bands)
        labelWidth = std::max(labelWidth, metrics.horizontalAdvance(b.label) + 16);
    if (!bands.isEmpty() && !m_labelRoom) {
        setSceneRect(sceneRect().adjusted(-labelWidth, 0, 0, 0));
        m_labelRoom = true;
    }
    const QRectF area = sceneRect();
    for (int i = 0; i < bands.size(); ++i) {
        const Band &b = bands[i];
        auto *rect = new QGraphicsRectItem(area.left(), b.top, area.width(), b.bottom - b.top);
        rect->setBrush(i % 2 ? QColor(0xe3, 0xf2, 0xfd, 150) : QColor(0xff, 0xf3, 0xe0, 150));
        rect->setPen(QPen(QColor(0x90a4ae), 1, Qt::DashLine));
        rect->setZValue(-10);
        rect->setToolTip(b.tooltip);
        addItem(rect);
        m_bands.push_back(rect);
        auto *text = new QGraphicsSimpleTextItem(b.label);
        text->setFont(font);
        text->setBrush(QColor(0x455a64));
        text->setPos(area.left() + 6, b.top + 4);
        text->setZValue(-9);
        text->setToolTip(b.tooltip);
        addItem(text);
        m_bands.push_back(text);
    }
}

} // namespace tapestry::views
