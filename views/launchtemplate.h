#pragma once

#include <QMap>
#include <QString>
#include <QStringList>

namespace tapestry::views {

// How the executor panel starts tapestry-exec: a command template whose
// words may hold placeholders, expanded without a shell.
//   {np}        ranks                    {nodes}     nodes (Slurm)
//   {per_node}  ranks per node           {exec}      tapestry-exec's path
//   {mpi_flags} --allow-run-as-root / --oversubscribe where needed (local mpirun)
//   {args}      the executor's arguments, each its own word
// A word that is exactly {args} or {mpi_flags} becomes as many words as
// it holds (none when empty); other placeholders are replaced inside words.
// The run's report token is in the environment, TAPESTRY_REPORT_TOKEN, never
// among the words: a launcher that does not pass its environment on to
// rank 0 must be told to (mpirun -x TAPESTRY_REPORT_TOKEN; srun does by default).
struct LaunchTemplate {
    enum class Kind { LocalMpirun, Slurm, Custom };
    // mpirun -q -np {np} {mpi_flags} -x OPENBLAS_NUM_THREADS=1 -x TAPESTRY_REPORT_TOKEN {exec} {args}
    static QString localMpirun();
    static QString slurm();        // srun -N {nodes} --ntasks-per-node {per_node} {exec} {args}
    static QString forKind(Kind kind);
};

struct LaunchValues {
    int ranks = 1;
    int nodes = 1;
    QString executable;
    QStringList args;
    bool runningAsRoot = false;
    int cores = 1;
};

// mpirun's flags for running as root and for more ranks than cores.
QStringList mpirunFlags(const LaunchValues &values);

// Splits `text` into words (double quotes group, as QProcess::splitCommand)
// and expands the placeholders. Returns the program and its arguments, or
// an empty list with `error` set: an empty template, an unknown or unclosed
// placeholder, or ranks that do not divide over the nodes when {per_node}
// is used.
QStringList expandLaunchTemplate(const QString &text, const LaunchValues &values, QString *error = nullptr);

} // namespace tapestry::views
