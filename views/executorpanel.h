#pragma once

#include "executorrun.h"
#include "launchtemplate.h"
#include "loadedmodel.h"
#include "plannedmodel.h"

#include <QHostAddress>
#include <QProcess>
#include <QWidget>

#include <map>
#include <memory>
#include <optional>

QT_BEGIN_NAMESPACE
class QChartView;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTabWidget;
class QTemporaryDir;
class QTimer;
class QTreeWidget;
QT_END_NAMESPACE

namespace tapestry::views {

class ReportServer;

// Runs the studio's plan with tapestry-exec and shows what comes back: a
// launcher (local mpirun, a Slurm template, a custom command), steps, batch,
// backend, verification; Run and Stop; live charts of tokens/s and step
// time, time per collective kind against the cost model, predicted against
// measured; the verdict; the exit status and the last error lines; and the
// runs of each plan kept for comparison. The job reports through a
// ReportServer with a fresh token per run.
class ExecutorPanel : public QWidget {
    Q_OBJECT
public:
    explicit ExecutorPanel(QWidget *parent = nullptr);
    ~ExecutorPanel() override;

    // The plan to run and its model; a new plan resets the rank count to its
    // mesh size and shows that plan's run history.
    void setPlan(const LoadedModel &model, const PlannedModel &planned);

    void setLauncher(LaunchTemplate::Kind kind);
    void setCommandTemplate(const QString &text);
    QString commandTemplate() const;
    void setRanks(int ranks);
    int ranks() const;
    void setNodes(int nodes);
    void setSteps(int steps);
    void setBatch(int batch);  // 0: the batch the model was loaded with
    void setVerify(bool verify);
    // Seconds a step may take before the job is ended as stalled
    // (tapestry-exec --step-timeout); 0: the executor's automatic limit.
    void setStepTimeout(double seconds);
    void setMeshProfile(const QString &nameOrPath);
    void setExecutable(const QString &path);
    QString executable() const;
    // Address the report server listens on (127.0.0.1 by default; 0.0.0.0
    // for ranks on other machines) and, optionally, the host they dial.
    void setBindAddress(const QString &address);
    void setAdvertisedHost(const QString &host);

    // The command Run would start (program first), or empty with `error`.
    QStringList command(QString *error = nullptr) const;
    // Starts a run; false (with the reason in the status line) when there is
    // no plan, no executor, the template does not expand, or a run is on.
    bool run();
    // Calibrates this machine on the launcher's ranks (and the plan's mesh
    // axes when it has one device per rank) into NAME.json among the user's
    // profiles; profileCalibrated follows and the profile becomes the one
    // runs are predicted with. False, with the reason shown, when it cannot
    // start.
    bool calibrate(const QString &name);
    // Ends the job and all its ranks: SIGTERM to its process group, SIGKILL
    // to the group and every process below the launcher after a grace
    // period. The launcher also ends when the studio does, however it ends.
    void stop();
    bool isRunning() const;

    const ExecutorRun *currentRun() const;
    // Runs of the current plan, oldest first.
    QVector<ExecutorRun> history() const;
    QString statusText() const;
    ReportServer *server() const { return m_server; }

    // tapestry-exec next to this program (build tree or install), or
    // $TAPESTRY_EXEC; empty when none is found.
    static QString findExecutable();

signals:
    void runStarted();
    void stepReceived(int step, double tokensPerSecond);
    void verificationReceived(bool passed);
    void runFinished(const tapestry::views::ExecutorRun &run);
    void profileCalibrated(const QString &name, const QString &path);
    void calibrationFailed(const QString &message);

private:
    enum class Job { Plan, Calibration };
    void buildUi();
    bool refuse(const QString &why);
    bool prepareLaunch();
    LaunchValues launchValues(const QStringList &args) const;
    void startJob(const QStringList &cmd, Job job);
    void finishCalibration(const QString &failure);
    void onLauncherChanged();
    void onMessage(const QJsonObject &message);
    void onProcessFinished(int exitCode, QProcess::ExitStatus status);
    void onStderr();
    void killJob();
    void log(const QString &line) const;
    void finishRun(ExecutorRun::State state, const QString &message);
    ExecutorRun *current();
    void refreshCharts();
    void refreshHistory();
    void refreshStatus();
    QString planKey() const;

    ReportServer *m_server;
    QProcess *m_process = nullptr;
    QTimer *m_killTimer;
    QList<qint64> m_jobProcesses;  // the launcher and the processes below it, when Stop began
    std::unique_ptr<QTemporaryDir> m_workDir;
    LoadedModel m_model;
    PlannedModel m_planned;
    std::map<QString, QVector<ExecutorRun>> m_history;  // by plan key
    // planKey() of the plan it was computed for: plans are immutable once
    // made, and the key hashes the whole plan file.
    mutable std::shared_ptr<const plan::Plan> m_keyedPlan;
    mutable QString m_keyedSource, m_planKey;
    QString m_runKey;     // plan key of the run in progress
    int m_shownRun = -1;  // index in the current plan's history
    int m_nextId = 1;
    std::optional<plan::RunReportReader> m_reader;  // the current job's report
    Job m_job = Job::Plan;
    QString m_calibrationName;
    QString m_calibrationPath;
    bool m_stopping = false;
    bool m_exited = false;  // the job ended; its run is finalised once the report drained
    int m_exitCode = -1;
    QHostAddress m_lastBind;
    QByteArray m_stderrPartial;
    QStringList m_stderrTail;

    QComboBox *m_launcher;
    QLineEdit *m_template;
    QSpinBox *m_ranks;
    QSpinBox *m_nodes;
    QSpinBox *m_steps;
    QSpinBox *m_batch;
    QComboBox *m_backend;
    QCheckBox *m_verify;
    QDoubleSpinBox *m_stepTimeout;
    QComboBox *m_profile;
    QLineEdit *m_executable;
    QLineEdit *m_bind;
    QPushButton *m_run;
    QPushButton *m_stop;
    QPushButton *m_calibrate;
    QLabel *m_planLabel;
    QLabel *m_source;
    QLabel *m_status;
    QLabel *m_verdict;
    QTabWidget *m_tabs;
    QChartView *m_throughput;
    QChartView *m_collectives;
    QChartView *m_comparison;
    QTreeWidget *m_runs;
    QPlainTextEdit *m_log;
};

} // namespace tapestry::views
