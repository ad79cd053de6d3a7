#include "plandocument.h"

#include "cost/pipeline.h"

#include "planeditcommand.h"

#include "analysis/explain.h"
#include "analysis/pinpropagation.h"
#include "export/exportplan.h"
#include "io/files.h"
#include "io/jsonmodel.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "search/referenceplan.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QPointer>
#include <QSettings>
#include <QStandardPaths>
#include <QUndoStack>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>

namespace tapestry::views {

namespace {

// The mesh field's text for a plan's mesh: names only where not the defaults.
QString shapeText(const sharding::Mesh &mesh)
{
    return QString::fromStdString(sharding::meshText(mesh));
}

} // namespace

PlanDocument::PlanDocument(QObject *parent) : QObject(parent), m_undo(new QUndoStack(this))
{
    qRegisterMetaType<PlannedModel>();
    qRegisterMetaType<LoadedModel>();
    connect(&m_loader, &QFutureWatcher<LoadedModel>::finished, this, [this] {
        const LoadedModel model = m_loader.result();
        if (!model.error.isEmpty()) {
            emit loadFailed(model.error, m_loadCancel && m_loadCancel->load());
            return;
        }
        m_recoster.reset();  // these hold the graph of the model before
        m_explainer.reset();
        m_model = model;
        m_planned = {};
        m_selectedClass = -1;
        m_selectedNode = {};
        emit modelLoaded();
    });
    connect(&m_planner, &QFutureWatcher<PlannedModel>::finished, this, &PlanDocument::onPlannerFinished);
    connect(&m_candidateWorker, &QFutureWatcher<std::pair<analysis::ClassCandidates, std::string>>::finished, this,
            [this] {
        const auto [result, error] = m_candidateWorker.result();
        emit candidatesReady(m_candidatesClass, result, QString::fromStdString(error));
    });
    // clear() (a new plan derived or opened) leaves an autosave alone: it is
    // dropped when edits are saved or discarded, or undone back to the plan.
    connect(m_undo, &QUndoStack::indexChanged, this, [this] {
        if (m_undo->count() > 0)
            autosave();
    });
    connect(&m_autosaveWriter, &QFutureWatcher<QString>::finished, this, [this] {
        if (const QString error = m_autosaveWriter.result(); !error.isEmpty())
            emit autosaveFailed(error);
        if (auto queued = std::exchange(m_autosaveQueued, nullptr))
            writeAutosave(std::move(queued));
    });
}

PlanDocument::~PlanDocument()
{
    finishAutosave();  // the last edit's autosave is on disk before the document goes
    m_explainer.reset();
    m_undo->disconnect(this);  // its destructor clears it: keep the autosave
    if (m_loadCancel)
        m_loadCancel->store(true);
    m_loader.waitForFinished();
    // A search still running works on its own copies of the model: it is
    // told to stop, and nothing reads its result.
    if (m_planCancel)
        m_planCancel->store(true);
}

void PlanDocument::openModel(const QString &source)
{
    if (m_loadCancel)
        m_loadCancel->store(true);
    m_loader.waitForFinished();
    m_loadCancel = std::make_shared<std::atomic_bool>(false);
    auto flag = m_loadCancel;
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

void PlanDocument::cancel()
{
    for (const auto &flag : {m_loadCancel, m_planCancel})
        if (flag)
            flag->store(true);
}

void PlanDocument::setPlanRequest(const PlanRequest &request)
{
    m_request = request;
    emit planRequestChanged(m_request);
}

bool PlanDocument::derivePlan()
{
    if (!m_model.graph)
        return false;
    m_rederiveBase = nullptr;
    startPlanner(m_request);
    return true;
}

bool PlanDocument::rederiveAroundPins()
{
    if (!m_planned.plan || !m_model.graph)
        return false;
    PlanRequest request = m_request;
    request.method = QStringLiteral("tap");
    request.meshShape = shapeText(m_planned.plan->mesh);
    if (!m_planned.plan->mesh.profile.empty())
        request.profile = QString::fromStdString(m_planned.plan->mesh.profile);
    request.pinned = analysis::pinsOf(*m_planned.plan);
    request.pinnedFrom = m_planned.plan;
    m_rederiveBase = m_planned.plan;
    startPlanner(request);
    return true;
}

void PlanDocument::startPlanner(const PlanRequest &request)
{
    // A search already running is superseded: told to stop, not waited
    // for (its captured copies keep it safe, and setFuture() drops its
    // result). Cancel stops this one.
    if (m_planCancel)
        m_planCancel->store(true);
    m_planCancel = std::make_shared<std::atomic_bool>(false);
    emit planStarted();
    const LoadedModel model = m_model;
    PlanControl control;
    control.cancel = m_planCancel;
    // Progress in steps of a thousandth; a superseded search reports no more.
    auto shown = std::make_shared<std::atomic_int>(-1);
    control.progress = [self = QPointer<PlanDocument>(this), cancel = control.cancel, shown](std::size_t done,
                                                                                            std::size_t total) {
        const int permille = total > 0 ? static_cast<int>(std::min<std::size_t>(1000, done * 1000 / total)) : 0;
        if (cancel->load() || shown->exchange(permille) == permille)
            return;
        QMetaObject::invokeMethod(self, [self, cancel, permille] {
            if (self && !cancel->load())
                emit self->planProgress(permille);
        }, Qt::QueuedConnection);
    };
    m_planner.setFuture(QtConcurrent::run(
        [model, request, control] { return tapestry::views::derivePlan(model, request, control); }));
}

void PlanDocument::onPlannerFinished()
{
    const PlannedModel planned = m_planner.result();
    emit planFinished();
    if (!planned.error.isEmpty()) {
        m_rederiveBase = nullptr;
        if (const auto &kept = m_planned.plan) {
            m_request.method = QString::fromStdString(kept->method);
            m_request.meshShape = shapeText(kept->mesh);
            if (!kept->mesh.profile.empty())
                m_request.profile = QString::fromStdString(kept->mesh.profile);
            emit planRequestChanged(m_request);
        }
        emit planFailed(planned.error, planned.cancelled);
        return;
    }
    if (auto base = std::exchange(m_rederiveBase, nullptr)) {
        if (m_planned.plan == base) {
            m_planned.searchSeconds = planned.searchSeconds;
            // Adopting the edit tells the views; they read pinnedPlanKept() then.
            m_keptPending = planned.plan->specs == base->specs;
            pushPlanEdit(m_keptPending ? tr("Re-derive around pins (nothing better found)")
                                       : tr("Re-derive around pins"),
                         planned.plan);
            m_keptPending = false;
            return;
        }
    }
    m_undo->clear();
    adoptPlan(planned, PlanChange::Derived);
}

void PlanDocument::adoptPlan(const PlannedModel &planned, PlanChange change)
{
    m_pinnedPlanKept = m_keptPending;
    m_planned = planned;
    m_explainerStale = true;
    emit costChanged(planned.plan->cost);
    emit planChanged(change);
}

void PlanDocument::pushPlanEdit(const QString &text, std::shared_ptr<const plan::Plan> after)
{
    m_undo->push(new PlanEditCommand(text, m_planned.plan, std::move(after), [this](const auto &p) {
        adoptPlan(groupPlan(m_model, *p), PlanChange::Edited);
    }));
}

plan::Recoster &PlanDocument::recoster()
{
    if (!m_recoster)
        m_recoster = std::make_unique<plan::Recoster>(*m_model.graph);
    return *m_recoster;
}

analysis::Explainer *PlanDocument::explainer()
{
    if (!m_planned.plan)
        return nullptr;
    // Made once per model, mesh and cost options; an edited plan only
    // hands it its specs and cost.
    const plan::Plan &p = *m_planned.plan;
    if (m_explainer && m_explainerStale && m_explainer->explains(p.mesh, p.costOptions))
        m_explainer->setPlan(p.mesh, p.costOptions, m_planned.specs, p.cost);
    else if (!m_explainer || m_explainerStale)
        m_explainer = std::make_unique<analysis::Explainer>(*m_model.graph, p, m_model.source.toStdString());
    m_explainerStale = false;
    return m_explainer.get();
}

bool PlanDocument::openPlanFile(const QString &path)
{
    if (!m_model.graph)
        return false;
    try {
        plan::Plan p = plan::readPlanFile(path.toStdString());
        recoster().recost(p, path.toStdString());
        m_undo->clear();
        m_planFile = path;
        adoptPlan(groupPlan(m_model, std::move(p)), PlanChange::Opened);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

bool PlanDocument::savePlan(const QString &path)
{
    try {
        plan::writePlanFile(path.toStdString(), *m_planned.plan);
        discardEdits();
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

bool PlanDocument::exportPlan(const QString &format, const QString &path)
{
    if (!m_planned.plan) {
        emit failed(tr("No plan to export: derive one first"));
        return false;
    }
    try {
        io::writeOutputFile(path.toStdString(), exports::exportPlanText(*m_model.graph, *m_planned.plan,
                                                                           m_model.source.toStdString(),
                                                                           format.toStdString()));
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

QString PlanDocument::exportProblem(const QString &format) const
{
    if (!m_planned.plan)
        return {};
    try {
        exports::exportPlanText(*m_model.graph, *m_planned.plan, m_model.source.toStdString(), format.toStdString());
        return {};
    } catch (const std::exception &e) {
        return QString::fromUtf8(e.what());
    }
}

bool PlanDocument::pinTensor(const std::string &tensor, const sharding::ShardingSpec &spec, bool wholeClass)
{
    if (!m_planned.plan)
        return false;
    try {
        const auto explanation = explainer()->explainTensor(tensor);
        const analysis::Alternative *alt = nullptr;
        for (const auto &a : explanation.alternatives)
            if (a.spec == spec)
                alt = &a;
        if (!alt)
            throw TapestryError(Error{tensor, {}, "spec " + spec.toPlacements() + " is not a legal choice here"});
        auto edited = std::make_shared<plan::Plan>(*m_planned.plan);
        analysis::pinAcrossClass(*edited, *m_model.graph, *m_model.classes, tensor, spec, alt->changes, wholeClass);
        recoster().recost(*edited, m_model.source.toStdString());
        pushPlanEdit(tr("Pin %1 to %2").arg(QString::fromStdString(tensor), QString::fromStdString(spec.toPlacements())),
                     edited);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

bool PlanDocument::setTechniques(const search::TechniqueChoices &choices)
{
    m_request.techniques = choices;
    emit planRequestChanged(m_request);
    if (!m_planned.plan)
        return false;
    try {
        auto edited = std::make_shared<plan::Plan>(
            search::chooseTechniques(*m_planned.plan, *m_model.graph, choices));
        if (edited->costOptions == m_planned.plan->costOptions)
            return true;
        recoster().recost(*edited, m_model.source.toStdString());
        pushPlanEdit(tr("Memory techniques: %1").arg(QString::fromStdString(cost::describe(edited->costOptions.techniques))),
                     edited);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

bool PlanDocument::setPipelineCuts(const std::vector<int> &cuts)
{
    if (!m_planned.plan || !m_planned.plan->pipeline) {
        emit failed(tr("The plan has no pipeline stages to cut."));
        return false;
    }
    try {
        auto edited = std::make_shared<plan::Plan>(*m_planned.plan);
        auto &pp = *edited->pipeline;
        std::vector<int> chosen = cuts;
        if (chosen.empty()) {
            // Balanced: the cuts the pipeline's cost chooses for the stages' costs.
            const auto layers = cost::modelLayers(*m_model.graph, *m_model.classes);
            cost::Pipeline p = pp.costed();
            p.cuts.clear();  // balanced
            chosen = cost::pipelineCost(*m_model.graph, layers, m_planned.plan->cost, m_planned.specs,
                                        m_planned.plan->mesh, m_planned.plan->costOptions, p)
                         .cuts;
        }
        if (chosen == pp.cuts)
            return true;
        pp.cuts = chosen;
        recoster().recost(*edited, m_model.source.toStdString());
        QStringList list;
        for (int c : chosen)
            list << QString::number(c);
        pushPlanEdit(tr("Pipeline cuts before layers %1").arg(list.join(QStringLiteral(", "))), edited);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

bool PlanDocument::hasUnsavedEdits() const
{
    return !m_undo->isClean();
}

void PlanDocument::discardEdits()
{
    m_undo->setClean();
    clearAutosave();
}

std::optional<std::size_t> PlanDocument::classIndex(int classId) const
{
    if (!m_planned.plan || !m_model.classes)
        return std::nullopt;
    const auto &classes = m_model.classes->classes;
    const auto found = std::find_if(classes.begin(), classes.end(), [classId](const auto &c) { return c.id.value == classId; });
    if (found == classes.end())
        return std::nullopt;
    return static_cast<std::size_t>(found - classes.begin());
}

bool PlanDocument::requestCandidates(int classId)
{
    const auto at = classIndex(classId);
    if (!at)
        return false;
    m_candidatesClass = classId;
    const std::size_t index = *at;
    const LoadedModel model = m_model;
    const auto plan = m_planned.plan;
    m_candidateWorker.setFuture(QtConcurrent::run([model, plan, index] {
        try {
            return std::make_pair(analysis::classCandidates(*model.graph, *model.classes, *plan, index), std::string());
        } catch (const std::exception &e) {
            return std::make_pair(analysis::ClassCandidates{}, std::string(e.what()));
        }
    }));
    return true;
}

bool PlanDocument::applyCandidate(int classId, int row, const analysis::ClassCandidate &candidate)
{
    const auto at = classIndex(classId);
    if (!at)
        return false;
    try {
        auto edited = std::make_shared<plan::Plan>(
            analysis::applyCandidate(*m_model.graph, *m_model.classes, *m_planned.plan, *at, candidate));
        pushPlanEdit(tr("Apply candidate %1 of class %2").arg(row + 1).arg(classId), edited);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

bool PlanDocument::compareWith(const QString &other)
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
            b = search::referencePlan(*m_model.graph, m_model.source.toStdString(), m_planned.plan->mesh, *method);
        }
        m_diff = analysis::diffPlans(*m_model.graph, *m_planned.plan, b, m_planned.plan->method, other.toStdString());
        m_differing.clear();
        for (const auto &c : m_diff.specs)
            m_differing.insert(c.tensor);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

void PlanDocument::setSelection(int classId, passes::NodeId node)
{
    m_selectedClass = classId;
    m_selectedNode = node;
    emit selectionChanged(classId, node);
}

QString PlanDocument::autosavePath()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/autosave.plan.json");
}

// After every edit the open plan is written beside the settings (atomically,
// on a worker, so the edit shows without waiting for the file): a crash loses
// at most the last edit; the settings say which model and mesh it belongs
// to. Cleared when the plan is saved or its edits discarded.
void PlanDocument::autosave()
{
    if (!m_planned.plan || m_undo->isClean()) {
        clearAutosave();
        return;
    }
    QDir().mkpath(QFileInfo(autosavePath()).absolutePath());
    QSettings settings;
    settings.setValue(QStringLiteral("autosave/source"), m_model.source);
    settings.setValue(QStringLiteral("autosave/mesh"), shapeText(m_planned.plan->mesh));
    writeAutosave(m_planned.plan);
}

void PlanDocument::writeAutosave(std::shared_ptr<const plan::Plan> plan)
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

void PlanDocument::finishAutosave()
{
    m_autosaveWriter.waitForFinished();
    if (auto queued = std::exchange(m_autosaveQueued, nullptr)) {
        try {
            plan::writePlanFile(autosavePath().toStdString(), *queued);
        } catch (const std::exception &e) {
            emit autosaveFailed(QString::fromUtf8(e.what()));
        }
    }
}

void PlanDocument::clearAutosave()
{
    finishAutosave();
    QSettings settings;
    settings.remove(QStringLiteral("autosave"));
    QFile::remove(autosavePath());
}

int PlanDocument::autosavedPins()
{
    finishAutosave();
    QSettings settings;
    if (!m_planned.plan || settings.value(QStringLiteral("autosave/source")).toString() != m_model.source ||
        settings.value(QStringLiteral("autosave/mesh")).toString() != shapeText(m_planned.plan->mesh))
        return 0;
    try {
        return static_cast<int>(analysis::pinsOf(plan::readPlanFile(autosavePath().toStdString())).size());
    } catch (const std::exception &) {
        return 0;
    }
}

bool PlanDocument::restoreAutosave()
{
    if (autosavedPins() == 0)
        return false;
    try {
        auto restored = std::make_shared<plan::Plan>(plan::readPlanFile(autosavePath().toStdString()));
        recoster().recost(*restored, autosavePath().toStdString());
        pushPlanEdit(tr("Restore autosaved edits"), restored);
        return true;
    } catch (const std::exception &e) {
        emit failed(QString::fromUtf8(e.what()));
        return false;
    }
}

} // namespace tapestry::views
