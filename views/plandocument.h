#pragma once

#include "loadedmodel.h"
#include "plannedmodel.h"

#include "analysis/candidates.h"
#include "analysis/plandiff.h"

#include <QFutureWatcher>
#include <QObject>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>

class QUndoStack;

namespace tapestry::analysis {
class Explainer;
}

namespace tapestry::views {

// The open model and its plan, without widgets: model, classes, plan, pins,
// mesh and profile (the plan request), undo stack, re-coster, explainer and
// autosave. Loads and searches run on workers; every change comes back as a
// typed signal, so the studio's docks (and tests) only follow it. Errors are
// raised as `failed` with one line naming the input; the document keeps
// what it had.
class PlanDocument : public QObject {
    Q_OBJECT
public:
    // Why the plan changed: a derivation, a plan file, or an edit (a pin, a
    // candidate applied, undo, redo, a re-derivation around pins).
    enum class PlanChange { Derived, Opened, Edited };
    Q_ENUM(PlanChange)

    explicit PlanDocument(QObject *parent = nullptr);
    ~PlanDocument() override;

    // Starts loading on a worker; `modelLoaded` or `loadFailed` follows. The
    // open model stays until the new one has loaded.
    void openModel(const QString &source);
    const LoadedModel &model() const { return m_model; }
    bool isLoading() const { return m_loader.isRunning(); }
    bool isPlanning() const { return m_planner.isRunning(); }
    // Stops the load and the plan search running, if any.
    void cancel();

    // The method, mesh and profile the next derivation uses.
    void setPlanRequest(const PlanRequest &request);
    const PlanRequest &planRequest() const { return m_request; }
    // Derives the plan of the request on a worker, superseding the search
    // running; false when no model is open. `planChanged` (Derived) or
    // `planFailed` follows.
    bool derivePlan();
    // Re-derives with tap around every pin of the plan (the specs marked
    // override), on the plan's mesh; undoable.
    bool rederiveAroundPins();
    // Whether the plan shown came from re-deriving around pins and the
    // search found nothing better than the plan the pins were on, which
    // was kept (search::keepPinnedPlanIfBetter).
    bool pinnedPlanKept() const { return m_pinnedPlanKept; }
    const PlannedModel &planned() const { return m_planned; }
    // Reads a tapestry.plan file for the open model (lessons, hand-written
    // plans); false, with `failed`, when it does not fit.
    bool openPlanFile(const QString &path);
    // The file the open plan was last read from (openPlanFile).
    QString planFile() const { return m_planFile; }
    bool savePlan(const QString &path);
    // The plan for a training framework ("torch", "jax", "megatron").
    bool exportPlan(const QString &format, const QString &path);
    // Why the plan cannot be exported for `format` ("torch", "jax",
    // "megatron"): the export's one-line error, naming the first tensor that
    // breaks it; empty when it can (or there is no plan).
    QString exportProblem(const QString &format) const;

    // Pins `spec` on a tensor (marked override) and re-costs; with
    // `wholeClass`, in every instance of its class. Undoable. False, with
    // `failed`, when the spec is not a legal choice for the tensor.
    bool pinTensor(const std::string &tensor, const sharding::ShardingSpec &spec, bool wholeClass);
    // Sets the memory techniques of the plan: those `choices` fix as they
    // say, the others chosen anew for the plan's specs; re-costs, undoable.
    // The request keeps `choices` for the next derivation.
    bool setTechniques(const search::TechniqueChoices &choices);
    // Moves the pipeline's stage boundaries (plan::PlanPipeline::cuts; empty:
    // balanced by the stages' costs) and costs the pipeline again; undoable.
    // False, with `failed`, without a pipelined plan or for cuts that do
    // not fit its stages and layers.
    bool setPipelineCuts(const std::vector<int> &cuts);
    void setPinWholeClass(bool whole) { m_pinWholeClass = whole; }
    bool pinWholeClass() const { return m_pinWholeClass; }
    QUndoStack *undoStack() const { return m_undo; }
    bool hasUnsavedEdits() const;
    // Marks the edits as kept (saved or discarded) and drops the autosave.
    void discardEdits();

