#include "studiowindow.h"

#include "candidatesdock.h"
#include "candidatesview.h"
#include "classesdock.h"
#include "classlistmodel.h"
#include "compareview.h"
#include "costchartsview.h"
#include "costsummarybar.h"
#include "executorpanel.h"
#include "findbar.h"
#include "graphpanel.h"
#include "inspectordock.h"
#include "inspectorview.h"
#include "finder.h"
#include "lessondock.h"
#include "meshdock.h"
#include "pipelinedock.h"
#include "meshview.h"
#include "pinmenu.h"
#include "plancolouring.h"
#include "studioactions.h"

#include "analysis/pinpropagation.h"

#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMimeData>
#include <QDockWidget>
#include <QLabel>
#include <QMessageBox>
#include <QFileDialog>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QTableView>
#include <QTimer>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>
#include <iostream>
#include <utility>

namespace tapestry::views {

StudioWindow::StudioWindow(QWidget *parent)
    : QMainWindow(parent), m_doc(new PlanDocument(this)), m_graph(new GraphPanel(this)),
      m_compare(new CompareView(this)), m_charts(new CostChartsView(this)), m_costBar(new CostSummaryBar(this)),
      m_find(new FindBar(m_graph, this)), m_status(new QLabel(this)), m_loadNote(new QLabel(this)),
      m_progress(new QProgressBar(this)),
      m_cancel(new QPushButton(tr("Cancel"), this))
{
    setWindowTitle(tr("Tapestry[*]"));

    auto *central = new QWidget(this);
    auto *layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    layout->addWidget(m_find);
    layout->addWidget(m_graph, 1);
    layout->addWidget(m_costBar);
    setCentralWidget(central);
    connect(m_find, &FindBar::message, statusBar(), &QStatusBar::showMessage);

    createDocks();

    statusBar()->addWidget(m_status, 1);
    m_loadNote->setStyleSheet(QStringLiteral("color: #a05a00;"));
    m_loadNote->setVisible(false);
    statusBar()->addPermanentWidget(m_loadNote);
    m_progress->setMaximumWidth(180);
    m_progress->setRange(0, 0);
    m_progress->hide();
    m_cancel->hide();
    statusBar()->addPermanentWidget(m_progress);
    statusBar()->addPermanentWidget(m_cancel);
    connect(m_cancel, &QPushButton::clicked, m_doc, &PlanDocument::cancel);

    connect(m_graph, &GraphPanel::viewNodeSelected, this, &StudioWindow::onViewNodeSelected);
    connect(m_graph, &GraphPanel::viewNodeContextMenu, this, &StudioWindow::showNodeMenu);
    connect(m_graph, &GraphPanel::layoutFinished, this, [this] {
        m_progress->hide();
        focusLesson();
        emit layoutReady();
    });
    connect(m_graph, &GraphPanel::layoutFailed, this, [this](const QString &message) {
        m_progress->hide();
        showError(message);
    });
    connectDocument();

    m_actions = new StudioActions(this, m_doc, m_find);
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    if (!settings.contains(QStringLiteral("window/geometry")))
        resize(1400, 900);
    m_status->setText(tr("Open a model: File › Open, or File › Model zoo, or drop a model or plan file here"));
    setAcceptDrops(true);
}

bool StudioWindow::isDroppable(const QString &path)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    return (suffix == QStringLiteral("onnx") || suffix == QStringLiteral("json")) && QFileInfo(path).isFile();
}

namespace {

// The one local file a drag carries, or nothing.
QString droppedFile(const QMimeData *data)
{
    if (!data || !data->hasUrls() || data->urls().size() != 1 || !data->urls().front().isLocalFile())
        return {};
    const QString path = data->urls().front().toLocalFile();
    return StudioWindow::isDroppable(path) ? path : QString();
}

} // namespace

void StudioWindow::dragEnterEvent(QDragEnterEvent *event)
{
    if (!droppedFile(event->mimeData()).isEmpty())
        event->acceptProposedAction();
}

void StudioWindow::dropEvent(QDropEvent *event)
{
    const QString path = droppedFile(event->mimeData());
    if (path.isEmpty())
        return;
    event->acceptProposedAction();
    openDroppedFile(path);
}

