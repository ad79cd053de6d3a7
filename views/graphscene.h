#pragma once

#include "canvasnode.h"
#include "layout/graphvizlayout.h"

#include <QGraphicsScene>
#include <QHash>
#include <QVector>

namespace tapestry::views {

class CanvasEdge;

struct EdgeSpec {
    int from = 0;  // index into the node list
    int to = 0;
    QString label; // tensor shape, "8×1024×768"
};

// The drawn graph: one CanvasNode per node, one CanvasEdge per edge, placed
// by a layout computed elsewhere (off the GUI thread).
class GraphScene : public QGraphicsScene {
    Q_OBJECT
public:
    explicit GraphScene(QObject *parent = nullptr);

    // Node sizes for the layout request, computed from the styles' text.
    static layout::LayoutRequest layoutRequest(const QVector<NodeStyle> &nodes,
                                               const QVector<EdgeSpec> &edges);
    void setContent(const QVector<NodeStyle> &nodes, const QVector<EdgeSpec> &edges,
                    const layout::LayoutResult &layout);

    CanvasNode *nodeForKey(int key) const { return m_byKey.value(key); }
    const QVector<CanvasNode *> &canvasNodes() const { return m_nodes; }
    const QVector<CanvasEdge *> &canvasEdges() const { return m_edges; }
    void selectKey(int key);
    int selectedKey() const;
    // Bands across the whole drawing behind the nodes, top to bottom (a
    // pipeline's stages), each with its label at the left; replaced by the
    // next call, gone with the next content.
    struct Band {
        double top = 0, bottom = 0;
        QString label, tooltip;
    };
    void setBands(const QVector<Band> &bands);
    int bandCount() const { return static_cast<int>(m_bands.size()); }

signals:
    void nodeSelected(int key);   // -1 when the selection is cleared
    void nodeActivated(int key);  // double-click
    void nodeContextMenu(int key, const QPoint &screenPos);  // right-click

protected:
    void mouseDoubleClickEvent(QGraphicsSceneMouseEvent *event) override;
    void contextMenuEvent(QGraphicsSceneContextMenuEvent *event) override;

private:
    QVector<CanvasNode *> m_nodes;
    QVector<CanvasEdge *> m_edges;
    QHash<int, CanvasNode *> m_byKey;
    QVector<QGraphicsItem *> m_bands;
    bool m_labelRoom = false;  // the scene widened at the left for the bands' labels
};

} // namespace tapestry::views
