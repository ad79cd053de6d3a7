#pragma once

// Running tapestry's programs from a test: the process's exit code and
// output, with the environment MPI ranks need here (root allowed, one BLAS
// thread per rank), and the report's JSON lines (executor/REPORT.md).

#include <QByteArray>
#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QList>
#include <QMultiMap>
#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>
#include <QThread>

#include <csignal>

namespace tapestry::testing {

struct ProcessRun {
    int exitCode = -1;  // -1: it did not finish in time, or crashed
    QByteArray out;
    QByteArray err;
};

// This process's environment with what MPI ranks need here, and `extra`.
inline QProcessEnvironment mpiEnvironment(const QProcessEnvironment &extra = {})
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT"), QStringLiteral("1"));
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), QStringLiteral("1"));
    env.insert(QStringLiteral("OPENBLAS_NUM_THREADS"), QStringLiteral("1"));
    env.insert(extra);
    return env;
}

// Runs `program` with `args`, `extra` added to the environment; kills it
// after `timeoutMs`.
inline ProcessRun runProcess(const QString &program, const QStringList &args, int timeoutMs = 60000,
                             const QProcessEnvironment &extra = {})
{
    QProcess p;
    p.setProcessEnvironment(mpiEnvironment(extra));
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

// `root` and every process below it (children, theirs, ...), from /proc.
// A job's processes are found this way, never by name across the machine.
// Empty for a process that is not there (QProcess::processId() of a process
// that ended is 0).
inline QList<qint64> processTree(qint64 root)
{
    if (root <= 1)
        return {};
    QMultiMap<qint64, qint64> children;  // by parent
    for (const QString &entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool ok = false;
        const qint64 pid = entry.toLongLong(&ok);
        QFile stat(QStringLiteral("/proc/%1/stat").arg(entry));
        if (!ok || !stat.open(QIODevice::ReadOnly))
            continue;
        const QByteArray text = stat.readAll();
        const qsizetype close = text.lastIndexOf(')');
        const QList<QByteArray> fields = text.mid(close + 2).split(' ');
        if (close > 0 && fields.size() > 1)
            children.insert(fields[1].toLongLong(), pid);
    }
    QList<qint64> tree{root};
    for (qsizetype i = 0; i < tree.size(); ++i)
        tree += children.values(tree[i]);
    return tree;
}

// Whether `pid` runs (or is stopped): not gone, and not a zombie nobody reaped.
inline bool processAlive(qint64 pid)
{
    if (pid <= 1)
        return false;
    QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!stat.open(QIODevice::ReadOnly))
        return false;
    const QByteArray text = stat.readAll();
    const qsizetype close = text.lastIndexOf(')');
    return close > 0 && text.size() > close + 2 && text[close + 2] != 'Z' && text[close + 2] != 'X';
}

// The processes of `pids` still alive.
inline QList<qint64> processesAlive(const QList<qint64> &pids)
{
    QList<qint64> alive;
    for (qint64 pid : pids)
        if (processAlive(pid))
            alive << pid;
    return alive;
}

// The process's environment variable `name`, or empty.
inline QByteArray processEnvironment(qint64 pid, const QByteArray &name)
{
    QFile environ(QStringLiteral("/proc/%1/environ").arg(pid));
    if (!environ.open(QIODevice::ReadOnly))
        return {};
    for (const QByteArray &entry : environ.readAll().split('\0'))
        if (entry.startsWith(QByteArray(name + '=')))
            return entry.mid(name.size() + 1);
    return {};
}

// Kills the processes it holds (SIGCONT, then SIGKILL) when it goes out of
// scope, so that a test that fails half-way leaves no job running.
struct ProcessReaper {
    QList<qint64> pids;
    ProcessReaper() = default;
    ProcessReaper(const ProcessReaper &) = delete;
    ProcessReaper &operator=(const ProcessReaper &) = delete;
    ~ProcessReaper()
    {
        for (qint64 pid : processesAlive(pids)) {
            if (pid == QCoreApplication::applicationPid())
                continue;
            ::kill(static_cast<pid_t>(pid), SIGCONT);
            ::kill(static_cast<pid_t>(pid), SIGKILL);
        }
    }
};

// Reads `p`'s output into `out` and `err` until `done` holds for them or
// `timeoutMs` passes; false on the timeout or when `p` ended first.
template <class Done>
bool readUntil(QProcess &p, QByteArray &out, QByteArray &err, Done done, int timeoutMs)
{
    for (int waited = 0; waited < timeoutMs; waited += 100) {
        p.waitForReadyRead(100);
        out += p.readAllStandardOutput();
        err += p.readAllStandardError();
        if (done(out, err))
            return true;
        if (p.state() == QProcess::NotRunning)
            return false;
    }
    return false;
}

// Waits up to `timeoutMs` for every process of `pids` to be gone; returns those left.
inline QList<qint64> waitGone(const QList<qint64> &pids, int timeoutMs)
{
    QList<qint64> left = processesAlive(pids);
    for (int waited = 0; waited < timeoutMs && !left.isEmpty(); waited += 100) {
        QThread::msleep(100);
        left = processesAlive(pids);
    }
    return left;
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
