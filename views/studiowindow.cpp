#include "studiowindow.h"

#include "classlistmodel.h"
#include "costsummarybar.h"
#include "palette.h"
#include "plan/planjson.h"
#include "sharding/meshprofile.h"
#include "finder.h"
#include "graphpanel.h"
#include "inspectorview.h"
#include "meshview.h"
#include "compareview.h"
#include "candidatesview.h"
#include "costchartsview.h"
#include "executorpanel.h"
#include "search/referenceplan.h"
#include "planeditcommand.h"
#include "analysis/explain.h"
#include "export/exportplan.h"
#include "io/jsonmodel.h"
#include "sharding/deviceblock.h"
#include "ir/error.h"
#include "zoodialog.h"

#include <QApplication>
#include <QComboBox>
#include <QCloseEvent>
#include <QDockWidget>
#include <QFileDialog>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPainter>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QStandardPaths>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTableView>
#include <QUndoStack>
#include <QToolBar>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <iostream>
#include <set>
#include <tuple>
#include <unordered_map>

namespace tapestry::views {

namespace {
constexpr int kMaxRecent = 10;

// The mesh field's text for a plan's mesh: names only where not the defaults.
QString shapeText(const sharding::Mesh &mesh)
{
    return QString::fromStdString(sharding::meshText(mesh));
}

} // namespace

StudioWindow::StudioWindow(QWidget *parent)
    : QMainWindow(parent), m_graph(new GraphPanel(this)), m_inspector(new InspectorView(this)),
      m_classTable(new QTableView(this)), m_classModel(new ClassListModel(this)),
      m_classProxy(new QSortFilterProxyModel(this)), m_find(new QLineEdit(this)),
      m_status(new QLabel(this)), m_progress(new QProgressBar(this)),
      m_cancel(new QPushButton(tr("Cancel"), this)), m_costBar(new CostSummaryBar(this)), m_meshView(new MeshView(this)),
      m_undo(new QUndoStack(this)), m_compare(new CompareView(this)),
      m_charts(new CostChartsView(this)), m_candidatesView(new CandidatesView(this))
{
    qRegisterMetaType<PlannedModel>();
    qRegisterMetaType<LoadedModel>();
    setWindowTitle(tr("Tapestry[*]"));

    auto *central = new QWidget(this);
    auto *layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    auto *findRow = new QHBoxLayout;
    findRow->setContentsMargins(6, 4, 6, 4);
    m_find->setPlaceholderText(tr("Find op, tensor or shape (Ctrl+F, Enter for next)"));
    m_find->setClearButtonEnabled(true);
    findRow->addWidget(m_find);
    layout->addLayout(findRow);
    layout->addWidget(m_graph, 1);
    layout->addWidget(m_costBar);
    setCentralWidget(central);
    connect(m_find, &QLineEdit::returnPressed, this, [this] {
        if (!findNext(m_find->text()))
            statusBar()->showMessage(tr("No match for \"%1\"").arg(m_find->text()), 4000);
    });

    m_classProxy->setSourceModel(m_classModel);
    m_classProxy->setSortRole(ClassListModel::SortRole);
    m_classTable->setModel(m_classProxy);
    m_classTable->setSortingEnabled(true);
    m_classTable->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_classTable->setSelectionMode(QAbstractItemView::SingleSelection);
    m_classTable->verticalHeader()->hide();
    m_classTable->horizontalHeader()->setStretchLastSection(true);
    m_classTable->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    connect(m_classTable->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
            [this](const QModelIndex &current) { onClassActivated(current); });

    auto *classDock = new QDockWidget(tr("Unique subgraphs"), this);
    classDock->setObjectName(QStringLiteral("classes"));
    classDock->setWidget(m_classTable);
    addDockWidget(Qt::LeftDockWidgetArea, classDock);
    auto *inspectorDock = new QDockWidget(tr("Inspector"), this);
    inspectorDock->setObjectName(QStringLiteral("inspector"));
    inspectorDock->setWidget(m_inspector);
    addDockWidget(Qt::RightDockWidgetArea, inspectorDock);
    resizeDocks({classDock, inspectorDock}, {300, 380}, Qt::Horizontal);

    auto *meshPanel = new QWidget(this);
    auto *meshLayout = new QVBoxLayout(meshPanel);
    meshLayout->setContentsMargins(2, 2, 2, 2);
    meshLayout->addWidget(m_meshView, 1);
    auto *stepRow = new QHBoxLayout;
    auto *prev = new QPushButton(tr("◀ Prev"), meshPanel);
    auto *play = new QPushButton(tr("Play"), meshPanel);
    play->setCheckable(true);
    auto *next = new QPushButton(tr("Next ▶"), meshPanel);
    auto *exportMesh = new QPushButton(tr("Export…"), meshPanel);
    stepRow->addWidget(prev);
    stepRow->addWidget(play);
    stepRow->addWidget(next);
    stepRow->addStretch(1);
    stepRow->addWidget(exportMesh);
    meshLayout->addLayout(stepRow);
    connect(prev, &QPushButton::clicked, m_meshView, &MeshView::previous);
    connect(next, &QPushButton::clicked, m_meshView, &MeshView::next);
    connect(play, &QPushButton::toggled, m_meshView, &MeshView::play);
    connect(exportMesh, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export mesh diagram"), QStringLiteral("mesh.png"),
                                                          tr("PNG image (*.png);;SVG drawing (*.svg)"));
        if (!path.isEmpty() && !m_meshView->exportImage(path))
            showError(tr("%1: cannot write the image").arg(path));
    });
    auto *compareDock = new QDockWidget(tr("Compare plans"), this);
    compareDock->setObjectName(QStringLiteral("compare"));
    compareDock->setWidget(m_compare);
    addDockWidget(Qt::LeftDockWidgetArea, compareDock);
    auto *chartsDock = new QDockWidget(tr("Cost breakdown"), this);
    chartsDock->setObjectName(QStringLiteral("charts"));
    chartsDock->setWidget(m_charts);
    addDockWidget(Qt::BottomDockWidgetArea, chartsDock);
    chartsDock->hide();  // View › Cost breakdown
    auto *candidatesDock = new QDockWidget(tr("Plan candidates"), this);
    candidatesDock->setObjectName(QStringLiteral("candidates"));
    candidatesDock->setWidget(m_candidatesView);
    addDockWidget(Qt::BottomDockWidgetArea, candidatesDock);
    candidatesDock->hide();  // View › Plan candidates, or a class' context menu
    connect(candidatesDock, &QDockWidget::visibilityChanged, this, [this](bool visible) {
        if (visible && m_candidatesClass < 0 && m_classTable->currentIndex().isValid())
            showCandidates(m_classTable->currentIndex().data(ClassListModel::ClassIdRole).toInt());
    });
    connect(m_candidatesView, &CandidatesView::applyRequested, this, [this](int, int row) { applyCandidate(row); });
    connect(&m_candidateWorker, &QFutureWatcher<std::pair<analysis::ClassCandidates, std::string>>::finished, this,
            [this] {
        const auto [result, error] = m_candidateWorker.result();
        QString name;
        const int row = m_classModel->rowOfClass(m_candidatesClass);
        if (row >= 0)
            name = m_classModel->index(row, ClassListModel::Name).data().toString();
        if (!error.empty())
            m_candidatesView->showMessage(tr("%1: %2").arg(name, QString::fromStdString(error)));
        else if (result.candidates.empty())
            m_candidatesView->showMessage(tr("%1: no candidates (the class has no weights to split, or its plan "
                                             "could not be costed)").arg(name));
        else
            m_candidatesView->setCandidates(name, m_candidatesClass, result);
        emit candidatesReady();
    });
    auto *meshDock = new QDockWidget(tr("Device mesh"), this);
    meshDock->setObjectName(QStringLiteral("mesh"));
    meshDock->setWidget(meshPanel);
    addDockWidget(Qt::RightDockWidgetArea, meshDock);
    auto *executor = new ExecutorPanel(this);
    auto *executorDock = new QDockWidget(tr("Executor"), this);
    executorDock->setObjectName(QStringLiteral("executor"));
    executorDock->setWidget(executor);
    addDockWidget(Qt::BottomDockWidgetArea, executorDock);
    executorDock->hide();  // View › Executor
    connect(this, &StudioWindow::planReady, executor, [this, executor] { executor->setPlan(m_document, m_planned); });
    connect(executor, &ExecutorPanel::runFinished, this, [this](const ExecutorRun &run) {
        if (run.state == ExecutorRun::State::Finished)
            m_costBar->setMeasured(tr("measured %1 ms on %2 ranks (%3 predicts %4 ms)")
                                       .arg(run.meanStepTime() * 1e3, 0, 'f', 1)
                                       .arg(run.ranks)
                                       .arg(run.predicted.profile)
                                       .arg(run.predicted.stepTime * 1e3, 0, 'f', 1));
    });
    connect(executor, &ExecutorPanel::profileCalibrated, this, [this](const QString &name) {
        if (m_profile->findText(name) < 0)
            m_profile->addItem(name);
        m_profile->setCurrentText(name);  // plan again with what this machine measured
        derivePlan();
    });
    connect(m_inspector, &QTreeWidget::itemDoubleClicked, this, [this](QTreeWidgetItem *item) {
        if (!item || !item->data(0, Qt::UserRole + 1).isValid())
            return;
        const std::string tensor = item->data(0, Qt::UserRole + 1).toString().toStdString();
        const auto index = static_cast<std::size_t>(item->data(0, Qt::UserRole + 2).toInt());
        try {
            const auto explanation = explainer()->explainTensor(tensor);
            if (index < explanation.alternatives.size())
                pinTensor(tensor, explanation.alternatives[index].spec, m_pinWholeClass);
        } catch (const std::exception &e) {
            showError(QString::fromUtf8(e.what()));
        }
    });
    connect(m_inspector, &QTreeWidget::currentItemChanged, this, [this](QTreeWidgetItem *item) {
        if (item && item->data(0, Qt::UserRole).isValid())
            showOnMesh(ir::TensorId(item->data(0, Qt::UserRole).toInt()));
    });

    statusBar()->addWidget(m_status, 1);
    m_progress->setMaximumWidth(180);
    m_progress->setRange(0, 0);
    m_progress->hide();
    m_cancel->hide();
    statusBar()->addPermanentWidget(m_progress);
    statusBar()->addPermanentWidget(m_cancel);
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        for (const auto &flag : {m_cancelFlag, m_planCancel})
            if (flag)
                flag->store(true);
    });

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
    connect(&m_loader, &QFutureWatcher<LoadedModel>::finished, this, [this] {
        m_progress->hide();
        m_cancel->hide();
        const LoadedModel model = m_loader.result();
        if (!model.error.isEmpty()) {
            if (m_cancelFlag && m_cancelFlag->load()) {
                m_status->setText(tr("Loading %1 cancelled").arg(model.source));
                return;
            }
            showError(model.error);
            emit loadFailed(m_lastError);
            return;
        }
        adoptDocument(model);
        if (!m_pendingPlanFile.isEmpty()) {
            const QString planFile = std::exchange(m_pendingPlanFile, QString());
            openPlanFile(planFile);
        }
    });

    connect(&m_planner, &QFutureWatcher<PlannedModel>::finished, this, [this] {
        m_progress->hide();
        m_progress->setRange(0, 0);  // busy again for loads and layouts
        m_cancel->hide();
        const PlannedModel planned = m_planner.result();
        if (!planned.error.isEmpty()) {
            // The plan shown (and its edits) stays, with the fields that made
            // it; the error says what was wrong with the request.
            m_rederiveBase = nullptr;
            if (planned.cancelled)
                m_status->setText(tr("Plan search cancelled"));
            else
                showError(planned.error);
            if (const auto &kept = m_planned.plan) {
                m_method->setCurrentText(QString::fromStdString(kept->method));
                m_mesh->setCurrentText(shapeText(kept->mesh));
                if (!kept->mesh.profile.empty())
                    m_profile->setCurrentText(QString::fromStdString(kept->mesh.profile));
                m_status->setText((planned.cancelled ? tr("Plan search cancelled; kept the %1 plan on %2")
                                                     : tr("Kept the %1 plan on %2 after an error"))
                                      .arg(QString::fromStdString(kept->method),
                                           QString::fromStdString(kept->mesh.toString())));
            } else {
                m_costBar->clearCost();
            }
            emit planFailed(planned.error);
            return;
        }
        if (auto base = std::exchange(m_rederiveBase, nullptr)) {
            if (m_planned.plan == base) {
                m_planned.searchSeconds = planned.searchSeconds;
                pushPlanEdit(tr("Re-derive around pins"), planned.plan);
                return;
            }
        }
        m_undo->clear();
        adoptPlan(planned);
        // A plan autosaved by a session that ended without saving its edits.
        if (!std::exchange(m_autosaveOffered, true) && !m_quietErrors && autosavedPins() > 0 &&
            QMessageBox::question(this, tr("Restore edits"),
                                  tr("%1 pins of an unsaved plan for this model were kept from the last session. "
                                     "Restore them?").arg(autosavedPins())) == QMessageBox::Yes)
            restoreAutosave();
    });
    // clear() (a new plan derived or opened) leaves an autosave alone: it is
    // dropped when edits are saved or discarded, or undone back to the plan.
    connect(m_undo, &QUndoStack::indexChanged, this, [this] {
        if (m_undo->count() > 0)
            autosave();
    });
    connect(&m_autosaveWriter, &QFutureWatcher<QString>::finished, this, [this] {
        if (const QString error = m_autosaveWriter.result(); !error.isEmpty())
            m_status->setText(tr("Autosave failed: %1").arg(error));
        if (auto queued = std::exchange(m_autosaveQueued, nullptr))
            writeAutosave(std::move(queued));
    });
    connect(m_undo, &QUndoStack::cleanChanged, this, [this](bool clean) { setWindowModified(!clean); });

    createActions();
    installInspectorSections();
    QSettings settings;
    restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray());
    restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
    if (!settings.contains(QStringLiteral("window/geometry")))
        resize(1400, 900);
    m_status->setText(tr("Open a model: File › Open, or File › Model zoo"));
}

