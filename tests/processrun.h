#pragma once

// Running tapestry's programs from a test: the process's exit code and
// output, with the environment MPI ranks need here (root allowed, one BLAS
// thread per rank), and the report's JSON lines (executor/REPORT.md).

#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

namespace tapestry::testing {

struct ProcessRun {
    int exitCode = -1;  // -1: it did not finish in time, or crashed
    QByteArray out;
    QByteArray err;
};

// Runs `program` with `args`, `extra` added to the environment; kills it
// after `timeoutMs`.
inline ProcessRun runProcess(const QString &program, const QStringList &args, int timeoutMs = 60000,
                             const QProcessEnvironment &extra = {})
{
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT"), QStringLiteral("1"));
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), QStringLiteral("1"));
    env.insert(QStringLiteral("OPENBLAS_NUM_THREADS"), QStringLiteral("1"));
    env.insert(extra);
    p.setProcessEnvironment(env);
    p.start(program, args);
    ProcessRun r;
    const bool finished = p.waitForStarted(10000) && p.waitForFinished(timeoutMs);
    if (!finished) {
        p.kill();
        p.waitForFinished(5000);
    }
    r.exitCode = finished && p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

// The last report line of `event` in `out` (empty when there is none).
inline QJsonObject lastJsonLine(const QByteArray &out, const QString &event)
{
    QJsonObject found;
    for (const QByteArray &line : out.split('\n')) {
        const QJsonObject j = QJsonDocument::fromJson(line).object();
        if (j.value(QStringLiteral("event")).toString() == event)
            found = j;
    }
    return found;
}

} // namespace tapestry::testing