bool StudioWindow::openDroppedFile(const QString &path)
{
    if (!isDroppable(path))
        return false;
    // A plan says so in its format field; its model is named by source, a
    // relative path read from the plan's folder when not from here.
    QString planModel;
    if (QFileInfo(path).suffix().toLower() == QStringLiteral("json")) {
        QFile f(path);
        if (f.open(QIODevice::ReadOnly) && f.size() < (64 << 20)) {
            const QJsonObject doc = QJsonDocument::fromJson(f.readAll()).object();
            if (doc.value(QStringLiteral("format")).toString() == QStringLiteral("tapestry.plan"))
                planModel = doc.value(QStringLiteral("model")).toObject().value(QStringLiteral("source")).toString();
        }
    }
    if (planModel.isEmpty()) {
        openModel(path);
        return true;
    }
    if (document().graph && document().source == planModel)
        return openPlanFile(path);
    if (!planModel.startsWith(QStringLiteral("zoo:")) && QFileInfo(planModel).isRelative() &&
        !QFileInfo::exists(planModel))
        planModel = QFileInfo(path).dir().filePath(planModel);
    m_pendingPlanFile = path;
    openModel(planModel);
    return true;
}

StudioWindow::~StudioWindow()
{
    // The document outlives the window's own members (it is a child): it
    // tells nothing to a window half gone.
    m_doc->disconnect(this);
    m_doc->undoStack()->disconnect(this);  // its destructor clears it
    m_graph->disconnect(this);
}

// The docks, in the order the View menu lists them.
void StudioWindow::createDocks()
{
    auto addDock = [this](QDockWidget *dock, Qt::DockWidgetArea area, bool hidden) {
        addDockWidget(area, dock);
        if (hidden)
            dock->hide();  // View › its name
    };
    auto wrap = [this](const QString &title, const QString &name, QWidget *widget) {
        auto *dock = new QDockWidget(title, this);
        dock->setObjectName(name);
        dock->setWidget(widget);
        return dock;
    };
    m_classes = new ClassesDock(this);
    addDock(m_classes, Qt::LeftDockWidgetArea, false);
    connect(m_classes, &ClassesDock::classActivated, this, &StudioWindow::onClassActivated);
    m_inspector = new InspectorDock(m_doc, this);
    addDock(m_inspector, Qt::RightDockWidgetArea, false);
    // The class list as wide as a class name of two scopes beside its four numbers.
    resizeDocks({m_classes, m_inspector}, {320, 380}, Qt::Horizontal);
    addDock(wrap(tr("Compare plans"), QStringLiteral("compare"), m_compare), Qt::LeftDockWidgetArea, false);
    addDock(wrap(tr("Cost breakdown"), QStringLiteral("charts"), m_charts), Qt::BottomDockWidgetArea, true);
    m_candidates = new CandidatesDock(m_doc, m_classes, this);
    addDock(m_candidates, Qt::BottomDockWidgetArea, true);  // or a class' context menu
    connect(m_candidates, &CandidatesDock::ready, this, &StudioWindow::candidatesReady);
    m_mesh = new MeshDock(m_doc, this);
    addDock(m_mesh, Qt::RightDockWidgetArea, false);
    connect(m_mesh, &MeshDock::failed, this, &StudioWindow::showError);
    connect(m_inspector, &InspectorDock::failed, this, &StudioWindow::showError);
    connect(m_inspector, &InspectorDock::tensorChosen, m_mesh, &MeshDock::showTensor);
    m_pipeline = new PipelineDock(m_doc, this);
    addDock(m_pipeline, Qt::BottomDockWidgetArea, true);  // View › Pipeline schedule
    m_lesson = new LessonDock(this);
    addDock(m_lesson, Qt::RightDockWidgetArea, true);  // Lessons › any
    tabifyDockWidget(m_inspector, m_lesson);
    m_inspector->raise();
    connect(m_lesson, &LessonDock::stepShown, this, &StudioWindow::showLessonStep);

    auto *executor = new ExecutorPanel(this);
    addDock(wrap(tr("Executor"), QStringLiteral("executor"), executor), Qt::BottomDockWidgetArea, true);
    connect(this, &StudioWindow::planReady, executor, [this, executor] { executor->setPlan(document(), planned()); });
    connect(executor, &ExecutorPanel::runFinished, this, [this](const ExecutorRun &run) {
        if (run.state == ExecutorRun::State::Finished)
            m_costBar->setMeasured(tr("measured %1 ms on %2 ranks (%3 predicts %4 ms)")
                                       .arg(run.meanStepTime() * 1e3, 0, 'f', 1)
                                       .arg(run.ranks)
                                       .arg(run.predicted.profile)
                                       .arg(run.predicted.stepTime * 1e3, 0, 'f', 1));
        if (run.state == ExecutorRun::State::Finished && run.summary && run.summary->pipeline)
            m_pipeline->showMeasured(*run.summary->pipeline, run.predicted.stepTime);
    });
    connect(executor, &ExecutorPanel::profileCalibrated, this, [this](const QString &name) {
        m_actions->selectProfile(name);  // plan again with what this machine measured
        derivePlan();
    });
}