StudioWindow::~StudioWindow()
{
    finishAutosave();  // the last edit's autosave is on disk before the window goes
    m_explainer.reset();
    m_graph->disconnect(this);
    m_undo->disconnect(this);  // its destructor clears it: keep the autosave
    if (m_cancelFlag)
        m_cancelFlag->store(true);
    m_loader.waitForFinished();
    // A search still running works on its own copies of the model: it is
    // told to stop, and nothing reads its result.
    if (m_planCancel)
        m_planCancel->store(true);
}

void StudioWindow::createActions()
{
    auto *file = menuBar()->addMenu(tr("&File"));
    auto *open = file->addAction(tr("&Open…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Open model"), QString(),
            tr("Models (*.onnx *.json);;ONNX (*.onnx);;Tapestry model or config.json (*.json);;All files (*)"));
        if (!path.isEmpty())
            openModel(path);
    });
    open->setShortcut(QKeySequence::Open);
    auto *zoo = file->addAction(tr("Model &zoo…"), this, [this] {
        ZooDialog dialog(this);
        if (dialog.exec() == QDialog::Accepted && !dialog.spec().isEmpty())
            openModel(dialog.spec());
    });
    zoo->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
    m_recentMenu = file->addMenu(tr("Open &recent"));
    rebuildRecentMenu();
    file->addSeparator();
    auto *exportImage = file->addAction(tr("Export &image…"), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, tr("Export graph image"), QStringLiteral("graph.png"),
                                                          tr("PNG image (*.png);;SVG drawing (*.svg)"));
        if (!path.isEmpty() && !this->exportImage(path))
            showError(tr("%1: cannot write the image").arg(path));
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), qApp, &QApplication::closeAllWindows)->setShortcut(QKeySequence::Quit);

    auto *edit = menuBar()->addMenu(tr("&Edit"));
    auto *undo = m_undo->createUndoAction(this, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    auto *redo = m_undo->createRedoAction(this, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    edit->addAction(undo);
    edit->addAction(redo);
    edit->addAction(tr("Reset to &derived plan"), this, [this] { m_undo->setIndex(0); });
    auto *wholeClass = edit->addAction(tr("Pins apply to the &whole class"));
    wholeClass->setCheckable(true);
    wholeClass->setChecked(m_pinWholeClass);
    wholeClass->setToolTip(tr("Unchecked: a pin applies to the instance it was made on only"));
    connect(wholeClass, &QAction::toggled, this, [this](bool on) { m_pinWholeClass = on; });
    edit->addSeparator();
    auto *find = edit->addAction(tr("&Find…"), this, [this] {
        m_find->setFocus();
        m_find->selectAll();
    });
    find->setShortcut(QKeySequence::Find);

    auto *lessons = menuBar()->addMenu(tr("&Lessons"));
    lessons->addAction(tr("1. Y = X·B·C: column split, then row split (one all-reduce)"), this, [this] { openLesson(1); });
    lessons->addAction(tr("2. The 2-layer MLP on a 4x2 mesh (all-gathers, then reduce-scatter)"), this, [this] { openLesson(2); });

    auto *view = menuBar()->addMenu(tr("&View"));
    for (auto *dock : findChildren<QDockWidget *>())
        view->addAction(dock->toggleViewAction());
    view->addSeparator();
    auto *fit = view->addAction(tr("&Fit to window"), m_graph->view(), &GraphView::fitAll);
    fit->setShortcut(QKeySequence(tr("Ctrl+0")));
    view->addAction(tr("Zoom &in"), this, [this] { m_graph->view()->zoomBy(1.25); })->setShortcut(QKeySequence::ZoomIn);
    view->addAction(tr("Zoom &out"), this, [this] { m_graph->view()->zoomBy(0.8); })->setShortcut(QKeySequence::ZoomOut);

    auto *toolbar = addToolBar(tr("Main"));
    toolbar->setObjectName(QStringLiteral("main"));
    toolbar->addAction(open);
    toolbar->addAction(zoo);
    toolbar->addSeparator();
    toolbar->addAction(fit);
    toolbar->addAction(exportImage);

    auto *planBar = addToolBar(tr("Plan"));
    planBar->setObjectName(QStringLiteral("plan"));
    m_method = new QComboBox(planBar);
    m_method->addItems({QStringLiteral("tap"), QStringLiteral("megatron"), QStringLiteral("dp"), QStringLiteral("replicate")});
    m_method->setToolTip(tr("How the plan is made: TAP search, or a reference plan"));
    m_mesh = new QComboBox(planBar);
    m_mesh->setEditable(true);
    m_mesh->addItems({QStringLiteral("8"), QStringLiteral("4"), QStringLiteral("2"), QStringLiteral("2x8"),
                      QStringLiteral("4x2"), QStringLiteral("8x8")});
    m_mesh->setToolTip(tr("Device mesh shape: 8 devices on one axis, 2x8 (data × model), or any shape with its "
                          "axes named: 2x2x2 (dp, tp, sp)"));
    // Wide enough for a mesh with its axis names, "2x2x2 (dp, tp, sp)".
    connect(m_mesh, &QComboBox::editTextChanged, this, [this](const QString &text) {
        m_mesh->setMinimumWidth(std::max(m_mesh->sizeHint().width(), fontMetrics().horizontalAdvance(text) + 40));
    });
    m_profile = new QComboBox(planBar);
    for (const auto &name : sharding::meshProfileNames())
        m_profile->addItem(QString::fromStdString(name));
    m_profile->setCurrentText(QString::fromLatin1(sharding::kDefaultMeshProfile));
    m_profile->setToolTip(tr("Machine profile: link bandwidths, device memory and FLOP/s"));
    planBar->addWidget(new QLabel(tr(" Plan "), planBar));
    planBar->addWidget(m_method);
    planBar->addWidget(new QLabel(tr(" Mesh "), planBar));
    planBar->addWidget(m_mesh);
    planBar->addWidget(m_profile);
    auto *derive = planBar->addAction(tr("Derive plan"), this, &StudioWindow::derivePlan);
    derive->setShortcut(QKeySequence(tr("Ctrl+D")));
    planBar->addSeparator();
    planBar->addWidget(new QLabel(tr(" Colour by "), planBar));
    m_colourBy = new QComboBox(planBar);
    m_colourBy->addItems({tr("class"), tr("sharding"), tr("cost"), tr("difference")});
    planBar->addWidget(m_colourBy);
    connect(m_colourBy, &QComboBox::currentIndexChanged, this,
            [this](int i) { setColouring(static_cast<Colouring>(i)); });

    auto *planMenu = menuBar()->addMenu(tr("&Plan"));
    planMenu->addAction(derive);
    auto *rederive = planMenu->addAction(tr("&Re-derive around pins"), this, &StudioWindow::rederiveAroundPins);
    rederive->setShortcut(QKeySequence(tr("Ctrl+Shift+D")));
    planMenu->addAction(tr("Plan &candidates for the selected class"), this, [this] { showPanel(QStringLiteral("candidates")); });
    for (QComboBox *box : {m_method, m_mesh, m_profile})
        connect(box, &QComboBox::activated, this, [this] { derivePlan(); });
    auto *exportMenu = planMenu->addMenu(tr("&Export for"));
    for (const auto &[format, label, suffix] :
         {std::tuple{"torch", "PyTorch (parallelize_module plan)…", "py"}, std::tuple{"jax", "JAX (PartitionSpecs)…", "py"},
          std::tuple{"megatron", "Megatron-LM (arguments)…", "txt"}})
        exportMenu->addAction(tr(label), this, [this, format = QString::fromLatin1(format), suffix = QString::fromLatin1(suffix)] {
            const QString path = QFileDialog::getSaveFileName(this, tr("Export plan"), QStringLiteral("plan-%1.%2").arg(format, suffix));
            if (!path.isEmpty())
                exportPlan(format, path);
        });
    auto *compare = planMenu->addMenu(tr("&Compare with"));
    for (const char *method : {"megatron", "dp", "replicate"})
        compare->addAction(QString::fromLatin1(method), this, [this, method] { compareWith(QString::fromLatin1(method)); });
    compare->addAction(tr("Plan file…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Compare with plan"), QString(), tr("Tapestry plan (*.json)"));
        if (!path.isEmpty())
            compareWith(path);
    });
    planMenu->addAction(tr("&Open plan JSON…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Open plan"), QString(), tr("Tapestry plan (*.json)"));
        if (!path.isEmpty())
            openPlanFile(path);
    });
    planMenu->addAction(tr("&Save plan JSON…"), this, [this] {
        if (!m_planned.plan) {
            showError(tr("No plan to save: derive one first"));
            return;
        }
        const QString path = QFileDialog::getSaveFileName(this, tr("Save plan"), QStringLiteral("plan.json"),
                                                          tr("Tapestry plan (*.json)"));
        if (!path.isEmpty())
            savePlan(path);
    });
}

