#pragma once

#include "graphscene.h"
#include "graphview.h"
#include "layout/viewgraph.h"
#include "loadedmodel.h"
#include "plan/plan.h"

#include <QFutureWatcher>
#include <QWidget>

#include <functional>

class QLabel;

namespace tapestry::views {

// A layout or the one-line reason there is none; errors travel as values so
// that waiting on the future never rethrows.
struct LayoutOutcome {
    layout::LayoutResult result;
    QString error;
};

// The graph view with its minimap: folds the coarse graph into class blocks,
// lays it out with Graphviz on a worker thread, and keeps selection in terms
// of classes and coarse nodes.
class GraphPanel : public QWidget {
    Q_OBJECT
public:
    explicit GraphPanel(QWidget *parent = nullptr);
    ~GraphPanel() override;

    void setModel(const LoadedModel &model);
    const LoadedModel &model() const { return m_model; }
    const layout::ViewGraph &viewGraph() const { return m_view; }
    GraphScene *scene() const { return m_scene; }
    GraphView *view() const { return m_graphView; }
    bool isLayoutRunning() const { return m_watcher.isRunning(); }
    // The minimap in the view's corner, shown or folded away (View ›
    // Minimap), so that it never hides the graph a user is reading.
    void setMinimapVisible(bool visible);
    bool minimapVisible() const;
    QWidget *minimap() const;
    // The line under the graph that says what its colours and edge labels
    // mean (colouringLegend), so that they never cover the graph.
    void setLegend(const QString &richText);
    QLabel *legend() const { return m_legend; }

    // Colour per view node; an empty function colours by class.
    using Colouring = std::function<QColor(const layout::ViewNode &)>;
    void setColouring(Colouring colouring);
    void setPinnedNodes(const QSet<int> &viewNodes);
    // Badges the nodes that read a weight `plan` pins (a spec marked override).
    void showPins(const plan::Plan &plan);
    // Each edge's tensor as `plan` lays it out (`specs` by tensor id): the
    // block each device holds under the shape where it is split, and the
    // edge drawn by the time of the collectives that move it. Kept across
    // layouts (an expanded class).
    void showSharding(std::shared_ptr<const plan::Plan> plan, std::vector<sharding::ShardingSpec> specs);
    // A pipelined plan's stages as bands across the graph, one per chunk
    // of consecutive layers, the folded copies of a class split where a
    // stage ends; none for a plan of one stage (laid out again when the
    // cut moves).
    void showPipeline(const std::optional<plan::PlanPipeline> &pipeline);
    int stageBands() const { return m_scene->bandCount() / 2; }

    // Expanding a folded block lays out its first instance node by node.
    void toggleExpanded(int viewNode);
    bool isExpanded(int classId, std::size_t firstInstance) const;
    void highlightClass(int classId);  // -1: none
    void selectViewNode(int viewNode);
    // The view node showing a coarse node (folded into a block or not); -1 if none.
    int viewNodeOf(passes::NodeId node) const;
    // Where `node` lies in a folded run whose first instance holds it, opens
    // that instance and selects the node itself once laid out; false where
    // it is drawn already, or folded where no run can open onto it.
    bool revealNode(passes::NodeId node);
    int selectedViewNode() const;
    // Selects the first view node whose title, or coarse node's name,
    // contains `name`; false when none does.
    bool selectByName(const QString &name);
    // Expands the first block of class `classId`; false when there is none.
    bool expandClass(int classId);
    // The whole graph as an image, .png or .svg by suffix; `title` names
    // the drawing. Written to a temporary name and renamed.
    bool exportImage(const QString &path, const QString &title, QString *error = nullptr) const;

signals:
    void viewNodeSelected(int viewNode);  // -1: cleared
    void viewNodeContextMenu(int viewNode, const QPoint &screenPos);
    void layoutFinished();
    void layoutFailed(const QString &message);

private:
    void rebuild();
    QVector<NodeStyle> styles() const;

    LoadedModel m_model;
    layout::ViewGraph m_view;
    void applySharding();
    void applyBands();
    std::optional<plan::PlanPipeline> m_pipeline;
    std::vector<int> m_chunkOfOp;  // by op id, for buildViewGraph; empty without a pipeline
    int m_pipelineLayers = 0;      // the layers it cuts between
    std::shared_ptr<const plan::Plan> m_shardingPlan;
    std::vector<sharding::ShardingSpec> m_shardingSpecs;
    layout::ExpandedRuns m_expanded;
    Colouring m_colouring;
    QSet<int> m_pinned;
    int m_highlightClass = -1;
    int m_generation = 0;
    int m_pendingSelection = -1;
    GraphScene *m_scene;
    GraphView *m_graphView;
    Minimap *m_minimap;
    QLabel *m_legend;
    QFutureWatcher<LayoutOutcome> m_watcher;
    QVector<NodeStyle> m_pendingStyles;
    QVector<EdgeSpec> m_pendingEdges;
};

} // namespace tapestry::views
