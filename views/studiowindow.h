#pragma once

#include "layout/viewgraph.h"
#include "loadedmodel.h"
#include "plannedmodel.h"

#include "analysis/candidates.h"

#include <QFutureWatcher>
#include <QMainWindow>

#include <atomic>
#include <map>
#include <set>
#include <memory>
#include <utility>
#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QMenu;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;
class QTreeWidgetItem;
class QUndoStack;

namespace tapestry::analysis {
class Explainer;
}

namespace tapestry::views {

class ClassListModel;
class CostSummaryBar;
class GraphPanel;
class InspectorView;
class MeshView;
class CompareView;
class CostChartsView;
class CandidatesView;

// The studio's main window: graph view with minimap, class list, inspector,
// find bar; models load on a worker thread with progress and Cancel.
class StudioWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit StudioWindow(QWidget *parent = nullptr);
    ~StudioWindow() override;

    // Starts loading; `loaded` or `loadFailed` follows. The open document stays
    // until the new one has loaded.
    void openModel(const QString &source);
    bool isBusy() const;

    const LoadedModel &document() const { return m_document; }
    GraphPanel *graphPanel() const { return m_graph; }
    InspectorView *inspector() const { return m_inspector; }
    QTableView *classTable() const { return m_classTable; }
    ClassListModel *classModel() const { return m_classModel; }
    QSortFilterProxyModel *classProxy() const { return m_classProxy; }
    QString lastError() const { return m_lastError; }
    QStringList recentFiles() const;

    // Find: selects the next coarse node matching `query`; false when none.
    bool findNext(const QString &query);
    // Selects the view node showing the coarse node or class block whose name
    // contains `name`; false when none matches.
    bool selectByName(const QString &name);
    // Expands the first run of class `classId`.
    bool expandClass(int classId);

    bool exportImage(const QString &path);  // .png or .svg by suffix

    // The plan: derived after every load with the toolbar's method, mesh and
    // profile; derivePlan() runs it again on a worker.
    void setPlanRequest(const PlanRequest &request);
    PlanRequest planRequest() const;
    void derivePlan();
    const PlannedModel &planned() const { return m_planned; }
    CostSummaryBar *costBar() const { return m_costBar; }
    bool savePlan(const QString &path);
    // Writes the plan for a training framework ("torch", "jax", "megatron"),
    // the same text `tapestry-cli export` writes.
    bool exportPlan(const QString &format, const QString &path);
    // Reads a tapestry.plan file for the open model and shows it (lessons,
    // hand-written plans). False with the error shown when it does not fit.
    bool openPlanFile(const QString &path);
    MeshView *meshView() const { return m_meshView; }
    // Opens a lesson of LESSONS.md: 1 = Y = X·B·C Megatron split on 4
    // devices, 2 = the 2-layer MLP fully sharded on a 4x2 mesh.
    void openLesson(int lesson);
    // Shows a tensor, or a coarse node's main weight and its collectives,
    // on the mesh view.
    void showOnMesh(ir::TensorId tensor);
    void showNodeOnMesh(passes::NodeId node);

    // Pins `spec` on a tensor (marked override in the plan) and re-costs; with
    // `wholeClass` the same tensor of every instance of its class is pinned
    // too. Undoable. False with the error shown when the spec is not legal.
    bool pinTensor(const std::string &tensor, const sharding::ShardingSpec &spec, bool wholeClass = true);
    QUndoStack *undoStack() const { return m_undo; }
    enum class Colouring { ByClass, BySharding, ByCost, ByDifference };
    // Compares the open plan (A) with another (B): "megatron", "dp",
    // "replicate" on the same mesh, or a plan file. Shows the diff and
    // colours the nodes whose weights differ.
    bool compareWith(const QString &other);
    const std::set<std::string> &differingTensors() const { return m_differing; }
    CompareView *compareView() const { return m_compare; }
    CostChartsView *costCharts() const { return m_charts; }
    void setColouring(Colouring colouring);
    // Re-derives the plan with tap around every pin of the open plan (the
    // specs marked override), on a worker; undoable. planReady follows.
    void rederiveAroundPins();
    // Whether a pin applies to every instance of its class (the default) or
    // to the pinned tensor's instance only.
    void setPinWholeClass(bool whole) { m_pinWholeClass = whole; }
    bool pinWholeClass() const { return m_pinWholeClass; }
    // The plan candidates of class `classId` in the Candidates dock,
    // costed on a worker; candidatesReady follows.
    void showCandidates(int classId);
    CandidatesView *candidatesView() const { return m_candidatesView; }
    // Applies row `row` of the candidates shown as pins (undoable).
    bool applyCandidate(int row);
    // Edits (pins, applied candidates) not yet saved to a plan file.
    bool hasUnsavedEdits() const;
    // As if the mesh shape were chosen in the toolbar: re-derives the plan.
    void setMeshShape(const QString &shape);
    // The autosaved plan of a previous session for the open model and mesh,
    // with its pins; restoreAutosave() applies it as one undoable edit.
    int autosavedPins() const;
    bool restoreAutosave();
    static QString autosavePath();