void StudioWindow::setPlanRequest(const PlanRequest &request)
{
    m_method->setCurrentText(request.method);
    m_mesh->setCurrentText(request.meshShape);
    m_profile->setCurrentText(request.profile);
}

PlanRequest StudioWindow::planRequest() const
{
    return {m_method->currentText(), m_mesh->currentText().trimmed(), m_profile->currentText(), {}};
}

void StudioWindow::derivePlan()
{
    if (!m_document.graph || !confirmDiscardEdits())
        return;
    m_rederiveBase = nullptr;
    m_status->setText(tr("Deriving a %1 plan on mesh %2…").arg(m_method->currentText(), m_mesh->currentText()));
    startPlanner(planRequest());
}

void StudioWindow::startPlanner(const PlanRequest &request)
{
    // A search already running is superseded: told to stop, not waited
    // for (its captured copies keep it safe, and setFuture() drops its
    // result). Cancel stops this one.
    if (m_planCancel)
        m_planCancel->store(true);
    m_planCancel = std::make_shared<std::atomic_bool>(false);
    m_progress->setRange(0, 0);  // busy until the search reports
    m_progress->show();
    m_cancel->show();
    const LoadedModel model = m_document;
    PlanControl control;
    control.cancel = m_planCancel;
    // The bar follows the search in steps of a thousandth; a superseded
    // search reports no more.
    auto shown = std::make_shared<std::atomic_int>(-1);
    control.progress = [bar = QPointer<QProgressBar>(m_progress), cancel = control.cancel,
                        shown](std::size_t done, std::size_t total) {
        const int permille = total > 0 ? static_cast<int>(std::min<std::size_t>(1000, done * 1000 / total)) : 0;
        if (cancel->load() || shown->exchange(permille) == permille)
            return;
        QMetaObject::invokeMethod(bar, [bar, cancel, permille] {
            if (bar && !cancel->load()) {
                bar->setRange(0, 1000);
                bar->setValue(permille);
            }
        }, Qt::QueuedConnection);
    };
    m_planner.setFuture(QtConcurrent::run(
        [model, request, control] { return tapestry::views::derivePlan(model, request, control); }));
}

