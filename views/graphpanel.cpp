#include "graphpanel.h"

#include "canvasedge.h"

#include "cost/pipeline.h"

#include "ir/error.h"
#include "imagefile.h"
#include "palette.h"

#include <QBuffer>
#include <QGridLayout>
#include <QImage>
#include <QLabel>
#include <QPainter>
#include <QSvgGenerator>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <limits>

namespace tapestry::views {

GraphPanel::GraphPanel(QWidget *parent)
    : QWidget(parent), m_scene(new GraphScene(this)), m_graphView(new GraphView(this)),
      m_minimap(nullptr), m_legend(new QLabel(this))
{
    m_graphView->setScene(m_scene);
    m_minimap = new Minimap(m_graphView, this);
    m_minimap->setFixedSize(180, 220);
    m_graphView->setReservedCorner(m_minimap->size() + QSize(4, 4));
    auto *grid = new QGridLayout(this);
    grid->setContentsMargins(0, 0, 0, 0);
    grid->addWidget(m_graphView, 0, 0);
    grid->addWidget(m_minimap, 0, 0, Qt::AlignRight | Qt::AlignBottom);
    m_legend->setObjectName(QStringLiteral("graphLegend"));
    m_legend->setTextFormat(Qt::RichText);
    m_legend->setWordWrap(true);
    m_legend->setContentsMargins(6, 2, 6, 2);
    QFont small = m_legend->font();
    small.setPointSizeF(small.pointSizeF() * 0.9);
    m_legend->setFont(small);
    grid->addWidget(m_legend, 1, 0);

    m_minimap->setToolTip(tr("Click or drag to move the view; View › Minimap (Ctrl+M) hides it"));
    connect(m_scene, &GraphScene::nodeSelected, this, &GraphPanel::viewNodeSelected);
    connect(m_scene, &GraphScene::nodeActivated, this, &GraphPanel::toggleExpanded);
    connect(m_scene, &GraphScene::nodeContextMenu, this, &GraphPanel::viewNodeContextMenu);
    connect(&m_watcher, &QFutureWatcher<LayoutOutcome>::finished, this, [this] {
        if (m_watcher.property("generation").toInt() != m_generation)
            return;  // a newer layout was requested meanwhile
        const LayoutOutcome outcome = m_watcher.result();
        if (!outcome.error.isEmpty()) {
            emit layoutFailed(outcome.error);
            return;
        }
        {
            m_scene->setContent(m_pendingStyles, m_pendingEdges, outcome.result);
            applySharding();
            applyBands();
            m_minimap->refit();
            m_graphView->fitAll();
            if (m_pendingSelection >= 0) {
                m_scene->selectKey(m_pendingSelection);
                m_graphView->centerOnItem(m_scene->nodeForKey(m_pendingSelection));
            }
            emit layoutFinished();
        }
    });
}

GraphPanel::~GraphPanel()
{
    // Items emit selection changes while the scene tears them down; nobody
    // listening may be half destroyed by then.
    m_scene->blockSignals(true);
    disconnect(this, nullptr, nullptr, nullptr);
    m_watcher.waitForFinished();
}

void GraphPanel::setModel(const LoadedModel &model)
{
    m_model = model;
    m_expanded.clear();
    m_highlightClass = -1;
    m_pinned.clear();
    m_pendingSelection = -1;
    rebuild();
}

void GraphPanel::setColouring(Colouring colouring)
{
    m_colouring = std::move(colouring);
    const auto s = styles();
    for (auto *node : m_scene->canvasNodes())
        node->setStyle(s.value(node->style().key));
}

void GraphPanel::setPinnedNodes(const QSet<int> &viewNodes)
{
    m_pinned = viewNodes;
    setColouring(m_colouring);
}

void GraphPanel::showSharding(std::shared_ptr<const plan::Plan> plan, std::vector<sharding::ShardingSpec> specs)
{
    m_shardingPlan = std::move(plan);
    m_shardingSpecs = std::move(specs);
    applySharding();
}

void GraphPanel::applySharding()
{
    const auto &edges = m_scene->canvasEdges();
    if (!m_model.graph || edges.size() != static_cast<int>(m_view.edges.size()))
        return;
    const auto &graph = *m_model.graph;
    if (!m_shardingPlan || m_shardingSpecs.size() != graph.tensorCount()) {
        for (auto *e : edges)
            e->setSharding({}, {}, 0);
        return;
    }
    const auto &plan = *m_shardingPlan;
    // Seconds of collectives per tensor moved (or whose gradient is).
    std::map<std::string, double> moved;
    for (const auto &c : plan.cost.collectives)
        moved[c.tensor] += c.time;
    double busiest = 0;
    for (const auto &v : m_view.edges)
        if (v.tensor.valid())
            busiest = std::max(busiest, moved[graph.tensor(v.tensor).name]);
    for (int i = 0; i < edges.size(); ++i) {
        const auto &v = m_view.edges[static_cast<std::size_t>(i)];
        if (!v.tensor.valid()) {
            edges[i]->setSharding({}, {}, 0);
            continue;
        }
        const auto &t = graph.tensor(v.tensor);
        const auto &spec = m_shardingSpecs[v.tensor.index()];
        const bool split = std::any_of(spec.placements.begin(), spec.placements.end(),
                                       [](const auto &p) { return p.isShard(); });
        const QString local = QString::fromStdString(layout::shapeLabel(spec.localShape(t.shape, plan.mesh)));
        QString note;
        if (split)
            note = local;
        if (spec.hasPartial())
            note += (note.isEmpty() ? QString() : QStringLiteral(" ")) + QStringLiteral("Σ");
        const double seconds = moved[t.name];
        QString tip = tr("%1 %2: %3, each device holds %4")
                          .arg(QString::fromStdString(t.name),
                               QString::fromStdString(layout::shapeLabel(t.shape)),
                               QString::fromStdString(spec.toPlacements()), local);
        if (v.tensors > 1)
            tip += tr(" (and %1 more tensors)").arg(v.tensors - 1);
        if (seconds > 0)
            tip += tr("\ncollectives moving it: %1 ms a step").arg(seconds * 1e3, 0, 'f', 3);
        edges[i]->setSharding(note, tip, busiest > 0 ? seconds / busiest : 0);
    }
}

void GraphPanel::showPipeline(const std::optional<plan::PlanPipeline> &pipeline)
{
    std::vector<int> chunkOfOp;
    if (pipeline && m_model.graph && m_model.classes) {
        const auto layers = cost::modelLayers(*m_model.graph, *m_model.classes);
        const auto &cuts = pipeline->cuts;
        if (layers.count > 0 && static_cast<int>(cuts.size()) == pipeline->stages * pipeline->virtualStages - 1) {
            m_pipelineLayers = layers.count;
            chunkOfOp = cost::chunkOfOps(layers, cuts);
        }
    }
    m_pipeline = chunkOfOp.empty() ? std::nullopt : pipeline;
    if (chunkOfOp == m_chunkOfOp) {
        applyBands();
        return;
    }
    m_chunkOfOp = std::move(chunkOfOp);
    m_expanded.clear();  // the runs it named are cut otherwise now
    rebuild();
}

void GraphPanel::applyBands()
{
    QVector<GraphScene::Band> bands;
    const auto &nodes = m_scene->canvasNodes();
    if (!m_pipeline || m_chunkOfOp.empty() || nodes.size() != static_cast<int>(m_view.nodes.size())) {
        m_scene->setBands(bands);
        return;
    }
    const auto &p = *m_pipeline;
    const int chunks = p.stages * p.virtualStages;
    std::vector<double> top(static_cast<std::size_t>(chunks), std::numeric_limits<double>::max()),
        bottom(static_cast<std::size_t>(chunks), std::numeric_limits<double>::lowest());
    for (int i = 0; i < nodes.size(); ++i) {
        const int c = m_view.nodes[static_cast<std::size_t>(i)].chunk;
        if (c < 0 || c >= chunks)
            continue;
        const QRectF r = nodes[i]->sceneBoundingRect();
        top[static_cast<std::size_t>(c)] = std::min(top[static_cast<std::size_t>(c)], r.top());
        bottom[static_cast<std::size_t>(c)] = std::max(bottom[static_cast<std::size_t>(c)], r.bottom());
    }
    const QRectF area = m_scene->sceneRect();
    double start = area.top();
    for (int c = 0; c < chunks; ++c) {
        const auto k = static_cast<std::size_t>(c);
        if (top[k] > bottom[k])
            continue;  // a chunk with no node drawn on its own
        double end = area.bottom();
        for (int d = c + 1; d < chunks; ++d)
            if (top[static_cast<std::size_t>(d)] <= bottom[static_cast<std::size_t>(d)]) {
                end = (bottom[k] + top[static_cast<std::size_t>(d)]) / 2;
                break;
            }
        const int first = c == 0 ? 0 : p.cuts[k - 1];
        const int last = (c + 1 < chunks ? p.cuts[k] : m_pipelineLayers) - 1;
        const int stage = c % p.stages;
        GraphScene::Band band;
        band.top = start;
        band.bottom = end;
        band.label = p.virtualStages > 1 ? tr("stage %1 · chunk %2").arg(stage).arg(c / p.stages)
                                         : tr("stage %1").arg(stage);
        band.tooltip = tr("Pipeline stage %1 of %2: layers %3–%4%5 (View › Pipeline schedule moves the cut)")
                           .arg(stage)
                           .arg(p.stages)
                           .arg(first)
                           .arg(last)
                           .arg(p.virtualStages > 1 ? tr(", its chunk %1 of %2").arg(c / p.stages + 1).arg(p.virtualStages)
                                                    : QString());
        bands.push_back(band);
        start = end;
    }
    m_scene->setBands(bands);
}

void GraphPanel::showPins(const plan::Plan &plan)
{
    QSet<int> pinned;
    const auto &graph = *m_model.graph;
    for (const auto &[name, tp] : plan.specs) {
        if (tp.source != plan::SpecSource::Override)
            continue;
        const auto t = graph.findTensor(name);
        if (!t || graph.tensor(*t).role != ir::Role::Parameter)
            continue;
        for (auto consumer : graph.tensor(*t).consumers) {
            const int v = viewNodeOf(m_model.coarse->nodeOf(consumer));
            if (v >= 0)
                pinned.insert(v);
        }
    }
    setPinnedNodes(pinned);
}

bool GraphPanel::selectByName(const QString &name)
{
    for (std::size_t i = 0; i < m_view.nodes.size(); ++i) {
        const auto &v = m_view.nodes[i];
        const bool hit = QString::fromStdString(v.title).contains(name) ||
                         (v.kind == layout::ViewNode::Kind::Coarse &&
                          QString::fromStdString(std::string(m_model.coarse->node(v.node).name)).contains(name));
        if (hit) {
            selectViewNode(static_cast<int>(i));
            return true;
        }
    }
    return false;
}

bool GraphPanel::expandClass(int classId)
{
    for (std::size_t i = 0; i < m_view.nodes.size(); ++i)
        if (m_view.nodes[i].kind == layout::ViewNode::Kind::Block && m_view.nodes[i].cls.value == classId) {
            toggleExpanded(static_cast<int>(i));
            return true;
        }
    return false;
}

bool GraphPanel::isExpanded(int classId, std::size_t firstInstance) const
{
    return m_expanded.count({classId, firstInstance}) > 0;
}

void GraphPanel::toggleExpanded(int viewNode)
{
    if (viewNode < 0 || viewNode >= static_cast<int>(m_view.nodes.size()))
        return;
    const auto &v = m_view.nodes[static_cast<std::size_t>(viewNode)];
    if (!v.cls.valid())
        return;
    const std::size_t first = v.instances.front();
    // A block folds instances [first+1..] when the run's first one is open.
    std::pair<int, std::size_t> key{v.cls.value, first};
    if (v.kind == layout::ViewNode::Kind::Block) {
        // Opening a block opens its first instance.
        m_expanded.insert(key);
    } else {
        // Double-clicking a node of an open instance folds the run again.
        m_expanded.erase(key);
    }
    m_pendingSelection = -1;
    rebuild();
}

void GraphPanel::highlightClass(int classId)
{
    m_highlightClass = classId;
    setColouring(m_colouring);
}

void GraphPanel::selectViewNode(int viewNode)
{
    m_scene->selectKey(viewNode);
    m_graphView->centerOnItem(m_scene->nodeForKey(viewNode));
}

bool GraphPanel::revealNode(passes::NodeId node)
{
    const int at = viewNodeOf(node);
    if (at < 0 || !m_model.classes)
        return false;
    const auto &v = m_view.nodes[static_cast<std::size_t>(at)];
    if (v.kind != layout::ViewNode::Kind::Block)
        return false;
    // Only a run's first instance opens (layout::buildViewGraph): the view
    // with this block's first instance open, built without laying it out,
    // says whether the node is then drawn.
    auto expanded = m_expanded;
    expanded.insert({v.cls.value, v.instances.front()});
    const auto opened = layout::buildViewGraph(*m_model.graph, *m_model.coarse, *m_model.classes, expanded);
    for (std::size_t i = 0; i < opened.nodes.size(); ++i)
        if (opened.nodes[i].kind == layout::ViewNode::Kind::Coarse && opened.nodes[i].node == node) {
            m_expanded = std::move(expanded);
            rebuild();
            m_pendingSelection = static_cast<int>(i);
            return true;
        }
    return false;
}

int GraphPanel::selectedViewNode() const
{
    return m_scene->selectedKey();
}

int GraphPanel::viewNodeOf(passes::NodeId node) const
{
    for (std::size_t i = 0; i < m_view.nodes.size(); ++i) {
        const auto &v = m_view.nodes[i];
        if (v.kind == layout::ViewNode::Kind::Coarse && v.node == node)
            return static_cast<int>(i);
    }
    if (!m_model.classes)
        return -1;
    for (std::size_t i = 0; i < m_view.nodes.size(); ++i) {
        const auto &v = m_view.nodes[i];
        if (v.kind != layout::ViewNode::Kind::Block)
            continue;
        const auto &cls = m_model.classes->classes[v.cls.index()];
        for (auto inst : v.instances)
            for (auto n : cls.instances[inst].nodes)
                if (n == node)
                    return static_cast<int>(i);
    }
    return -1;
}

QVector<NodeStyle> GraphPanel::styles() const
{
    QVector<NodeStyle> out;
    out.reserve(static_cast<qsizetype>(m_view.nodes.size()));
    for (std::size_t i = 0; i < m_view.nodes.size(); ++i) {
        const auto &v = m_view.nodes[i];
        NodeStyle s;
        s.key = static_cast<int>(i);
        s.title = QString::fromStdString(v.title);
        s.subtitle = QString::fromStdString(v.subtitle);
        s.repeat = v.kind == layout::ViewNode::Kind::Block ? v.repeat : 0;
        if (v.kind == layout::ViewNode::Kind::Block && v.repeat == 1)
            s.repeat = 1;
        s.fill = m_colouring ? m_colouring(v) : (v.cls.valid() ? classColor(v.cls.value) : neutralColor());
        s.highlighted = m_highlightClass >= 0 && v.cls.value == m_highlightClass;
        s.pinned = m_pinned.contains(s.key);
        out.push_back(s);
    }
    return out;
}

void GraphPanel::rebuild()
{
    ++m_generation;
    if (!m_model.graph) {
        m_view = {};
        m_scene->setContent({}, {}, {});
        return;
    }
    m_view = layout::buildViewGraph(*m_model.graph, *m_model.coarse, *m_model.classes, m_expanded, m_chunkOfOp);
    m_pendingStyles = styles();
    m_pendingEdges.clear();
    for (const auto &e : m_view.edges)
        m_pendingEdges.push_back({e.from, e.to, QString::fromStdString(e.label)});
    auto request = GraphScene::layoutRequest(m_pendingStyles, m_pendingEdges);
    m_watcher.setProperty("generation", m_generation);
    m_watcher.setFuture(QtConcurrent::run([request] {
        LayoutOutcome outcome;
        try {
            outcome.result = layout::layoutWithDot(request);
        } catch (const std::exception &e) {
            outcome.error = QString::fromUtf8(e.what());
        }
        return outcome;
    }));
}

bool GraphPanel::exportImage(const QString &path, const QString &title, QString *error) const
{
    // Drawn into memory first: the file is written whole or not at all, and
    // an image already at `path` stays until the new one replaces it.
    const QRectF source = m_scene->sceneRect();
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    if (path.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
        QSvgGenerator svg;
        svg.setOutputDevice(&buffer);
        svg.setSize(source.size().toSize());
        svg.setViewBox(QRectF(QPointF(0, 0), source.size()));
        svg.setTitle(title);
        QPainter painter;
        if (!painter.begin(&svg))
            return false;
        m_scene->render(&painter, QRectF(QPointF(0, 0), source.size()), source);
        painter.end();
    } else {
        // Large graphs are scaled down so the image stays a sensible size.
        const qreal scale = std::min(2.0, 8000.0 / std::max(source.width(), source.height()));
        QImage image((source.size() * scale).toSize(), QImage::Format_ARGB32);
        image.fill(Qt::white);
        QPainter painter(&image);
        painter.setRenderHint(QPainter::Antialiasing);
        m_scene->render(&painter, QRectF(QPointF(0, 0), source.size() * scale), source);
        painter.end();
        if (!image.save(&buffer, "PNG"))
            return false;
    }
    return writeImageFile(path, bytes, error);
}

void GraphPanel::setMinimapVisible(bool visible)
{
    m_minimap->setVisible(visible);
    m_graphView->setReservedCorner(visible ? m_minimap->size() + QSize(4, 4) : QSize());
}

void GraphPanel::setLegend(const QString &richText)
{
    m_legend->setText(richText);
}

QWidget *GraphPanel::minimap() const
{
    return m_minimap;
}

bool GraphPanel::minimapVisible() const
{
    return !m_minimap->isHidden();
}

} // namespace tapestry::views