void StudioWindow::connectDocument()
{
    connect(m_doc, &PlanDocument::failed, this, &StudioWindow::showError);
    connect(m_doc, &PlanDocument::modelLoaded, this, &StudioWindow::onModelLoaded);
    connect(m_doc, &PlanDocument::loadFailed, this, [this](const QString &message, bool cancelled) {
        m_progress->hide();
        m_cancel->hide();
        m_pendingPlanFile.clear();  // it was for the model that did not load
        if (cancelled) {
            m_status->setText(tr("Loading %1 cancelled").arg(m_loadingSource));
            return;
        }
        showError(message);
        emit loadFailed(m_lastError);
    });
    connect(m_doc, &PlanDocument::planStarted, this, [this] {
        m_progress->setRange(0, 0);  // busy until the search reports
        m_progress->show();
        m_cancel->show();
    });
    connect(m_doc, &PlanDocument::planProgress, this, [this](int permille) {
        m_progress->setRange(0, 1000);
        m_progress->setValue(permille);
    });
    connect(m_doc, &PlanDocument::planFinished, this, [this] {
        m_progress->hide();
        m_progress->setRange(0, 0);  // busy again for loads and layouts
        m_cancel->hide();
    });
    connect(m_doc, &PlanDocument::costChanged, this, [this](const cost::PlanCost &cost) {
        const auto &p = *planned().plan;
        m_costBar->setCost(cost,
                           QStringLiteral("%1 on %2").arg(QString::fromStdString(p.method),
                                                            QString::fromStdString(p.mesh.toString())),
                           p.costOptions.techniques, p.pipeline ? &*p.pipeline : nullptr);
    });
    connect(m_doc, &PlanDocument::planChanged, this, &StudioWindow::onPlanChanged);
    connect(m_doc, &PlanDocument::planFailed, this, &StudioWindow::onPlanFailed);
    connect(m_doc, &PlanDocument::autosaveFailed, this,
            [this](const QString &error) { m_status->setText(tr("Autosave failed: %1").arg(error)); });
    connect(m_doc->undoStack(), &QUndoStack::cleanChanged, this, [this](bool clean) { setWindowModified(!clean); });
}

InspectorView *StudioWindow::inspector() const { return m_inspector->view(); }
QTableView *StudioWindow::classTable() const { return m_classes->table(); }
ClassListModel *StudioWindow::classModel() const { return m_classes->model(); }
QSortFilterProxyModel *StudioWindow::classProxy() const { return m_classes->proxy(); }
MeshView *StudioWindow::meshView() const { return m_mesh->view(); }
CandidatesView *StudioWindow::candidatesView() const { return m_candidates->view(); }
QStringList StudioWindow::recentFiles() const { return m_actions->recentFiles(); }
PlanRequest StudioWindow::planRequest() const { return m_actions->request(); }

bool StudioWindow::isBusy() const
{
    return m_doc->isLoading() || m_graph->isLayoutRunning() || m_doc->isPlanning();
}

void StudioWindow::openModel(const QString &source)
{
    if (!confirmDiscardEdits())
        return;
    m_loadingSource = source;
    m_status->setText(tr("Loading %1…").arg(source));
    m_progress->show();
    m_cancel->show();
    m_doc->openModel(source);
}

