#pragma once

#include "layout/viewgraph.h"
#include "loadedmodel.h"
#include "plandocument.h"
#include "plannedmodel.h"

#include <QMainWindow>

#include <set>
#include <string>

class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;
class QUndoStack;

namespace tapestry::views {

class CandidatesDock;
class CandidatesView;
class ClassListModel;
class ClassesDock;
class CompareView;
class CostChartsView;
class CostSummaryBar;
class FindBar;
class GraphPanel;
class InspectorDock;
class InspectorView;
class LessonDock;
class PipelineDock;
class MeshDock;
class MeshView;
struct LessonStep;
class StudioActions;

// The studio's main window: the graph view with its find bar and cost bar
// in the middle, the docks around it, all following one PlanDocument. The
// window wires them together and talks to the user (status, dialogs); the
// plan logic is the document's and core's.
class StudioWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit StudioWindow(QWidget *parent = nullptr);
    ~StudioWindow() override;

    PlanDocument *planDocument() const { return m_doc; }

    // Starts loading; `loaded` or `loadFailed` follows. The open document stays
    // until the new one has loaded.
    void openModel(const QString &source);
    bool isBusy() const;

    const LoadedModel &document() const { return m_doc->model(); }
    GraphPanel *graphPanel() const { return m_graph; }
    InspectorView *inspector() const;
    QTableView *classTable() const;
    ClassListModel *classModel() const;
    QSortFilterProxyModel *classProxy() const;
    QString lastError() const { return m_lastError; }
    QStringList recentFiles() const;

    // Find: selects the next coarse node matching `query`; false when none.
    bool findNext(const QString &query);
    // Selects the view node showing the coarse node or class block whose name
    // contains `name`; false when none matches.
    bool selectByName(const QString &name);
    // Expands the first run of class `classId`.
    bool expandClass(int classId);

    // .png or .svg by suffix; on failure `error` (when given) says why.
    bool exportImage(const QString &path, QString *error = nullptr);

    // The plan: derived after every load with the toolbar's method, mesh and
    // profile; derivePlan() runs it again on a worker.
    void setPlanRequest(const PlanRequest &request) { m_doc->setPlanRequest(request); }
    PlanRequest planRequest() const;
    void derivePlan();
    const PlannedModel &planned() const { return m_doc->planned(); }
    CostSummaryBar *costBar() const { return m_costBar; }
    bool savePlan(const QString &path) { return m_doc->savePlan(path); }
    // Writes the plan for a training framework ("torch", "jax", "megatron"),
    // the same text `tapestry-cli export` writes.
    bool exportPlan(const QString &format, const QString &path) { return m_doc->exportPlan(format, path); }
    // Reads a tapestry.plan file for the open model and shows it (lessons,
    // hand-written plans). False with the error shown when it does not fit.
    bool openPlanFile(const QString &path);
    // A file dropped on the window (or named otherwise): a tapestry.plan
    // opens its model (unless it is the open one) and then itself; an
    // .onnx, a tapestry.model or a config.json opens as a model. False for
    // a file of any other kind, which is left alone.
    bool openDroppedFile(const QString &path);
    static bool isDroppable(const QString &path);
    MeshView *meshView() const;
    // Opens a lesson of LESSONS.md in the Lesson dock: 1 = Y = X·B·C
    // Megatron split on 4 devices, 2 = the 2-layer MLP fully sharded on a
    // 4x2 mesh (each opens its model and plan first), 3 = your own plan:
    // the selected node of the open plan (or, with none selected, the one
    // whose collectives take longest), its collectives narrated. False
    // where lesson 3 has no plan to narrate.
    bool openLesson(int lesson);
    LessonDock *lessonDock() const { return m_lesson; }
    PipelineDock *pipelineDock() const { return m_pipeline; }