void StudioWindow::adoptPlan(const PlannedModel &planned)
{
    m_planned = planned;
    m_explainerStale = true;
    QSet<int> pinned;
    for (const auto &[name, tp] : planned.plan->specs) {
        if (tp.source != plan::SpecSource::Override)
            continue;
        const auto t = m_document.graph->findTensor(name);
        if (!t || m_document.graph->tensor(*t).role != ir::Role::Parameter)
            continue;
        for (auto consumer : m_document.graph->tensor(*t).consumers) {
            const int v = m_graph->viewNodeOf(m_document.coarse->nodeOf(consumer));
            if (v >= 0)
                pinned.insert(v);
        }
    }
    m_graph->setPinnedNodes(pinned);
    const auto &p = *planned.plan;
    m_costBar->setCost(p.cost, QStringLiteral("%1 on %2 ·").arg(QString::fromStdString(p.method),
                                                                  QString::fromStdString(p.mesh.toString())));
    QVector<double> shares;
    if (m_document.classes && p.cost.stepTime > 0)
        for (const auto &c : m_document.classes->classes) {
            auto it = planned.byClass.find("class " + std::to_string(c.id.value));
            shares.push_back(it == planned.byClass.end() ? 0.0 : it->second.total() / p.cost.stepTime);
        }
    m_classModel->setCostShares(shares);
    m_meshView->setMesh(p.mesh);
    std::map<int, QString> classNames;
    for (int row = 0; row < m_classModel->rowCount(); ++row) {
        const auto index = m_classModel->index(row, ClassListModel::Name);
        classNames[index.data(ClassListModel::ClassIdRole).toInt()] = index.data().toString();
    }
    m_charts->setPlanned(planned, classNames);
    m_status->setText(tr("%1 plan on %2 in %3 ms: step %4 ms%5")
                          .arg(QString::fromStdString(p.method), QString::fromStdString(p.mesh.toString()))
                          .arg(planned.searchSeconds * 1e3, 0, 'f', 1)
                          .arg(p.cost.stepTime * 1e3, 0, 'f', 2)
                          .arg(p.cost.fitsMemory ? QString() : tr(" — does not fit in device memory")));
    setColouring(m_colouring);
    onViewNodeSelected(m_graph->selectedViewNode());
    if (m_candidatesClass >= 0) {
        if (auto *dock = findChild<QDockWidget *>(QStringLiteral("candidates")); dock && !dock->isHidden())
            showCandidates(m_candidatesClass);
        else
            m_candidatesClass = -1;  // costed again when the dock opens
    }
    focusLesson();
    emit planReady();
}

void StudioWindow::focusLesson()
{
    // Once both the lesson's plan and its layout are in: its first node
    // selected, so the mesh view shows how that node's weight lies. Until
    // the scene holds the node (a finished layout is drawn a moment after
    // it is known), the next plan or layout tries again.
    if (m_lessonFocus.isEmpty() || !m_planned.plan || m_graph->isLayoutRunning())
        return;
    if (selectByName(m_lessonFocus) && m_graph->selectedViewNode() >= 0)
        m_lessonFocus.clear();
}