void StudioWindow::onModelLoaded()
{
    m_progress->hide();
    m_cancel->hide();
    const LoadedModel &model = document();
    m_classes->setModel(model);
    inspector()->setModel(model);
    m_progress->show();  // layout follows on a worker
    m_graph->setModel(model);
    setWindowTitle(tr("Tapestry — %1[*]").arg(model.source));
    std::size_t repeated = 0;
    for (const auto &c : model.classes->classes)
        if (static_cast<int>(c.instances.size()) >= model.classes->minDuplicate)
            ++repeated;
    m_status->setText(tr("%1: %2 ops, %3 parameters, %4 unique subgraphs covering %5 % of ops "
                         "(loaded in %6 ms, pruned in %7 ms)")
                          .arg(model.source)
                          .arg(model.graph->opCount())
                          .arg(QLocale().toString(static_cast<qlonglong>(model.graph->parameterCount())))
                          .arg(repeated)
                          .arg(model.classes->coverage * 100, 0, 'f', 1)
                          .arg(model.loadSeconds * 1000, 0, 'f', 0)
                          .arg(model.pruneSeconds * 1000, 0, 'f', 0));
    const QString note = model.notes.join(QStringLiteral(" · "));
    m_loadNote->setText(m_loadNote->fontMetrics().elidedText(note, Qt::ElideRight, 480));
    m_loadNote->setToolTip(model.notes.join(QLatin1Char('\n')));
    m_loadNote->setVisible(!note.isEmpty());
    m_actions->addRecent(model.source);
    m_find->reset();
    m_costBar->clearCost();
    emit loaded();
    // A lesson brings its own plan; everything else gets one derived.
    if (m_pendingPlanFile.isEmpty())
        derivePlan();
    else
        openPlanFile(std::exchange(m_pendingPlanFile, QString()));
}

void StudioWindow::derivePlan()
{
    if (!document().graph || !confirmDiscardEdits())
        return;
    const PlanRequest request = m_actions->request();
    m_status->setText(tr("Deriving a %1 plan on mesh %2…").arg(request.method, request.meshShape));
    m_doc->setPlanRequest(request);
    m_doc->derivePlan();
}

void StudioWindow::rederiveAroundPins()
{
    if (m_doc->rederiveAroundPins())
        m_status->setText(tr("Re-deriving the plan around %n pin(s)…", nullptr,
                             static_cast<int>(analysis::pinsOf(*planned().plan).size())));
}

void StudioWindow::setMeshShape(const QString &shape)
{
    PlanRequest request = m_actions->request();
    request.meshShape = shape;
    m_doc->setPlanRequest(request);
    derivePlan();
}

bool StudioWindow::openPlanFile(const QString &path)
{
    if (!document().graph)
        return false;
    if (m_doc->openPlanFile(path))
        return true;
    emit planFailed(m_lastError);
    return false;
}

void StudioWindow::onPlanChanged(PlanDocument::PlanChange change)
{
    const PlannedModel &current = planned();
    const plan::Plan &p = *current.plan;
    m_graph->showPins(p);
    m_graph->showSharding(current.plan, current.specs);
    m_graph->showPipeline(p.pipeline);
    m_classes->showCosts(document(), current);
    m_charts->setPlanned(current, m_classes->classNames());
    m_status->setText(tr("%1 plan on %2 in %3 ms: step %4 ms%5")
                          .arg(QString::fromStdString(p.method), QString::fromStdString(p.mesh.toString()))
                          .arg(current.searchSeconds * 1e3, 0, 'f', 1)
                          .arg(p.cost.stepTime * 1e3, 0, 'f', 2)
                          .arg(p.cost.fitsMemory ? QString() : tr(" — does not fit in device memory")));
    if (m_doc->pinnedPlanKept())
        m_status->setText(m_status->text() +
                          tr(" — nothing found around the pins beats the pinned plan; it is kept as it is"));
    setColouring(m_colouring);
    onViewNodeSelected(m_graph->selectedViewNode());
    m_candidates->refresh();
    focusLesson();
    emit planReady();
    if (change != PlanDocument::PlanChange::Derived)
        return;
    // A plan autosaved by a session that ended without saving its edits.
    if (!std::exchange(m_autosaveOffered, true) && !m_quietErrors && autosavedPins() > 0 &&
        QMessageBox::question(this, tr("Restore edits"),
                              tr("%1 pins of an unsaved plan for this model were kept from the last session. "
                                 "Restore them?").arg(autosavedPins())) == QMessageBox::Yes)
        restoreAutosave();
}

void StudioWindow::onPlanFailed(const QString &message, bool cancelled)
{
    if (cancelled)
        m_status->setText(tr("Plan search cancelled"));
    else
        showError(message);
    if (const auto &kept = planned().plan)
        m_status->setText((cancelled ? tr("Plan search cancelled; kept the %1 plan on %2")
                                     : tr("Kept the %1 plan on %2 after an error"))
                              .arg(QString::fromStdString(kept->method), QString::fromStdString(kept->mesh.toString())));
    else
        m_costBar->clearCost();
    emit planFailed(message);
}