    // Pins `spec` on a tensor (marked override in the plan) and re-costs; with
    // `wholeClass` the same tensor of every instance of its class is pinned
    // too. Undoable. False with the error shown when the spec is not legal.
    bool pinTensor(const std::string &tensor, const sharding::ShardingSpec &spec, bool wholeClass = true)
    {
        return m_doc->pinTensor(tensor, spec, wholeClass);
    }
    QUndoStack *undoStack() const { return m_doc->undoStack(); }
    enum class Colouring { ByClass, BySharding, ByCost, ByDifference };
    // Compares the open plan (A) with another (B): "megatron", "dp",
    // "replicate" on the same mesh, or a plan file. Shows the diff and
    // colours the nodes whose weights differ.
    bool compareWith(const QString &other);
    const std::set<std::string> &differingTensors() const { return m_doc->differingTensors(); }
    CompareView *compareView() const { return m_compare; }
    CostChartsView *costCharts() const { return m_charts; }
    void setColouring(Colouring colouring);
    // Re-derives the plan with tap around every pin of the open plan (the
    // specs marked override), on a worker; undoable. planReady follows.
    void rederiveAroundPins();
    // Whether a pin applies to every instance of its class (the default) or
    // to the pinned tensor's instance only.
    void setPinWholeClass(bool whole) { m_doc->setPinWholeClass(whole); }
    bool pinWholeClass() const { return m_doc->pinWholeClass(); }
    // The plan candidates of class `classId` in the Candidates dock,
    // costed on a worker; candidatesReady follows.
    void showCandidates(int classId);
    CandidatesView *candidatesView() const;
    // Applies row `row` of the candidates shown as pins (undoable).
    bool applyCandidate(int row);
    // Edits (pins, applied candidates) not yet saved to a plan file.
    bool hasUnsavedEdits() const { return m_doc->hasUnsavedEdits(); }
    // As if the mesh shape were chosen in the toolbar: re-derives the plan.
    void setMeshShape(const QString &shape);
    // The autosaved plan of a previous session for the open model and mesh,
    // with its pins; restoreAutosave() applies it as one undoable edit.
    int autosavedPins() const { return m_doc->autosavedPins(); }
    bool restoreAutosave() { return m_doc->restoreAutosave(); }

    // Shows the dock named `panel` (classes, inspector, compare, charts,
    // mesh); false when there is none of that name.
    bool showPanel(const QString &panel);

    // When set, errors go to lastError() and stderr instead of a dialog.
    void setQuietErrors(bool quiet) { m_quietErrors = quiet; }
    // Shows `message` where the user is: the status bar and a dialog.
    void showError(const QString &message);

signals:
    void loaded();
    void loadFailed(const QString &message);
    void layoutReady();
    void planReady();
    void planFailed(const QString &message);
    void candidatesReady();

protected:
    void closeEvent(QCloseEvent *event) override;
    void dragEnterEvent(QDragEnterEvent *event) override;
    void dropEvent(QDropEvent *event) override;

private:
    void createDocks();
    void connectDocument();
    void focusLesson();
    void showLesson(int lesson);
    void showLessonStep(const LessonStep &step);
    void onModelLoaded();
    void onPlanChanged(PlanDocument::PlanChange change);
    void onPlanFailed(const QString &message, bool cancelled);
    void onViewNodeSelected(int viewNode);
    void onClassActivated(int classId);
    void showNodeMenu(int viewNode, const QPoint &screenPos);
    bool confirmDiscardEdits();

    PlanDocument *m_doc;
    GraphPanel *m_graph;
    ClassesDock *m_classes = nullptr;
    InspectorDock *m_inspector = nullptr;
    MeshDock *m_mesh = nullptr;
    LessonDock *m_lesson = nullptr;
    PipelineDock *m_pipeline = nullptr;
    int m_pendingLesson = 0;  // the lesson to show once its plan and layout are in
    CandidatesDock *m_candidates = nullptr;
    CompareView *m_compare;
    CostChartsView *m_charts;
    CostSummaryBar *m_costBar;
    StudioActions *m_actions = nullptr;
    FindBar *m_find;
    QLabel *m_status;
    // What the loader guessed about the open model (a config.json read by
    // another family than its model_type): kept in view while the model is
    // open, since the plan's messages replace m_status.
    QLabel *m_loadNote;
    QProgressBar *m_progress;
    QPushButton *m_cancel;
    QString m_loadingSource;
    QString m_pendingPlanFile;
    QString m_lessonFocus;  // the node a lesson opens on, until its plan and layout are in
    QString m_lastError;
    Colouring m_colouring = Colouring::ByClass;
    bool m_quietErrors = false;
    bool m_syncing = false;
    bool m_autosaveOffered = false;
};

} // namespace tapestry::views