bool StudioWindow::savePlan(const QString &path)
{
    try {
        plan::writePlanFile(path.toStdString(), *m_planned.plan);
        m_undo->setClean();
        clearAutosave();
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
}

plan::Recoster &StudioWindow::recoster()
{
    if (!m_recoster)
        m_recoster = std::make_unique<plan::Recoster>(*m_document.graph);
    return *m_recoster;
}

analysis::Explainer *StudioWindow::explainer()
{
    if (!m_planned.plan)
        return nullptr;
    // Made once per document, mesh and cost options; an edited plan only
    // hands it its specs and cost.
    const plan::Plan &p = *m_planned.plan;
    if (m_explainer && m_explainerStale && m_explainer->explains(p.mesh, p.costOptions))
        m_explainer->setPlan(p.mesh, p.costOptions, m_planned.specs, p.cost);
    else if (!m_explainer || m_explainerStale)
        m_explainer = std::make_unique<analysis::Explainer>(*m_document.graph, p, m_document.source.toStdString());
    m_explainerStale = false;
    return m_explainer.get();
}

void StudioWindow::showPlan(const std::shared_ptr<const plan::Plan> &p)
{
    adoptPlan(groupPlan(m_document, *p));
}

bool StudioWindow::pinTensor(const std::string &tensorName, const sharding::ShardingSpec &spec, bool wholeClass)
{
    if (!m_planned.plan)
        return false;
    try {
        const auto explanation = explainer()->explainTensor(tensorName);
        const analysis::Alternative *alt = nullptr;
        for (const auto &a : explanation.alternatives)
            if (a.spec == spec)
                alt = &a;
        if (!alt)
            throw TapestryError(Error{tensorName, {}, "spec " + spec.toPlacements() + " is not a legal choice here"});
        auto edited = std::make_shared<plan::Plan>(*m_planned.plan);
        edited->method = m_planned.plan->method;
        // The pinned tensor is an override; what follows from it (a bias,
        // the activations of its node) stays the search's to re-derive.
        std::string pinnedName = tensorName;
        auto apply = [&](const std::string &name, const sharding::ShardingSpec &s) {
            edited->specs[name] = plan::TensorPlan{s, name == pinnedName ? plan::SpecSource::Override
                                                                          : plan::SpecSource::Search};
        };
        for (const auto &[name, s] : alt->changes)
            apply(name, s);
        apply(tensorName, spec);
        if (wholeClass) {
            // The same change in every other instance of the tensor's class:
            // walk the instances' ops side by side.
            const auto t = m_document.graph->findTensor(tensorName);
            const auto &g = *m_document.graph;
            for (const auto &cls : m_document.classes->classes) {
                std::size_t home = cls.instances.size();
                for (std::size_t i = 0; i < cls.instances.size(); ++i)
                    for (auto p : cls.instances[i].parameters)
                        if (t && p == *t)
                            home = i;
                if (home == cls.instances.size())
                    continue;
                const auto &ops = cls.instances[home].ops;
                std::vector<std::pair<ir::TensorId, sharding::ShardingSpec>> changes;
                for (const auto &[name, s] : alt->changes)
                    if (auto id = g.findTensor(name))
                        changes.emplace_back(*id, s);
                std::unordered_map<std::int32_t, ir::TensorId> counterpart;  // by tensor id of the home instance
                for (std::size_t j = 0; j < cls.instances.size(); ++j) {
                    if (j == home || cls.instances[j].ops.size() != ops.size())
                        continue;
                    counterpart.clear();
                    for (std::size_t k = 0; k < ops.size(); ++k) {
                        const auto &a = g.op(ops[k]);
                        const auto &b = g.op(cls.instances[j].ops[k]);
                        for (std::size_t x = 0; x < a.inputs.size() && x < b.inputs.size(); ++x)
                            counterpart.emplace(a.inputs[x].value, b.inputs[x]);
                        for (std::size_t x = 0; x < a.outputs.size() && x < b.outputs.size(); ++x)
                            counterpart.emplace(a.outputs[x].value, b.outputs[x]);
                    }
                    if (auto it = counterpart.find(t->value); it != counterpart.end())
                        pinnedName = g.tensor(it->second).name;
                    for (const auto &[id, s] : changes)
                        if (auto it = counterpart.find(id.value); it != counterpart.end())
                            apply(g.tensor(it->second).name, s);
                }
                break;
            }
        }
        recoster().recost(*edited, m_document.source.toStdString());
        pushPlanEdit(tr("Pin %1 to %2").arg(QString::fromStdString(tensorName), QString::fromStdString(spec.toPlacements())),
                     edited);
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
}

QColor StudioWindow::differenceColour(const layout::ViewNode &node) const
{
    for (auto n : nodesOf(node)) {
        const auto &cn = m_document.coarse->node(n);
        for (const auto *list : {&cn.parameters, &cn.outputs})
            for (auto t : *list)
                if (m_differing.count(m_document.graph->tensor(t).name))
                    return QColor(0xffb74d);
    }
    return QColor(0xeceff1);
}

bool StudioWindow::compareWith(const QString &other)
{
    if (!m_planned.plan)
        return false;
    try {
        plan::Plan b;
        if (other.endsWith(QLatin1String(".json"))) {
            b = plan::readPlanFile(other.toStdString());
        } else {
            const auto method = search::referenceMethodFromString(other.toStdString());
            if (!method)
                throw TapestryError(Error{other.toStdString(), {}, "unknown plan method"});
            b = search::referencePlan(*m_document.graph, m_document.source.toStdString(), m_planned.plan->mesh, *method);
        }
        const QString nameA = QString::fromStdString(m_planned.plan->method);
        const auto diff = analysis::diffPlans(*m_document.graph, *m_planned.plan, b, nameA.toStdString(), other.toStdString());
        m_differing.clear();
        for (const auto &c : diff.specs)
            m_differing.insert(c.tensor);
        m_compare->setDiff(diff, tr("A: %1").arg(nameA), tr("B: %1").arg(other));
        setColouring(Colouring::ByDifference);
        m_status->setText(tr("Compared with %1: %2 tensors differ, step time %3 ms → %4 ms")
                              .arg(other)
                              .arg(diff.specs.size())
                              .arg(diff.stepTimeA * 1e3, 0, 'f', 2)
                              .arg(diff.stepTimeB * 1e3, 0, 'f', 2));
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
}

bool StudioWindow::openPlanFile(const QString &path)
{
    if (!m_document.graph)
        return false;
    try {
        plan::Plan p = plan::readPlanFile(path.toStdString());
        recoster().recost(p, path.toStdString());
        m_undo->clear();
        adoptPlan(groupPlan(m_document, std::move(p)));
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        emit planFailed(m_lastError);
        return false;
    }
}

void StudioWindow::openLesson(int lesson)
{
    m_lessonFocus = lesson == 1 ? QStringLiteral("first") : QStringLiteral("mlp/fc1");
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
}

void StudioWindow::showOnMesh(ir::TensorId tensor)
{
    if (!m_planned.plan || !tensor.valid() || tensor.index() >= m_planned.specs.size())
        return;
    const auto &t = m_document.graph->tensor(tensor);
    m_meshView->setMesh(m_planned.plan->mesh);
    m_meshView->setTensor(QString::fromStdString(t.name), t.shape, m_planned.specs[tensor.index()]);
}

void StudioWindow::showNodeOnMesh(passes::NodeId node)
{
    if (!m_planned.plan)
        return;
    const auto &cn = m_document.coarse->node(node);
    ir::TensorId shown;
    for (auto t : cn.parameters)
        if (!shown.valid() || m_document.graph->tensor(t).elementCount() > m_document.graph->tensor(shown).elementCount())
            shown = t;
    if (!shown.valid() && !cn.outputs.empty())
        shown = cn.outputs.front();
    if (!shown.valid())
        return;
    showOnMesh(shown);
    // The node's collectives as steps: the moved tensor's spec with the
    // collective's axis before (partial or split) and after it ran.
    const auto &p = *m_planned.plan;
    std::set<std::string> opNames;
    for (auto o : cn.ops)
        opNames.insert(m_document.graph->op(o).name);
    QVector<CollectiveStep> steps;
    for (const auto &c : p.cost.collectives) {
        if (!opNames.count(c.op))
            continue;
        const auto axis = p.mesh.axisIndex(c.axis);
        const auto tensor = m_document.graph->findTensor(c.tensor);
        if (!axis || !tensor)
            continue;
        const auto a = static_cast<std::size_t>(*axis);
        sharding::ShardingSpec planned = m_planned.specs[tensor->index()];
        if (planned.placements.size() != p.mesh.axes.size())
            continue;
        int dim = planned.placements[a].isShard() ? planned.placements[a].dim : 0;
        if (dim >= static_cast<int>(m_document.graph->tensor(*tensor).shape.size()))
            dim = 0;
        CollectiveStep step;
        step.axis = *axis;
        step.tensor = QString::fromStdString(c.tensor);
        step.shape = m_document.graph->tensor(*tensor).shape;
        step.before = step.after = planned;
        QString change;
        switch (c.kind) {
        case sharding::CollectiveKind::AllReduce:
            step.before.placements[a] = sharding::Placement::partial();
            step.after.placements[a] = sharding::Placement::replicate();
            change = tr("partial sums → whole on every device");
            break;
        case sharding::CollectiveKind::AllGather:
            step.before.placements[a] = sharding::Placement::shard(dim);
            step.after.placements[a] = sharding::Placement::replicate();
            change = tr("split → whole on every device");
            break;
        case sharding::CollectiveKind::ReduceScatter:
            step.before.placements[a] = sharding::Placement::partial();
            step.after.placements[a] = sharding::Placement::shard(dim);
            change = tr("partial sums → summed and split");
            break;
        case sharding::CollectiveKind::AllToAll:
            step.before.placements[a] = sharding::Placement::shard(dim == 0 ? 1 : 0);
            step.after.placements[a] = sharding::Placement::shard(dim);
            change = tr("split on one dim → split on another");
            break;
        }
        step.title = QStringLiteral("%1 %2 of %3 over %4")
                         .arg(QString::fromLatin1(cost::toString(c.phase).data()),
                              QString::fromLatin1(sharding::toString(c.kind).data()),
                              QString::fromStdString(c.tensor), QString::fromStdString(c.axis));
        step.detail = tr("%1 per device, %2 ms · %3")
                          .arg(QLocale().formattedDataSize(c.bytes, 1, QLocale::DataSizeTraditionalFormat))
                          .arg(c.time * 1e3, 0, 'f', 3)
                          .arg(change);
        steps.push_back(step);
    }
    m_meshView->setSteps(steps);
}

bool StudioWindow::exportPlan(const QString &format, const QString &path)
{
    if (!m_planned.plan) {
        showError(tr("No plan to export: derive one first"));
        return false;
    }
    try {
        io::writeFileAtomically(path.toStdString(),
                                exports::exportPlanText(*m_document.graph, *m_planned.plan,
                                                       m_document.source.toStdString(), format.toStdString()));
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
}

std::vector<passes::NodeId> StudioWindow::nodesOf(const layout::ViewNode &node) const
{
    if (node.kind == layout::ViewNode::Kind::Coarse)
        return {node.node};
    std::vector<passes::NodeId> nodes;
    const auto &cls = m_document.classes->classes[node.cls.index()];
    for (auto i : node.instances)
        nodes.insert(nodes.end(), cls.instances[i].nodes.begin(), cls.instances[i].nodes.end());
    return nodes;
}

QColor StudioWindow::shardingColour(const layout::ViewNode &node) const
{
    if (!m_planned.plan)
        return neutralColor();
    // The node's largest weight decides: replicated grey, split rows green,
    // split columns blue, split on several axes purple.
    ir::TensorId biggest;
    for (auto n : nodesOf(node)) {
        for (auto t : m_document.coarse->node(n).parameters)
            if (!biggest.valid() || m_document.graph->tensor(t).elementCount() > m_document.graph->tensor(biggest).elementCount())
                biggest = t;
        if (node.kind == layout::ViewNode::Kind::Block && biggest.valid())
            break;
    }
    if (!biggest.valid())
        return neutralColor();
    const auto &spec = m_planned.specs[biggest.index()];
    int splits = 0, dim = -1;
    for (const auto &pl : spec.placements)
        if (pl.isShard()) {
            ++splits;
            dim = pl.dim;
        }
    if (splits == 0)
        return QColor(0xe0e0e0);
    if (splits > 1)
        return QColor(0xce93d8);
    const int rank = static_cast<int>(m_document.graph->tensor(biggest).shape.size());
    if (dim == rank - 1)
        return QColor(0x90caf9);  // columns (output features)
    if (dim == rank - 2)
        return QColor(0xa5d6a7);  // rows (input features)
    return QColor(0xffe082);
}

QColor StudioWindow::costColour(const layout::ViewNode &node) const
{
    if (!m_planned.plan || m_planned.byNode.empty())
        return neutralColor();
    double most = 0;
    for (const auto &[_, t] : m_planned.byNode)
        most = std::max(most, t.total());
    double mine = 0;
    for (auto n : nodesOf(node)) {
        auto it = m_planned.byNode.find(n.value);
        if (it != m_planned.byNode.end())
            mine += it->second.total();
    }
    if (node.kind == layout::ViewNode::Kind::Block) {
        // A block's heat is that of one instance, comparable with single nodes.
        mine /= std::max<std::size_t>(1, node.instances.size());
    }
    return heatColor(most > 0 ? mine / most : 0);
}

void StudioWindow::setColouring(Colouring colouring)
{
    m_colouring = colouring;
    if (m_colourBy && m_colourBy->currentIndex() != static_cast<int>(colouring)) {
        const QSignalBlocker blocker(m_colourBy);
        m_colourBy->setCurrentIndex(static_cast<int>(colouring));
    }
    switch (colouring) {
    case Colouring::ByClass:
        m_graph->setColouring({});
        break;
    case Colouring::BySharding:
        m_graph->setColouring([this](const layout::ViewNode &n) { return shardingColour(n); });
        break;
    case Colouring::ByCost:
        m_graph->setColouring([this](const layout::ViewNode &n) { return costColour(n); });
        break;
    case Colouring::ByDifference:
        m_graph->setColouring([this](const layout::ViewNode &n) { return differenceColour(n); });
        break;
    }
}

void StudioWindow::installInspectorSections()
{
    m_inspector->setTensorSection([this](ir::TensorId t, QTreeWidgetItem *item) {
        if (!m_planned.plan || t.index() >= m_planned.specs.size())
            return;
        const auto &p = *m_planned.plan;
        const auto &tensor = m_document.graph->tensor(t);
        const auto &spec = m_planned.specs[t.index()];
        auto *sharding = m_inspector->addRow(item, tr("Sharding"), QString::fromStdString(spec.toPlacements()));
        m_inspector->addRow(sharding, tr("PartitionSpec"),
                            QString::fromStdString(spec.toPartitionSpec(static_cast<int>(tensor.shape.size()), p.mesh)));
        for (std::size_t a = 0; a < p.mesh.axes.size() && a < spec.placements.size(); ++a)
            m_inspector->addRow(sharding, tr("axis %1 (%2)").arg(QString::fromStdString(p.mesh.axes[a].name)).arg(p.mesh.axes[a].size),
                                QString::fromStdString(spec.placements[a].toString()));
        auto source = p.specs.find(tensor.name);
        if (source != p.specs.end())
            m_inspector->addRow(sharding, tr("Chosen by"), QString::fromLatin1(plan::toString(source->second.source).data()));
        const auto local = spec.localShape(tensor.shape, p.mesh);
        m_inspector->addRow(sharding, tr("Shard shape"), QString::fromStdString(layout::shapeLabel(local)));
        m_inspector->addRow(sharding, tr("Bytes per device"),
                            QLocale().formattedDataSize(spec.localElements(tensor.shape, p.mesh) * ir::byteSize(tensor.dtype), 2,
                                                        QLocale::DataSizeTraditionalFormat));
        item->setText(1, item->text(1) + QStringLiteral("  ") + QString::fromStdString(spec.toPlacements()));
        sharding->setExpanded(true);
        if (tensor.role != ir::Role::Parameter || tensor.shape.size() < 2)
            return;
        // Why this spec and not another: every legal spec with its cost
        // delta; double-click one to pin it.
        try {
            const auto explanation = explainer()->explainTensor(tensor.name);
            auto *alternatives = m_inspector->addRow(item, tr("Alternatives"),
                                                     tr("%1 — double-click one to pin it").arg(explanation.alternatives.size()));
            for (std::size_t i = 0; i < explanation.alternatives.size(); ++i) {
                const auto &alt = explanation.alternatives[i];
                auto *row = m_inspector->addRow(alternatives,
                                                QString::fromStdString(alt.spec.toPlacements()) +
                                                    (alt.chosen ? tr("  ✓ chosen") : QString()),
                                                QString::fromStdString(alt.summary));
                row->setData(0, Qt::UserRole + 1, QString::fromStdString(tensor.name));
                row->setData(0, Qt::UserRole + 2, static_cast<int>(i));
                if (!alt.fits)
                    row->setForeground(1, QColor(0xc62828));
            }
        } catch (const std::exception &e) {
            m_inspector->addRow(item, tr("Alternatives"), QString::fromUtf8(e.what()));
        }
    });
    m_inspector->setNodeSection([this](passes::NodeId node, QTreeWidget *) {
        if (!m_planned.plan)
            return;
        const auto &p = *m_planned.plan;
        auto it = m_planned.byNode.find(node.value);
        const cost::CostTotals totals = it == m_planned.byNode.end() ? cost::CostTotals{} : it->second;
        auto *costRow = m_inspector->addRow(nullptr, tr("Cost per step"), tr("%1 ms").arg(totals.total() * 1e3, 0, 'f', 3));
        m_inspector->addRow(costRow, tr("Compute"), tr("%1 ms").arg(totals.compute * 1e3, 0, 'f', 3));
        m_inspector->addRow(costRow, tr("Communication"), tr("%1 ms").arg(totals.comm * 1e3, 0, 'f', 3));
        m_inspector->addRow(costRow, tr("FLOPs per device"), QStringLiteral("%1 G").arg(totals.flops / 1e9, 0, 'f', 2));
        m_inspector->addRow(costRow, tr("Share of step"),
                            QStringLiteral("%1 %").arg(p.cost.stepTime > 0 ? totals.total() / p.cost.stepTime * 100 : 0, 0, 'f', 2));
        std::set<std::string> opNames;
        for (auto o : m_document.coarse->node(node).ops)
            opNames.insert(m_document.graph->op(o).name);
        auto *collectives = m_inspector->addRow(nullptr, tr("Collectives"));
        int count = 0;
        for (const auto &c : p.cost.collectives) {
            if (!opNames.count(c.op))
                continue;
            ++count;
            m_inspector->addRow(collectives,
                                QStringLiteral("%1 %2 on %3").arg(QString::fromLatin1(cost::toString(c.phase).data()),
                                                                   QString::fromLatin1(sharding::toString(c.kind).data()),
                                                                   QString::fromStdString(c.axis)),
                                tr("%1, %2 ms — %3")
                                    .arg(QLocale().formattedDataSize(c.bytes, 1, QLocale::DataSizeTraditionalFormat))
                                    .arg(c.time * 1e3, 0, 'f', 3)
                                    .arg(QString::fromStdString(c.reason)));
        }
        collectives->setText(1, count ? QString::number(count) : tr("none"));
        collectives->setExpanded(true);
        costRow->setExpanded(true);
    });
}

bool StudioWindow::isBusy() const
{
    return m_loader.isRunning() || m_graph->isLayoutRunning() || m_planner.isRunning();
}

void StudioWindow::openModel(const QString &source)
{
    if (!confirmDiscardEdits())
        return;
    if (m_cancelFlag)
        m_cancelFlag->store(true);
    m_loader.waitForFinished();
    m_cancelFlag = std::make_shared<std::atomic_bool>(false);
    m_loadingSource = source;
    m_status->setText(tr("Loading %1…").arg(source));
    m_progress->show();
    m_cancel->show();
    auto flag = m_cancelFlag;
    m_loader.setFuture(QtConcurrent::run([source, flag] {
        // Errors travel back as values: a QFuture would rethrow them anywhere
        // it is waited on.
        try {
            return loadModelForView(source, flag.get());
        } catch (const std::exception &e) {
            LoadedModel failed;
            failed.source = source;
            failed.error = QString::fromUtf8(e.what());
            return failed;
        }
    }));
}

void StudioWindow::adoptDocument(const LoadedModel &model)
{
    m_recoster.reset();  // these hold the graph of the document before
    m_explainer.reset();
    m_document = model;
    m_classModel->setModel(model);
    m_classTable->resizeColumnsToContents();
    m_inspector->setModel(model);
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
    addRecent(model.source);
    m_lastQuery.clear();
    m_planned = {};
    m_costBar->clearCost();
    emit loaded();
    // A lesson brings its own plan; everything else gets one derived.
    if (m_pendingPlanFile.isEmpty())
        derivePlan();
}

void StudioWindow::showError(const QString &message)
{
    m_lastError = message;
    m_status->setText(m_document.graph ? tr("Kept %1 open after an error").arg(m_document.source) : QString());
    if (m_quietErrors) {
        std::cerr << "tapestry: " << message.toStdString() << '\n';
        return;
    }
    QMessageBox::critical(this, tr("Tapestry"), message);
}

QStringList StudioWindow::recentFiles() const
{
    return QSettings().value(QStringLiteral("recentFiles")).toStringList();
}

void StudioWindow::addRecent(const QString &source)
{
    QStringList recent = recentFiles();
    const QString entry = source.startsWith(QLatin1String("zoo:")) ? source : QFileInfo(source).absoluteFilePath();
    recent.removeAll(entry);
    recent.prepend(entry);
    while (recent.size() > kMaxRecent)
        recent.removeLast();
    QSettings().setValue(QStringLiteral("recentFiles"), recent);
    rebuildRecentMenu();
}

void StudioWindow::rebuildRecentMenu()
{
    if (!m_recentMenu)
        return;
    m_recentMenu->clear();
    const auto recent = recentFiles();
    for (const auto &entry : recent)
        m_recentMenu->addAction(entry, this, [this, entry] { openModel(entry); });
    m_recentMenu->setEnabled(!recent.isEmpty());
}

void StudioWindow::onViewNodeSelected(int viewNode)
{
    const auto &view = m_graph->viewGraph();
    if (viewNode < 0 || viewNode >= static_cast<int>(view.nodes.size())) {
        m_inspector->showNothing();
        m_graph->highlightClass(-1);
        return;
    }
    const auto &node = view.nodes[static_cast<std::size_t>(viewNode)];
    m_inspector->showViewNode(&node);
    if (node.kind == layout::ViewNode::Kind::Coarse)
        showNodeOnMesh(node.node);
    else if (!nodesOf(node).empty())
        showNodeOnMesh(nodesOf(node).front());
    if (m_syncing)
        return;
    m_syncing = true;
    const int row = node.cls.valid() ? m_classModel->rowOfClass(node.cls.value) : -1;
    if (row >= 0)
        m_classTable->selectRow(m_classProxy->mapFromSource(m_classModel->index(row, 0)).row());
    else
        m_classTable->clearSelection();
    m_graph->highlightClass(node.cls.valid() ? node.cls.value : -1);
    m_syncing = false;
    if (auto *dock = findChild<QDockWidget *>(QStringLiteral("candidates"));
        dock && !dock->isHidden() && node.cls.valid() && node.cls.value != m_candidatesClass)
        showCandidates(node.cls.value);
}

void StudioWindow::onClassActivated(const QModelIndex &index)
{
    if (m_syncing || !index.isValid())
        return;
    const int classId = index.data(ClassListModel::ClassIdRole).toInt();
    m_graph->highlightClass(classId);
    if (auto *dock = findChild<QDockWidget *>(QStringLiteral("candidates")); dock && !dock->isHidden())
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

bool StudioWindow::findNext(const QString &query)
{
    const auto found = findNodes(m_document, query);
    if (found.empty())
        return false;
    if (query != m_lastQuery) {
        m_lastQuery = query;
        m_findIndex = 0;
    } else {
        m_findIndex = (m_findIndex + 1) % found.size();
    }
    const int viewNode = m_graph->viewNodeOf(found[m_findIndex]);
    if (viewNode < 0)
        return false;
    m_graph->selectViewNode(viewNode);
    statusBar()->showMessage(tr("Match %1 of %2: %3")
                                 .arg(m_findIndex + 1)
                                 .arg(found.size())
                                 .arg(QString::fromStdString(std::string(m_document.coarse->node(found[m_findIndex]).name))),
                             6000);
    return true;
}

bool StudioWindow::selectByName(const QString &name)
{
    const auto &view = m_graph->viewGraph();
    for (std::size_t i = 0; i < view.nodes.size(); ++i) {
        const auto &v = view.nodes[i];
        const bool hit = QString::fromStdString(v.title).contains(name) ||
                         (v.kind == layout::ViewNode::Kind::Coarse &&
                          QString::fromStdString(std::string(m_document.coarse->node(v.node).name)).contains(name));
        if (hit) {
            m_graph->selectViewNode(static_cast<int>(i));
            return true;
        }
    }
    return findNext(name);
}

bool StudioWindow::expandClass(int classId)
{
    const auto &view = m_graph->viewGraph();
    for (std::size_t i = 0; i < view.nodes.size(); ++i)
        if (view.nodes[i].kind == layout::ViewNode::Kind::Block && view.nodes[i].cls.value == classId) {
            m_graph->toggleExpanded(static_cast<int>(i));
            return true;
        }
    return false;
}

bool StudioWindow::exportImage(const QString &path)
{
    auto *scene = m_graph->scene();
    const QRectF source = scene->sceneRect();
    if (path.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
        QSvgGenerator svg;
        svg.setFileName(path + QStringLiteral(".part"));
        svg.setSize(source.size().toSize());
        svg.setViewBox(QRectF(QPointF(0, 0), source.size()));
        svg.setTitle(m_document.source);
        QPainter painter;
        if (!painter.begin(&svg))
            return false;
        scene->render(&painter, QRectF(QPointF(0, 0), source.size()), source);
        painter.end();
    } else {
        // Large graphs are scaled down so the image stays a sensible size.
        const qreal scale = std::min(2.0, 8000.0 / std::max(source.width(), source.height()));
        QImage image((source.size() * scale).toSize(), QImage::Format_ARGB32);
        image.fill(Qt::white);
        QPainter painter(&image);
        painter.setRenderHint(QPainter::Antialiasing);
        scene->render(&painter, QRectF(QPointF(0, 0), source.size() * scale), source);
        painter.end();
        if (!image.save(path + QStringLiteral(".part"), "PNG"))
            return false;
    }
    QFile::remove(path);
    return QFile::rename(path + QStringLiteral(".part"), path);
}

void StudioWindow::closeEvent(QCloseEvent *event)
{
    if (!confirmDiscardEdits()) {
        event->ignore();
        return;
    }
    clearAutosave();
    QSettings settings;
    settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
    settings.setValue(QStringLiteral("window/state"), saveState());
    QMainWindow::closeEvent(event);
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

void StudioWindow::pushPlanEdit(const QString &text, std::shared_ptr<const plan::Plan> after)
{
    m_undo->push(new PlanEditCommand(text, m_planned.plan, std::move(after), [this](const auto &p) { showPlan(p); }));
}

void StudioWindow::rederiveAroundPins()
{
    if (!m_planned.plan || !m_document.graph)
        return;
    PlanRequest request = planRequest();
    request.method = QStringLiteral("tap");
    request.meshShape = shapeText(m_planned.plan->mesh);
    if (!m_planned.plan->mesh.profile.empty())
        request.profile = QString::fromStdString(m_planned.plan->mesh.profile);
    for (const auto &[name, tensor] : m_planned.plan->specs)
        if (tensor.source == plan::SpecSource::Override)
            request.pinned[name] = tensor.spec;
    m_rederiveBase = m_planned.plan;
    m_status->setText(tr("Re-deriving the plan around %n pin(s)…", nullptr, static_cast<int>(request.pinned.size())));
    startPlanner(request);
}

void StudioWindow::showCandidates(int classId)
{
    if (!m_planned.plan || !m_document.classes)
        return;
    std::size_t index = m_document.classes->classes.size();
    for (std::size_t c = 0; c < m_document.classes->classes.size(); ++c)
        if (m_document.classes->classes[c].id.value == classId)
            index = c;
    if (index == m_document.classes->classes.size())
        return;
    m_candidatesClass = classId;
    const int row = m_classModel->rowOfClass(classId);
    m_candidatesView->showBusy(row >= 0 ? m_classModel->index(row, ClassListModel::Name).data().toString()
                                        : tr("class %1").arg(classId));
    const LoadedModel model = m_document;
    const auto plan = m_planned.plan;
    m_candidateWorker.setFuture(QtConcurrent::run([model, plan, index] {
        try {
            return std::make_pair(analysis::classCandidates(*model.graph, *model.classes, *plan, index), std::string());
        } catch (const std::exception &e) {
            return std::make_pair(analysis::ClassCandidates{}, std::string(e.what()));
        }
    }));
}

bool StudioWindow::applyCandidate(int row)
{
    const auto &list = m_candidatesView->candidates().candidates;
    if (!m_planned.plan || row < 0 || row >= static_cast<int>(list.size()))
        return false;
    std::size_t index = m_document.classes->classes.size();
    for (std::size_t c = 0; c < m_document.classes->classes.size(); ++c)
        if (m_document.classes->classes[c].id.value == m_candidatesView->classId())
            index = c;
    if (index == m_document.classes->classes.size())
        return false;
    try {
        const auto &candidate = list[static_cast<std::size_t>(row)];
        auto edited = std::make_shared<plan::Plan>(
            analysis::applyCandidate(*m_document.graph, *m_document.classes, *m_planned.plan, index, candidate));
        pushPlanEdit(tr("Apply candidate %1 of class %2").arg(row + 1).arg(m_candidatesView->classId()), edited);
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
}

bool StudioWindow::hasUnsavedEdits() const
{
    return !m_undo->isClean();
}

bool StudioWindow::confirmDiscardEdits()
{
    if (!hasUnsavedEdits() || m_quietErrors)
        return true;
    const auto answer = QMessageBox::question(
        this, tr("Unsaved edits"), tr("The plan has %n edit(s) not saved to a file. Save them first?", nullptr,
                                      m_undo->index()),
        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, QMessageBox::Save);
    if (answer == QMessageBox::Cancel)
        return false;
    if (answer == QMessageBox::Save) {
        const QString path = QFileDialog::getSaveFileName(this, tr("Save plan"), QStringLiteral("plan.json"),
                                                          tr("Tapestry plan (*.json)"));
        return !path.isEmpty() && savePlan(path);
    }
    m_undo->setClean();
    clearAutosave();
    return true;
}

QString StudioWindow::autosavePath()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/autosave.plan.json");
}

// After every edit the open plan is written beside the settings (atomically,
// on a worker, so the edit shows without waiting for the file): a crash loses
// at most the last edit; the settings say which model and mesh it belongs
// to. Cleared when the plan is saved or its edits discarded.
void StudioWindow::autosave()
{
    if (!m_planned.plan || m_undo->isClean()) {
        clearAutosave();
        return;
    }
    QDir().mkpath(QFileInfo(autosavePath()).absolutePath());
    QSettings settings;
    settings.setValue(QStringLiteral("autosave/source"), m_document.source);
    settings.setValue(QStringLiteral("autosave/mesh"), shapeText(m_planned.plan->mesh));
    writeAutosave(m_planned.plan);
}

void StudioWindow::writeAutosave(std::shared_ptr<const plan::Plan> plan)
{
    if (m_autosaveWriter.isRunning()) {
        m_autosaveQueued = std::move(plan);
        return;
    }
    const std::string path = autosavePath().toStdString();
    m_autosaveWriter.setFuture(QtConcurrent::run([plan = std::move(plan), path] {
        try {
            plan::writePlanFile(path, *plan);
            return QString();
        } catch (const std::exception &e) {
            return QString::fromUtf8(e.what());
        }
    }));
}

void StudioWindow::finishAutosave() const
{
    m_autosaveWriter.waitForFinished();
    if (auto queued = std::exchange(m_autosaveQueued, nullptr)) {
        try {
            plan::writePlanFile(autosavePath().toStdString(), *queued);
        } catch (const std::exception &e) {
            m_status->setText(tr("Autosave failed: %1").arg(QString::fromUtf8(e.what())));
        }
    }
}

void StudioWindow::clearAutosave()
{
    finishAutosave();
    QSettings settings;
    settings.remove(QStringLiteral("autosave"));
    QFile::remove(autosavePath());
}

int StudioWindow::autosavedPins() const
{
    finishAutosave();
    QSettings settings;
    if (!m_planned.plan || settings.value(QStringLiteral("autosave/source")).toString() != m_document.source ||
        settings.value(QStringLiteral("autosave/mesh")).toString() !=
            shapeText(m_planned.plan->mesh))
        return 0;
    try {
        const auto saved = plan::readPlanFile(autosavePath().toStdString());
        return static_cast<int>(std::count_if(saved.specs.begin(), saved.specs.end(), [](const auto &entry) {
            return entry.second.source == plan::SpecSource::Override;
        }));
    } catch (const std::exception &) {
        return 0;
    }
}

bool StudioWindow::restoreAutosave()
{
    if (autosavedPins() == 0)
        return false;
    try {
        auto restored = std::make_shared<plan::Plan>(plan::readPlanFile(autosavePath().toStdString()));
        recoster().recost(*restored, autosavePath().toStdString());
        pushPlanEdit(tr("Restore autosaved edits"), restored);
        return true;
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return false;
    }
}

void StudioWindow::setMeshShape(const QString &shape)
{
    m_mesh->setCurrentText(shape);
    derivePlan();
}

// Right-click on a node: every legal spec of each of its weights with what
// it would cost, pinned by choosing it; the class' plan candidates.
void StudioWindow::showNodeMenu(int viewNode, const QPoint &screenPos)
{
    const auto &view = m_graph->viewGraph();
    if (!m_planned.plan || viewNode < 0 || viewNode >= static_cast<int>(view.nodes.size()))
        return;
    const auto &node = view.nodes[static_cast<std::size_t>(viewNode)];
    QMenu menu(this);
    if (node.cls.valid()) {
        auto *whole = menu.addAction(tr("Pins apply to every instance of the class"));
        whole->setCheckable(true);
        whole->setChecked(m_pinWholeClass);
        connect(whole, &QAction::toggled, this, [this](bool on) { m_pinWholeClass = on; });
        menu.addSeparator();
    }
    std::set<std::string> seen;
    try {
        for (auto n : nodesOf(node)) {
            for (auto t : m_document.coarse->node(n).parameters) {
                const auto &tensor = m_document.graph->tensor(t);
                if (tensor.shape.size() < 2 || seen.size() >= 12 || !seen.insert(tensor.name).second)
                    continue;
                const auto explanation = explainer()->explainTensor(tensor.name);
                auto *sub = menu.addMenu(tr("Pin %1").arg(QString::fromStdString(tensor.name)));
                for (const auto &alt : explanation.alternatives) {
                    QString text = QString::fromStdString(alt.summary);
                    if (!alt.fits)
                        text = tr("⚠ does not fit in memory: %1").arg(text);
                    auto *action = sub->addAction(alt.chosen ? tr("✓ %1 (the plan's)").arg(text) : text);
                    action->setEnabled(!alt.chosen);
                    connect(action, &QAction::triggered, this,
                            [this, name = tensor.name, spec = alt.spec] { pinTensor(name, spec, m_pinWholeClass); });
                }
            }
            if (node.kind == layout::ViewNode::Kind::Block && seen.size() >= 12)
                break;
        }
    } catch (const std::exception &e) {
        showError(QString::fromUtf8(e.what()));
        return;
    }
    if (seen.empty())
        menu.addAction(tr("No weights to pin here"))->setEnabled(false);
    if (node.cls.valid()) {
        menu.addSeparator();
        menu.addAction(tr("Plan candidates for this class…"), this, [this, cls = node.cls.value] {
            showPanel(QStringLiteral("candidates"));
            showCandidates(cls);
        });
    }
    menu.exec(screenPos);
}

} // namespace tapestry::views