void StudioWindow::focusLesson()
{
    // Once both the lesson's plan and its layout are in: its first node
    // selected, so the mesh view shows how that node's weight lies. Until
    // the scene holds the node (a finished layout is drawn a moment after
    // it is known), the next plan or layout tries again.
    if (m_lessonFocus.isEmpty() || !planned().plan || m_graph->isLayoutRunning())
        return;
    if (selectByName(m_lessonFocus) && m_graph->selectedViewNode() >= 0) {
        m_lessonFocus.clear();
        if (m_pendingLesson > 0)
            showLesson(std::exchange(m_pendingLesson, 0));
    }
}

namespace {

// The coarse node named `name`, else the first whose ops or tensors match it.
passes::NodeId nodeNamed(const LoadedModel &model, const QString &name)
{
    const auto found = findNodes(model, name);
    for (auto id : found)
        if (QString::fromStdString(std::string(model.coarse->node(id).name)) == name)
            return id;
    return found.empty() ? passes::NodeId() : found.front();
}

} // namespace

void StudioWindow::showLesson(int lesson)
{
    if (!planned().plan)
        return;
    LessonSource source;
    source.graph = document().graph.get();
    source.mesh = planned().plan->mesh;
    source.specOf = [this](const std::string &name) {
        const auto t = document().graph->findTensor(name);
        return t && t->index() < planned().specs.size()
                   ? planned().specs[t->index()]
                   : sharding::ShardingSpec::replicated(planned().plan->mesh.rank());
    };
    source.stepsOf = [this](const QString &node) { return m_mesh->collectiveSteps(nodeNamed(document(), node)); };
    Lesson script;
    if (lesson == 1) {
        script = columnThenRowLesson(source);
    } else if (lesson == 2) {
        script = twoDimensionalLesson(source);
    } else {
        // The selected node, or the one whose collectives take longest.
        const auto &model = document();
        passes::NodeId node = m_doc->selectedNode();
        if (!node.valid()) {
            double longest = -1;
            for (std::size_t i = 0; i < model.coarse->nodes().size(); ++i) {
                const passes::NodeId id(static_cast<std::int32_t>(i));
                double seconds = 0;
                for (const auto &c : m_mesh->collectiveSteps(id))
                    seconds += c.seconds;
                if (seconds > longest) {
                    longest = seconds;
                    node = id;
                }
            }
        }
        if (!node.valid())
            return;
        auto narrated = [&](passes::NodeId id) {
            const auto &cn = model.coarse->node(id);
            return NarratedNode{QString::fromStdString(std::string(cn.name)),
                                std::vector<ir::TensorId>(cn.parameters.begin(), cn.parameters.end())};
        };
        // A node of a class: the class's instance it belongs to, node by
        // node, laid out open so that each node is selected on its own.
        const passes::SubgraphInstance *instance = nullptr;
        int classId = -1;
        if (model.classes)
            for (const auto &c : model.classes->classes)
                for (const auto &inst : c.instances)
                    if (std::find(inst.nodes.begin(), inst.nodes.end(), node) != inst.nodes.end()) {
                        instance = &inst;
                        classId = c.id.value;
                    }
        std::vector<NarratedNode> nodes;
        QString subject = narrated(node).name;
        if (instance) {
            const int selected = m_graph->selectedViewNode();
            const auto &view = m_graph->viewGraph();
            const bool folded = selected < 0 || selected >= static_cast<int>(view.nodes.size()) ||
                                view.nodes[static_cast<std::size_t>(selected)].kind == layout::ViewNode::Kind::Block;
            if (folded) {
                // Open the class's first block, then narrate its first instance.
                for (const auto &v : view.nodes)
                    if (v.kind == layout::ViewNode::Kind::Block && v.cls.value == classId) {
                        const auto &first = model.classes->classes[static_cast<std::size_t>(classId)]
                                                .instances[v.instances.front()];
                        if (first.nodes.empty() || !m_graph->expandClass(classId))
                            break;
                        m_lessonFocus = QString::fromStdString(std::string(model.coarse->node(first.nodes.front()).name));
                        m_pendingLesson = 3;
                        return;  // focusLesson comes back once the layout is in
                    }
            }
            for (passes::NodeId id : instance->nodes)
                if (!m_mesh->collectiveSteps(id).isEmpty())
                    nodes.push_back(narrated(id));
            if (nodes.empty())
                nodes.push_back(narrated(node));
            subject = QString::fromStdString(instance->scope);
        } else {
            nodes.push_back(narrated(node));
        }
        script = ownPlanLesson(source, subject, nodes);
    }
    m_lesson->show();
    m_lesson->raise();
    // The text and the mesh side by side in height: the mesh needs its
    // rows of devices, the text the rest.
    const int meshRows = planned().plan->mesh.rank() > 1 ? planned().plan->mesh.axes.front().size : 1;
    const int meshHeight = std::min(height() / 2, 140 + 90 * meshRows);
    const int lessonHeight = std::max(200, height() - meshHeight - 120);
    resizeDocks({m_lesson, m_mesh}, {lessonHeight, meshHeight}, Qt::Vertical);
    QTimer::singleShot(0, this, [this, lessonHeight, meshHeight] {  // once the dock is shown and placed
        resizeDocks({m_lesson, m_mesh}, {lessonHeight, meshHeight}, Qt::Vertical);
    });
    m_lesson->setLesson(script);
}