    // Shows the dock named `panel` (classes, inspector, compare, charts,
    // mesh); false when there is none of that name.
    bool showPanel(const QString &panel);

    // When set, errors go to lastError() and stderr instead of a dialog.
    void setQuietErrors(bool quiet) { m_quietErrors = quiet; }

signals:
    void loaded();
    void loadFailed(const QString &message);
    void layoutReady();
    void planReady();
    void planFailed(const QString &message);
    void candidatesReady();

protected:
    void closeEvent(QCloseEvent *event) override;

private:
    // Runs `request` in the background, superseding the search running.
    void startPlanner(const PlanRequest &request);
    void createActions();
    void focusLesson();
    void showError(const QString &message);
    void adoptDocument(const LoadedModel &model);
    void addRecent(const QString &source);
    void rebuildRecentMenu();
    void onViewNodeSelected(int viewNode);
    void onClassActivated(const QModelIndex &index);
    void adoptPlan(const PlannedModel &planned);
    void installInspectorSections();
    QColor shardingColour(const layout::ViewNode &node) const;
    QColor costColour(const layout::ViewNode &node) const;
    std::vector<passes::NodeId> nodesOf(const layout::ViewNode &node) const;

    LoadedModel m_document;
    GraphPanel *m_graph;
    InspectorView *m_inspector;
    QTableView *m_classTable;
    ClassListModel *m_classModel;
    QSortFilterProxyModel *m_classProxy;
    QLineEdit *m_find;
    QLabel *m_status;
    QProgressBar *m_progress;
    QPushButton *m_cancel;
    QMenu *m_recentMenu = nullptr;
    QFutureWatcher<LoadedModel> m_loader;
    QFutureWatcher<PlannedModel> m_planner;
    PlannedModel m_planned;
    CostSummaryBar *m_costBar;
    MeshView *m_meshView;
    QString m_pendingPlanFile;
    QString m_lessonFocus;  // the node a lesson opens on, until its plan and layout are in
    QUndoStack *m_undo;
    CompareView *m_compare;
    CostChartsView *m_charts;
    std::set<std::string> m_differing;
    QColor differenceColour(const layout::ViewNode &node) const;
    std::unique_ptr<analysis::Explainer> m_explainer;
    bool m_explainerStale = false;  // made for a plan before the current one
    // Costs the document's plans edit after edit; made for each document.
    std::unique_ptr<plan::Recoster> m_recoster;
    plan::Recoster &recoster();
    void showPlan(const std::shared_ptr<const plan::Plan> &plan);
    analysis::Explainer *explainer();
    QComboBox *m_method = nullptr;
    QComboBox *m_mesh = nullptr;
    QComboBox *m_profile = nullptr;
    QComboBox *m_colourBy = nullptr;
    Colouring m_colouring = Colouring::ByClass;
    std::shared_ptr<std::atomic_bool> m_cancelFlag;
    std::shared_ptr<std::atomic_bool> m_planCancel;  // the running plan search's
    QString m_loadingSource;
    QString m_lastError;
    QString m_lastQuery;
    std::size_t m_findIndex = 0;
    bool m_quietErrors = false;
    bool m_syncing = false;
    bool m_pinWholeClass = true;
    CandidatesView *m_candidatesView;
    // The candidates, or why there are none.
    QFutureWatcher<std::pair<analysis::ClassCandidates, std::string>> m_candidateWorker;
    int m_candidatesClass = -1;
    // Set while the planner re-derives around pins: the plan it edits.
    std::shared_ptr<const plan::Plan> m_rederiveBase;
    bool m_autosaveOffered = false;
    // The autosave is written on a worker (a large plan's file takes tens
    // of milliseconds, every edit): one write at a time, the newest plan
    // queued behind it. Whatever reads or removes the file waits for both.
    mutable QFutureWatcher<QString> m_autosaveWriter;
    mutable std::shared_ptr<const plan::Plan> m_autosaveQueued;
    void writeAutosave(std::shared_ptr<const plan::Plan> plan);
    void finishAutosave() const;
    bool confirmDiscardEdits();
    void autosave();
    void clearAutosave();
    void pushPlanEdit(const QString &text, std::shared_ptr<const plan::Plan> after);
    void showNodeMenu(int viewNode, const QPoint &screenPos);
};

} // namespace tapestry::views