    // Costs the plan candidates of class `classId` on a worker;
    // `candidatesReady` follows. False when there is no plan or no such class.
    bool requestCandidates(int classId);
    // Applies a candidate of class `classId` (row `row` of its list) as pins;
    // undoable.
    bool applyCandidate(int classId, int row, const analysis::ClassCandidate &candidate);

    // Compares the plan with "megatron", "dp", "replicate" on its mesh, or a
    // plan file; the diff and the tensors that differ stay until the next.
    bool compareWith(const QString &other);
    const analysis::PlanDiff &diff() const { return m_diff; }
    const std::set<std::string> &differingTensors() const { return m_differing; }

    // Why each spec is what it is; made once per model, mesh and cost
    // options. Null without a plan.
    analysis::Explainer *explainer();

    // What the user looks at: a class (-1: none) and a coarse node (invalid:
    // none).
    void setSelection(int classId, passes::NodeId node);
    int selectedClass() const { return m_selectedClass; }
    passes::NodeId selectedNode() const { return m_selectedNode; }

    // The autosaved plan of a previous session for the open model and mesh:
    // how many pins it holds, and applying it as one undoable edit.
    int autosavedPins();
    bool restoreAutosave();
    static QString autosavePath();
    void clearAutosave();

signals:
    void modelLoaded();
    void loadFailed(const QString &message, bool cancelled);
    void planStarted();
    void planProgress(int permille);
    // The search ended; its plan (planChanged) or its error (planFailed) follows.
    void planFinished();
    // Sent before planChanged, so what shows the cost is current when the
    // plan's other views follow.
    void costChanged(const cost::PlanCost &cost);
    void planChanged(tapestry::views::PlanDocument::PlanChange change);
    // The plan shown (and its edits) stays; the request is set back to it.
    void planFailed(const QString &message, bool cancelled);
    void planRequestChanged(const tapestry::views::PlanRequest &request);
    void selectionChanged(int classId, tapestry::passes::NodeId node);
    void candidatesReady(int classId, const tapestry::analysis::ClassCandidates &candidates, const QString &error);
    void autosaveFailed(const QString &message);
    void failed(const QString &message);

private:
    // The position in the model's classes of class `classId`; nothing
    // without a plan or such a class.
    std::optional<std::size_t> classIndex(int classId) const;

    void startPlanner(const PlanRequest &request);
    void onPlannerFinished();
    void adoptPlan(const PlannedModel &planned, PlanChange change);
    void pushPlanEdit(const QString &text, std::shared_ptr<const plan::Plan> after);
    plan::Recoster &recoster();
    void autosave();
    void writeAutosave(std::shared_ptr<const plan::Plan> plan);
    void finishAutosave();

    LoadedModel m_model;
    PlannedModel m_planned;
    PlanRequest m_request;
    QUndoStack *m_undo;
    // Both hold the model's graph: made for each model, reset before it goes.
    std::unique_ptr<plan::Recoster> m_recoster;
    std::unique_ptr<analysis::Explainer> m_explainer;
    bool m_explainerStale = false;  // made for a plan before the current one
    bool m_pinWholeClass = true;
    int m_selectedClass = -1;
    passes::NodeId m_selectedNode;
    analysis::PlanDiff m_diff;
    std::set<std::string> m_differing;

    QFutureWatcher<LoadedModel> m_loader;
    std::shared_ptr<std::atomic_bool> m_loadCancel;
    QFutureWatcher<PlannedModel> m_planner;
    std::shared_ptr<std::atomic_bool> m_planCancel;  // the running plan search's
    // Set while the planner re-derives around pins: the plan it edits.
    std::shared_ptr<const plan::Plan> m_rederiveBase;
    bool m_pinnedPlanKept = false;
    bool m_keptPending = false;  // the re-derived plan being adopted is the pinned one
    // The candidates, or why there are none, for the class last asked for.
    QFutureWatcher<std::pair<analysis::ClassCandidates, std::string>> m_candidateWorker;
    int m_candidatesClass = -1;

    // The autosave is written on a worker (a large plan's file takes tens
    // of milliseconds, every edit): one write at a time, the newest plan
    // queued behind it. Whatever reads or removes the file waits for both.
    QFutureWatcher<QString> m_autosaveWriter;
    std::shared_ptr<const plan::Plan> m_autosaveQueued;
    QString m_planFile;
};

} // namespace tapestry::views