void StudioWindow::showLessonStep(const LessonStep &step)
{
    const auto &model = document();
    if (!model.coarse)
        return;
    const passes::NodeId node = nodeNamed(model, step.node);
    if (node.valid() && node != m_doc->selectedNode())
        selectByName(step.node);
    // From a collective's "before" frame to its "after" one: the pieces move.
    if (auto *view = meshView(); step.frame < view->frameCount()) {
        if (step.frame % 2 == 0 && step.frame > 0 && view->frame() == step.frame - 1 && !view->isAnimating())
            view->animateCollective();
        else
            view->setFrame(step.frame);
    }
}

bool StudioWindow::openLesson(int lesson)
{
    if (lesson == 3) {
        if (!planned().plan || !document().coarse) {
            showError(tr("Lesson 3 narrates the open plan: open a model and select a node first"));
            return false;
        }
        showLesson(3);
        return true;
    }
    m_lessonFocus = lesson == 1 ? QStringLiteral("first") : QStringLiteral("mlp/fc1");
    m_pendingLesson = lesson;
    if (lesson == 1) {
        setPlanRequest({QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("cpu-loopback"), {}});
        openModel(QStringLiteral("zoo:abc"));
    } else {
        // The reference methods cannot express the fully sharded 2D plan; it
        // ships as a sample plan.
        setPlanRequest({QStringLiteral("replicate"), QStringLiteral("4x2"), QStringLiteral("cpu-loopback"), {}});
        m_pendingPlanFile = QStringLiteral(TAPESTRY_SAMPLES_DIR "/plans/mlp-2d-4x2.json");
        openModel(QStringLiteral("zoo:mlp"));
    }
    return true;
}

bool StudioWindow::compareWith(const QString &other)
{
    if (!m_doc->compareWith(other))
        return false;
    const auto &diff = m_doc->diff();
    m_compare->setDiff(diff, tr("A: %1").arg(QString::fromStdString(planned().plan->method)), tr("B: %1").arg(other));
    setColouring(Colouring::ByDifference);
    m_status->setText(tr("Compared with %1: %2 tensors differ, step time %3 ms → %4 ms")
                          .arg(other)
                          .arg(diff.specs.size())
                          .arg(diff.stepTimeA * 1e3, 0, 'f', 2)
                          .arg(diff.stepTimeB * 1e3, 0, 'f', 2));
    return true;
}

void StudioWindow::setColouring(Colouring colouring)
{
    m_colouring = colouring;
    if (m_actions)
        m_actions->showColouring(static_cast<int>(colouring));
    const PlanDocument &doc = *m_doc;
    switch (colouring) {
    case Colouring::ByClass:
        m_graph->setColouring({});
        break;
    case Colouring::BySharding:
        m_graph->setColouring([&doc](const layout::ViewNode &n) { return shardingColour(doc, n); });
        break;
    case Colouring::ByCost:
        m_graph->setColouring([&doc](const layout::ViewNode &n) { return costColour(doc, n); });
        break;
    case Colouring::ByDifference:
        m_graph->setColouring([&doc](const layout::ViewNode &n) { return differenceColour(doc, n); });
        break;
    }
    m_graph->setLegend(colouringLegend(static_cast<int>(colouring), planned().plan != nullptr));
}

void StudioWindow::showCandidates(int classId)
{
    m_candidates->showClass(classId);
}

