#include "launchtemplate.h"

#include <QCoreApplication>
#include <QProcess>
#include <QRegularExpression>

namespace tapestry::views {

QString LaunchTemplate::localMpirun()
{
    return QStringLiteral(
        "mpirun -q -np {np} {mpi_flags} -x OPENBLAS_NUM_THREADS=1 -x TAPESTRY_REPORT_TOKEN {exec} {args}");
}

QString LaunchTemplate::slurm()
{
    return QStringLiteral("srun -N {nodes} --ntasks-per-node {per_node} {exec} {args}");
}

QString LaunchTemplate::forKind(Kind kind)
{
    return kind == Kind::Slurm ? slurm() : localMpirun();
}

QStringList mpirunFlags(const LaunchValues &values)
{
    QStringList flags;
    if (values.runningAsRoot)
        flags << QStringLiteral("--allow-run-as-root");
    if (values.ranks > values.cores)
        flags << QStringLiteral("--oversubscribe");
    return flags;
}

QStringList expandLaunchTemplate(const QString &text, const LaunchValues &values, QString *error)
{
    auto failed = [error](const QString &message) {
        if (error)
            *error = message;
        return QStringList();
    };
    const QStringList words = QProcess::splitCommand(text);
    if (words.isEmpty())
        return failed(QCoreApplication::translate("LaunchTemplate", "the launch command is empty"));
    const bool perNodeUsed = text.contains(QLatin1String("{per_node}"));
    if (perNodeUsed && (values.nodes < 1 || values.ranks % values.nodes != 0))
        return failed(QCoreApplication::translate("LaunchTemplate", "%1 ranks do not divide over %2 nodes")
                          .arg(values.ranks)
                          .arg(values.nodes));
    const QMap<QString, QString> scalars{{QStringLiteral("np"), QString::number(values.ranks)},
                                         {QStringLiteral("nodes"), QString::number(values.nodes)},
                                         {QStringLiteral("per_node"),
                                          QString::number(values.nodes > 0 ? values.ranks / values.nodes : 0)},
                                         {QStringLiteral("exec"), values.executable}};
    static const QRegularExpression placeholder(QStringLiteral("\\{([a-z_]*)\\}"));
    QStringList out;
    for (const QString &word : words) {
        if (word == QLatin1String("{args}")) {
            out << values.args;
            continue;
        }
        if (word == QLatin1String("{mpi_flags}")) {
            out << mpirunFlags(values);
            continue;
        }
        if (word.contains(QLatin1String("{args}")) || word.contains(QLatin1String("{mpi_flags}")))
            return failed(QCoreApplication::translate("LaunchTemplate", "{args} and {mpi_flags} must be words of "
                                                                        "their own, not part of '%1'")
                              .arg(word));
        static const QRegularExpression unclosed(QStringLiteral("\\{[a-z_]*$"));
        if (QString(word).remove(placeholder).contains(unclosed))
            return failed(QCoreApplication::translate("LaunchTemplate", "unclosed placeholder in '%1'").arg(word));
        QString expanded;
        qsizetype at = 0;
        for (auto it = placeholder.globalMatch(word); it.hasNext();) {
            const auto m = it.next();
            const QString name = m.captured(1);
            if (!scalars.contains(name))
                return failed(QCoreApplication::translate("LaunchTemplate",
                                                          "unknown placeholder {%1} (known: {np}, {nodes}, "
                                                          "{per_node}, {exec}, {mpi_flags}, {args})")
                                  .arg(name));
            expanded += word.mid(at, m.capturedStart() - at) + scalars.value(name);
            at = m.capturedEnd();
        }
        expanded += word.mid(at);
        out << expanded;
    }
    return out;
}

} // namespace tapestry::views
