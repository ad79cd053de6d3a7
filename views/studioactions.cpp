#include "studioactions.h"

#include "findbar.h"
#include "graphpanel.h"
#include "graphview.h"
#include "plandocument.h"
#include "studiowindow.h"
#include "zoodialog.h"

#include "cost/activationmemory.h"
#include "sharding/meshprofile.h"

#include <QApplication>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenu>
#include <QMenuBar>
#include <QSettings>
#include <QSpinBox>
#include <QUrlQuery>
#include <QActionGroup>
#include <QToolBar>
#include <QToolButton>
#include <QUndoStack>

#include <tuple>

namespace tapestry::views {

namespace {
constexpr int kMaxRecent = 10;
} // namespace

StudioActions::StudioActions(StudioWindow *window, PlanDocument *document, FindBar *find)
    : QObject(window), m_window(window), m_document(document), m_find(find)
{
    createFileMenu();
    createEditMenu();
    auto *lessons = m_window->menuBar()->addMenu(tr("&Lessons"));
    lessons->addAction(tr("1. Y = X·B·C: column split, then row split (one all-reduce)"), m_window,
                       [this] { m_window->openLesson(1); });
    lessons->addAction(tr("2. The 2-layer MLP fully sharded on a 4x2 mesh (2D)"), m_window,
                       [this] { m_window->openLesson(2); });
    lessons->addAction(tr("3. Your own plan: the selected node's collectives"), m_window,
                       [this] { m_window->openLesson(3); });
    createViewMenu();
    createPlanMenu();
    connect(m_document, &PlanDocument::planRequestChanged, this, &StudioActions::showRequest);
}

void StudioActions::createFileMenu()
{
    auto *file = m_window->menuBar()->addMenu(tr("&File"));
    m_open = file->addAction(tr("&Open…"), m_window, [this] {
        const QString path = QFileDialog::getOpenFileName(
            m_window, tr("Open model"), QString(),
            tr("Models (*.onnx *.json);;ONNX (*.onnx);;Tapestry model or config.json (*.json);;All files (*)"));
        if (!path.isEmpty())
            m_window->openModel(path);
    });
    m_open->setShortcut(QKeySequence::Open);
    m_zoo = file->addAction(tr("Model &zoo…"), m_window, [this] {
        ZooDialog dialog(m_window);
        if (dialog.exec() == QDialog::Accepted && !dialog.spec().isEmpty())
            m_window->openModel(dialog.spec());
    });
    m_zoo->setShortcut(QKeySequence(tr("Ctrl+Shift+O")));
    m_recentMenu = file->addMenu(tr("Open &recent"));
    rebuildRecentMenu();
    file->addSeparator();
    m_exportImage = file->addAction(tr("Export &image…"), m_window, [this] {
        const QString path = QFileDialog::getSaveFileName(m_window, tr("Export graph image"), QStringLiteral("graph.png"),
                                                          tr("PNG image (*.png);;SVG drawing (*.svg)"));
        QString error;
        if (!path.isEmpty() && !m_window->exportImage(path, &error))
            m_window->showError(error.isEmpty() ? tr("%1: cannot draw the image").arg(path) : error);
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), qApp, &QApplication::closeAllWindows)->setShortcut(QKeySequence::Quit);
}

void StudioActions::createEditMenu()
{
    auto *edit = m_window->menuBar()->addMenu(tr("&Edit"));
    auto *undoStack = m_document->undoStack();
    auto *undo = undoStack->createUndoAction(m_window, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    auto *redo = undoStack->createRedoAction(m_window, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    edit->addAction(undo);
    edit->addAction(redo);
    edit->addAction(tr("Reset to &derived plan"), m_window, [undoStack] { undoStack->setIndex(0); });
    auto *wholeClass = edit->addAction(tr("Pins apply to the &whole class"));
    wholeClass->setCheckable(true);
    wholeClass->setChecked(m_document->pinWholeClass());
    wholeClass->setToolTip(tr("Unchecked: a pin applies to the instance it was made on only"));
    connect(wholeClass, &QAction::toggled, m_document, &PlanDocument::setPinWholeClass);
    edit->addSeparator();
    auto *find = edit->addAction(tr("&Find…"), m_find, &FindBar::focusQuery);
    find->setShortcut(QKeySequence::Find);
}

void StudioActions::createViewMenu()
{
    auto *view = m_window->menuBar()->addMenu(tr("&View"));
    for (auto *dock : m_window->findChildren<QDockWidget *>())
        view->addAction(dock->toggleViewAction());
    view->addSeparator();
    auto *graph = m_window->graphPanel()->view();
    m_fit = view->addAction(tr("&Fit to window"), graph, &GraphView::fitAll);
    m_fit->setShortcut(QKeySequence(tr("Ctrl+0")));
    view->addAction(tr("Zoom &in"), m_window, [graph] { graph->zoomBy(1.25); })->setShortcut(QKeySequence::ZoomIn);
    view->addAction(tr("Zoom &out"), m_window, [graph] { graph->zoomBy(0.8); })->setShortcut(QKeySequence::ZoomOut);
    // The minimap, kept shown or hidden between runs.
    m_minimap = view->addAction(tr("&Minimap"));
    m_minimap->setCheckable(true);
    m_minimap->setShortcut(QKeySequence(tr("Ctrl+M")));
    const bool minimap = QSettings().value(QStringLiteral("view/minimap"), true).toBool();
    m_minimap->setChecked(minimap);
    m_window->graphPanel()->setMinimapVisible(minimap);
    connect(m_minimap, &QAction::toggled, m_window, [this](bool on) {
        m_window->graphPanel()->setMinimapVisible(on);
        QSettings().setValue(QStringLiteral("view/minimap"), on);
    });

    auto *toolbar = m_window->addToolBar(tr("Main"));
    toolbar->setObjectName(QStringLiteral("main"));
    toolbar->addAction(m_open);
    toolbar->addAction(m_zoo);
    toolbar->addSeparator();
    toolbar->addAction(m_fit);
    toolbar->addAction(m_exportImage);
}

void StudioActions::createPlanMenu()
{
    auto *planBar = m_window->addToolBar(tr("Plan"));
    planBar->setObjectName(QStringLiteral("plan"));
    m_method = new QComboBox(planBar);
    m_method->addItems({QStringLiteral("tap"), QStringLiteral("megatron"), QStringLiteral("dp"), QStringLiteral("replicate")});
    m_method->setToolTip(tr("How the plan is made: TAP search, or a reference plan"));
    m_method->setSizeAdjustPolicy(QComboBox::AdjustToContents);  // a plan file's name shows whole
    m_mesh = new QComboBox(planBar);
    m_mesh->setEditable(true);
    m_mesh->addItems({QStringLiteral("8"), QStringLiteral("4"), QStringLiteral("2"), QStringLiteral("2x8"),
                      QStringLiteral("4x2"), QStringLiteral("8x8")});
    m_mesh->setToolTip(tr("Device mesh shape: 8 devices on one axis, 2x8 (data × model), or any shape with its "
                          "axes named: 2x2x2 (dp, tp, sp)"));
    // Wide enough for a mesh with its axis names, "2x2x2 (dp, tp, sp)".
    connect(m_mesh, &QComboBox::editTextChanged, this, [this](const QString &text) {
        m_mesh->setMinimumWidth(std::max(m_mesh->sizeHint().width(), m_window->fontMetrics().horizontalAdvance(text) + 40));
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
    auto *derive = planBar->addAction(tr("Derive plan"), m_window, &StudioWindow::derivePlan);
    derive->setShortcut(QKeySequence(tr("Ctrl+D")));
    auto *planMenu = m_window->menuBar()->addMenu(tr("&Plan"));
    createMemoryMenu(planBar, planMenu);
    planBar->addSeparator();
    planBar->addWidget(new QLabel(tr(" Colour by "), planBar));
    m_colourBy = new QComboBox(planBar);
    m_colourBy->addItems({tr("class"), tr("sharding"), tr("cost"), tr("difference")});
    planBar->addWidget(m_colourBy);
    connect(m_colourBy, &QComboBox::currentIndexChanged, m_window,
            [this](int i) { m_window->setColouring(static_cast<StudioWindow::Colouring>(i)); });

    planMenu->addAction(derive);
    auto *rederive = planMenu->addAction(tr("&Re-derive around pins"), m_window, &StudioWindow::rederiveAroundPins);
    rederive->setShortcut(QKeySequence(tr("Ctrl+Shift+D")));
    planMenu->addAction(tr("Plan &candidates for the selected class"), m_window,
                        [this] { m_window->showPanel(QStringLiteral("candidates")); });
    for (QComboBox *box : {m_method, m_mesh, m_profile})
        connect(box, &QComboBox::activated, m_window, [this] { m_window->derivePlan(); });
    auto *exportMenu = planMenu->addMenu(tr("&Export for"));
    exportMenu->setToolTipsVisible(true);
    std::vector<std::pair<QAction *, QString>> exportActions;
    for (const auto &[format, label, suffix] :
         {std::tuple{"torch", "PyTorch (parallelize module)…", "py"}, std::tuple{"jax", "JAX (mesh and shardings module)…", "py"},
          std::tuple{"megatron", "Megatron-LM (arguments)…", "txt"}}) {
        auto *action = exportMenu->addAction(tr(label), m_window, [this, format = QString::fromLatin1(format), suffix = QString::fromLatin1(suffix)] {
            const QString path = QFileDialog::getSaveFileName(m_window, tr("Export plan"), QStringLiteral("plan-%1.%2").arg(format, suffix));
            if (!path.isEmpty())
                m_window->exportPlan(format, path);
        });
        action->setData(tr(label));
        exportActions.emplace_back(action, QString::fromLatin1(format));
    }
    // Which targets can express the plan, asked when the menu opens: one
    // that cannot is disabled and names the first tensor that breaks it.
    connect(exportMenu, &QMenu::aboutToShow, m_window, [this, exportActions] {
        for (const auto &[action, format] : exportActions) {
            const QString problem = m_document->exportProblem(format);
            const QString label = action->data().toString();
            action->setEnabled(problem.isEmpty());
            action->setText(problem.isEmpty() ? label : tr("%1 cannot express this plan").arg(label.chopped(1)));
            action->setToolTip(problem.isEmpty() ? tr("Every tensor of the plan has a form there") : problem);
            action->setStatusTip(action->toolTip());
        }
    });
    auto *compare = planMenu->addMenu(tr("&Compare with"));
    for (const char *method : {"megatron", "dp", "replicate"})
        compare->addAction(QString::fromLatin1(method), m_window,
                           [this, method] { m_window->compareWith(QString::fromLatin1(method)); });
    compare->addAction(tr("Plan file…"), m_window, [this] {
        const QString path = QFileDialog::getOpenFileName(m_window, tr("Compare with plan"), QString(), tr("Tapestry plan (*.json)"));
        if (!path.isEmpty())
            m_window->compareWith(path);
    });
    auto *openPlan = planMenu->addAction(tr("&Open plan JSON…"), m_window, [this] {
        const QString path = QFileDialog::getOpenFileName(m_window, tr("Open plan"), QString(), tr("Tapestry plan (*.json)"));
        if (!path.isEmpty())
            m_window->openPlanFile(path);
    });
    openPlan->setShortcut(QKeySequence(tr("Ctrl+Shift+P")));
    auto *savePlan = planMenu->addAction(tr("&Save plan JSON…"), m_window, [this] {
        if (!m_document->planned().plan) {
            m_window->showError(tr("No plan to save: derive one first"));
            return;
        }
        const QString path = QFileDialog::getSaveFileName(m_window, tr("Save plan"), QStringLiteral("plan.json"),
                                                          tr("Tapestry plan (*.json)"));
        if (!path.isEmpty())
            m_window->savePlan(path);
    });
    savePlan->setShortcut(QKeySequence::Save);
}

void StudioActions::createMemoryMenu(QToolBar *planBar, QMenu *planMenu)
{
    auto *menu = new QMenu(tr("&Memory techniques"), m_window);
    auto group = [&](const QString &title, const QString &tip, const std::vector<std::pair<QString, QVariant>> &values) {
        auto *sub = menu->addMenu(title);
        sub->setToolTipsVisible(true);
        auto *g = new QActionGroup(sub);
        g->setExclusive(true);
        auto *automatic = sub->addAction(tr("auto (chosen with the plan)"));
        automatic->setCheckable(true);
        automatic->setChecked(true);
        automatic->setToolTip(tip);
        g->addAction(automatic);
        for (const auto &[label, value] : values) {
            auto *a = sub->addAction(label);
            a->setCheckable(true);
            a->setData(value);
            g->addAction(a);
        }
        connect(g, &QActionGroup::triggered, this, [this] { m_document->setTechniques(techniqueChoices()); });
        return g;
    };
    m_flash = group(tr("&Flash attention"), tr("On where the model has an attention core"),
                    {{tr("on: no s×s scores kept"), true}, {tr("off"), false}});
    m_recompute = group(tr("&Recomputation"), tr("None, or full where it is needed to fit"),
                        {{tr("none"), 0}, {tr("selective: attention scores again in backward"), 1},
                         {tr("full: each layer's forward again in backward"), 2}});
    m_zero = group(tr("&ZeRO stage"), tr("The stage that fits at the least step time"),
                   {{tr("0: states whole on every replica"), 0}, {tr("1: optimizer state sharded"), 1},
                    {tr("2: gradients sharded too"), 2}, {tr("3 (FSDP): parameters sharded too"), 3}});
    std::vector<std::pair<QString, QVariant>> micro;
    for (int m : {1, 2, 4, 8, 16, 32})
        micro.push_back({QString::number(m), m});
    m_micro = group(tr("Micro-&batches per step"), tr("The fewest that fit; the model's batch is the global batch"), micro);
    m_offload = group(tr("&Optimizer offload"), tr("Only where nothing else fits: the host's update is slow"),
                      {{tr("on: optimizer state and update on the host"), true}, {tr("off"), false}});
    planMenu->addMenu(menu);
    // The global batch of one step: a zoo preset opened again with it.
    m_batch = new QSpinBox(planBar);
    m_batch->setRange(1, 1 << 20);
    m_batch->setKeyboardTracking(false);
    m_batch->setToolTip(tr("Global batch of one optimizer step (micro-batches × data parallel × micro-batch size); "
                           "a zoo model opens again with it, other models keep their batch "
                           "(tapestry-cli --batch)"));
    planBar->addWidget(new QLabel(tr(" Batch "), planBar));
    planBar->addWidget(m_batch);
    connect(m_batch, &QSpinBox::valueChanged, this, [this](int batch) {
        const QString source = m_document->model().source;
        if (!source.startsWith(QLatin1String("zoo:")) || !m_document->model().graph ||
            batch == search::modelBatch(*m_document->model().graph))
            return;
        // zoo:NAME?knob=v&...: the batch knob replaced.
        const qsizetype q = source.indexOf(QLatin1Char('?'));
        QUrlQuery query(q < 0 ? QString() : source.mid(q + 1));
        query.removeAllQueryItems(QStringLiteral("batch"));
        query.addQueryItem(QStringLiteral("batch"), QString::number(batch));
        m_window->openModel((q < 0 ? source : source.left(q)) + QLatin1Char('?') + query.toString());
    });
    connect(m_document, &PlanDocument::modelLoaded, this, &StudioActions::showBatch);
    connect(m_document, &PlanDocument::modelLoaded, this, &StudioActions::showLayerKinds);
    m_memory = new QToolButton(planBar);
    m_memory->setObjectName(QStringLiteral("memoryTechniques"));
    m_memory->setMenu(menu);
    m_memory->setPopupMode(QToolButton::InstantPopup);
    m_memory->setToolTip(tr("Memory techniques of the plan: flash attention, recomputation, ZeRO, micro-batches.\n"
                            "Each is chosen with the plan unless fixed here; a change re-costs the plan (undoable)."));
    planBar->addWidget(m_memory);
    connect(m_document, &PlanDocument::planChanged, this, &StudioActions::showTechniques);
    connect(m_document, &PlanDocument::planChanged, this, &StudioActions::showPlanSource);
    showTechniques();
}

search::TechniqueChoices StudioActions::techniqueChoices() const
{
    search::TechniqueChoices c;
    auto value = [](QActionGroup *g) {
        const QAction *a = g->checkedAction();
        return a ? a->data() : QVariant();
    };
    if (const auto v = value(m_flash); v.isValid())
        c.flashAttention = v.toBool();
    if (const auto v = value(m_recompute); v.typeId() == QMetaType::QString) {
        c.recompute = cost::Recompute::None;  // full for one kind of layer only
        c.recomputeLayers[v.toString().toStdString()] = cost::Recompute::Full;
    } else if (v.isValid()) {
        c.recompute = static_cast<cost::Recompute>(v.toInt());
    }
    if (const auto v = value(m_zero); v.isValid())
        c.zeroStage = v.toInt();
    if (const auto v = value(m_micro); v.isValid())
        c.microBatches = v.toInt();
    if (const auto v = value(m_offload); v.isValid())
        c.offloadOptimizer = v.toBool();
    return c;
}

void StudioActions::showLayerKinds()
{
    // Entries whose data is the kind of layer (a string) are this model's.
    for (QAction *a : m_recompute->actions())
        if (a->data().typeId() == QMetaType::QString) {
            m_recompute->removeAction(a);
            a->deleteLater();
        }
    const auto &model = m_document->model();
    if (!model.graph)
        return;
    const auto kinds = cost::attentionLayerKinds(*model.graph);
    if (kinds.size() < 2)
        return;
    auto *menu = qobject_cast<QMenu *>(m_recompute->parent());
    for (const auto &kind : kinds) {
        auto *a = menu->addAction(tr("full: %1 only").arg(QString::fromStdString(kind)));
        a->setCheckable(true);
        a->setData(QString::fromStdString(kind));
        a->setToolTip(tr("That kind of layer (a class of repeated layers) recomputed in full, the others kept"));
        m_recompute->addAction(a);
    }
}

void StudioActions::showBatch()
{
    const auto &model = m_document->model();
    const std::int64_t batch = model.graph ? search::modelBatch(*model.graph) : 0;
    const QSignalBlocker blocker(m_batch);
    m_batch->setValue(static_cast<int>(std::max<std::int64_t>(1, batch)));
    m_batch->setEnabled(batch > 0 && model.source.startsWith(QLatin1String("zoo:")));
}

void StudioActions::showTechniques()
{
    const auto &planned = m_document->planned();
    if (!planned.plan) {
        m_memory->setText(tr("Memory: auto"));
        return;
    }
    // Short on the toolbar, in full in the tooltip.
    const cost::Techniques &t = planned.plan->costOptions.techniques;
    QStringList parts;
    if (t.flashAttention)
        parts << tr("flash");
    if (t.recompute != cost::Recompute::None || !t.recomputeLayers.empty())
        parts << (t.recompute == cost::Recompute::Selective ? tr("sel. recompute") : tr("recompute"));
    if (t.zeroStage > 0)
        parts << QStringLiteral("ZeRO-%1").arg(t.zeroStage);
    if (t.microBatches > 1)
        parts << tr("%1 micro").arg(t.microBatches);
    if (t.offloadOptimizer)
        parts << tr("offload");
    m_memory->setText(tr("Memory: %1").arg(parts.isEmpty() ? tr("none") : parts.join(QStringLiteral(", "))));
    m_memory->setToolTip(tr("Memory techniques of the plan: %1.\nEach is chosen with the plan unless fixed here; a "
                            "change re-costs the plan (undoable).")
                             .arg(QString::fromStdString(cost::describe(t))));
}

void StudioActions::showPlanSource(PlanDocument::PlanChange change)
{
    // A plan opened from a file was made by no method of the list: the
    // field says where it came from ("file: mlp-2d-4x2.json") until a plan
    // is derived again, which takes the method chosen before.
    const int fileItem = m_method->findData(QStringLiteral("file"));
    if (change == PlanDocument::PlanChange::Opened) {
        const QString label = tr("file: %1").arg(QFileInfo(m_document->planFile()).fileName());
        if (fileItem < 0) {
            m_derivedMethod = m_method->currentText();
            m_method->addItem(label, QStringLiteral("file"));
        } else {
            m_method->setItemText(fileItem, label);
        }
        m_method->setCurrentIndex(m_method->findData(QStringLiteral("file")));
        m_method->setToolTip(tr("This plan was opened from %1; choose a method to derive one").arg(m_document->planFile()));
    } else if (change == PlanDocument::PlanChange::Derived && fileItem >= 0) {
        m_method->removeItem(fileItem);
        m_method->setToolTip(tr("How the plan is made: TAP search, or a reference plan"));
    }
}

PlanRequest StudioActions::request() const
{
    const QString method = m_method->currentData().toString() == QStringLiteral("file") ? m_derivedMethod
                                                                                          : m_method->currentText();
    PlanRequest r{method, m_mesh->currentText().trimmed(), m_profile->currentText(), {}};
    r.techniques = techniqueChoices();
    return r;
}

void StudioActions::showRequest(const PlanRequest &request)
{
    m_method->setCurrentText(request.method);
    m_mesh->setCurrentText(request.meshShape);
    m_profile->setCurrentText(request.profile);
    auto check = [](QActionGroup *g, const std::optional<QVariant> &value) {
        for (QAction *a : g->actions())
            if (value ? a->data() == *value : !a->data().isValid()) {
                const QSignalBlocker blocker(g);
                a->setChecked(true);
                return;
            }
    };
    const auto &t = request.techniques;
    check(m_flash, t.flashAttention ? std::optional<QVariant>(*t.flashAttention) : std::nullopt);
    if (t.recompute && t.recomputeLayers.size() == 1 && t.recomputeLayers.begin()->second == cost::Recompute::Full)
        check(m_recompute, QVariant(QString::fromStdString(t.recomputeLayers.begin()->first)));
    else
        check(m_recompute, t.recompute ? std::optional<QVariant>(static_cast<int>(*t.recompute)) : std::nullopt);
    check(m_zero, t.zeroStage ? std::optional<QVariant>(*t.zeroStage) : std::nullopt);
    check(m_micro, t.microBatches ? std::optional<QVariant>(*t.microBatches) : std::nullopt);
    check(m_offload, t.offloadOptimizer ? std::optional<QVariant>(*t.offloadOptimizer) : std::nullopt);
}

void StudioActions::showColouring(int colouring)
{
    if (m_colourBy->currentIndex() != colouring) {
        const QSignalBlocker blocker(m_colourBy);
        m_colourBy->setCurrentIndex(colouring);
    }
}

void StudioActions::selectProfile(const QString &name)
{
    if (m_profile->findText(name) < 0)
        m_profile->addItem(name);
    m_profile->setCurrentText(name);
}

QStringList StudioActions::recentFiles() const
{
    return QSettings().value(QStringLiteral("recentFiles")).toStringList();
}

void StudioActions::addRecent(const QString &source)
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

void StudioActions::rebuildRecentMenu()
{
    m_recentMenu->clear();
    const auto recent = recentFiles();
    for (const auto &entry : recent)
        m_recentMenu->addAction(entry, m_window, [this, entry] { m_window->openModel(entry); });
    m_recentMenu->setEnabled(!recent.isEmpty());
}

} // namespace tapestry::views