bool StudioWindow::applyCandidate(int row)
{
    return m_candidates->applyCandidate(row);
}

void StudioWindow::showError(const QString &message)
{
    m_lastError = message;
    m_status->setText(document().graph ? tr("Kept %1 open after an error").arg(document().source) : QString());
    if (m_quietErrors) {
        std::cerr << "tapestry: " << message.toStdString() << '\n';
        return;
    }
    QMessageBox::critical(this, tr("Tapestry"), message);
}

void StudioWindow::onViewNodeSelected(int viewNode)
{
    const auto &view = m_graph->viewGraph();
    if (viewNode < 0 || viewNode >= static_cast<int>(view.nodes.size())) {
        inspector()->showNothing();
        m_graph->highlightClass(-1);
        return;
    }
    const auto &node = view.nodes[static_cast<std::size_t>(viewNode)];
    inspector()->showViewNode(&node);
    const auto nodes = coarseNodesOf(document(), node);
    m_doc->setSelection(node.cls.valid() ? node.cls.value : -1, nodes.empty() ? passes::NodeId() : nodes.front());
    if (m_syncing)
        return;
    m_syncing = true;
    m_classes->selectClass(node.cls.valid() ? node.cls.value : -1);
    m_graph->highlightClass(node.cls.valid() ? node.cls.value : -1);
    m_syncing = false;
    if (!m_candidates->isHidden() && node.cls.valid() && node.cls.value != m_candidates->shownClass())
        showCandidates(node.cls.value);
}

void StudioWindow::onClassActivated(int classId)
{
    if (m_syncing)
        return;
    m_graph->highlightClass(classId);
    if (!m_candidates->isHidden())
        showCandidates(classId);
    const auto &view = m_graph->viewGraph();
    for (std::size_t i = 0; i < view.nodes.size(); ++i)
        if (view.nodes[i].cls.value == classId) {
            m_syncing = true;
            m_graph->selectViewNode(static_cast<int>(i));
            m_syncing = false;
            break;
        }
}

// Right-click on a node: every legal spec of each of its weights with what
// it would cost, pinned by choosing it; the class' plan candidates.
void StudioWindow::showNodeMenu(int viewNode, const QPoint &screenPos)
{
    const auto &view = m_graph->viewGraph();
    if (!planned().plan || viewNode < 0 || viewNode >= static_cast<int>(view.nodes.size()))
        return;
    PinMenu menu(m_doc, view.nodes[static_cast<std::size_t>(viewNode)], this);
    if (!menu.error().isEmpty()) {
        showError(menu.error());
        return;
    }
    connect(&menu, &PinMenu::candidatesRequested, this, [this](int classId) {
        showPanel(QStringLiteral("candidates"));
        showCandidates(classId);
    });
    menu.exec(screenPos);
}

bool StudioWindow::findNext(const QString &query)
{
    return m_find->findNext(query);
}

bool StudioWindow::selectByName(const QString &name)
{
    return m_graph->selectByName(name) || findNext(name);
}

bool StudioWindow::expandClass(int classId)
{
    return m_graph->expandClass(classId);
}

bool StudioWindow::exportImage(const QString &path, QString *error)
{
    return m_graph->exportImage(path, document().source, error);
}

bool StudioWindow::showPanel(const QString &panel)
{
    for (auto *dock : findChildren<QDockWidget *>()) {
        if (dock->objectName() == panel) {
            dock->show();
            dock->raise();
            return true;
        }
    }
    return false;
}

bool StudioWindow::confirmDiscardEdits()
{
    if (!hasUnsavedEdits() || m_quietErrors)
        return true;
    const auto answer = QMessageBox::question(
        this, tr("Unsaved edits"), tr("The plan has %n edit(s) not saved to a file. Save them first?", nullptr,
                                      undoStack()->index()),
        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel)
        return false;
    if (answer == QMessageBox::Save) {
        const QString path = QFileDialog::getSaveFileName(this, tr("Save plan"), QStringLiteral("plan.json"),
                                                          tr("Tapestry plan (*.json)"));
        return !path.isEmpty() && savePlan(path);
    }
    m_doc->discardEdits();
    return true;
}

void StudioWindow::closeEvent(QCloseEvent *event)
{
    if (!confirmDiscardEdits()) {
        event->ignore();
        return;
    }
    m_doc->clearAutosave();
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    QMainWindow::closeEvent(event);
}

} // namespace tapestry::views
