#pragma once

#include "plan/runreport.h"

#include <QDateTime>
#include <QMetaType>
#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>

#include <optional>

namespace tapestry::views {

// One measured step as the report's step line gives it (executor/REPORT.md).
struct ExecutorStep {
    int step = 0;
    int totalSteps = 0;
    double loss = 0;
    double stepTime = 0;      // s
    double tokensPerSecond = 0;
    double compute = 0;       // s in GEMMs and other kernels
    double gemm = 0;          // s in GEMMs alone
    double comm = 0;          // s in collectives
    QMap<QString, double> collectiveSeconds;  // by kind ("all_reduce")
};

// What the cost model predicts for the plan on the run's mesh profile, as
// the executor reports it (it costs the plan it read, on the profile it was
// given): the start event's prediction.
struct ExecutorPrediction {
    QString profile;
    double stepTime = 0;
    double compute = 0;
    double gemm = 0;  // the compute of the ops the executor runs as GEMMs
    double comm = 0;
    QMap<QString, double> collectiveSeconds;  // by kind
};

// One run of a plan from the executor panel: how it was started, what the
// report said, how it ended. Kept in the panel's history per plan.
struct ExecutorRun {
    enum class State { Starting, Running, Finished, Failed, Stopped };
    int id = 0;
    QDateTime started;
    QStringList command;
    int ranks = 0;
    State state = State::Starting;
    ExecutorPrediction predicted;
    plan::ReportStart start;                     // the report's start event
    QVector<ExecutorStep> steps;
    std::optional<plan::ReportSummary> summary;  // the report's summary, once it came
    int exitCode = -1;
    QStringList errorLines;  // last lines of stderr when it failed
    QString message;         // the one line the panel shows for the outcome

    bool hasVerification() const { return summary && summary->verification; }
    bool verificationPassed() const;
    double meanStepTime() const;   // from the summary, else the steps so far
    double tokensPerSecond() const;
};

} // namespace tapestry::views

Q_DECLARE_METATYPE(tapestry::views::ExecutorRun)
