// The executor's MPI layer, end to end: tapestry-exec's collectives self-test
// on 2 and 4 ranks (meshes 2, 1x2 and 2x2, one communicator per axis), a rank
// that fails mid-job ending the whole job quickly, a mesh that does not match
// the rank count, the single-process training loop's report, and the rank's
// watchdog (the message that names a stalled step, its limits).
#include "plan/runreport.h"
#include "watchdog.h"

#include <QtTest>

#include <QElapsedTimer>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>

#include <condition_variable>
#include <mutex>

using namespace tapestry;

namespace {

struct Run {
    int exitCode = -1;
    bool finished = false;
    qint64 milliseconds = 0;
    QByteArray out;
    QByteArray err;
};

QProcessEnvironment mpiEnvironment()
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT"), QStringLiteral("1"));
    env.insert(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"), QStringLiteral("1"));
    env.insert(QStringLiteral("OPENBLAS_NUM_THREADS"), QStringLiteral("1"));
    return env;
}

Run run(const QString &program, const QStringList &args, int timeoutMs)
{
    QProcess p;
    p.setProcessEnvironment(mpiEnvironment());
    QElapsedTimer clock;
    clock.start();
    p.start(program, args);
    Run r;
    r.finished = p.waitForStarted(10000) && p.waitForFinished(timeoutMs);
    r.milliseconds = clock.elapsed();
    if (!r.finished) {
        p.kill();
        p.waitForFinished(5000);
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

Run mpirun(int ranks, const QStringList &execArgs, int timeoutMs = 60000)
{
    QStringList args{QStringLiteral("--oversubscribe"), QStringLiteral("-np"), QString::number(ranks),
                     QStringLiteral(TAPESTRY_EXEC)};
    args += execArgs;
    return run(QStringLiteral("mpirun"), args, timeoutMs);
}

std::vector<QJsonObject> jsonLines(const QByteArray &out)
{
    std::vector<QJsonObject> lines;
    for (const QByteArray &line : out.split('\n'))
        if (!line.trimmed().isEmpty())
            lines.push_back(QJsonDocument::fromJson(line).object());
    return lines;
}

} // namespace

class TestCommunicator : public QObject {
    Q_OBJECT

private slots:
    void collectives_data();
    void collectives();
    void failingRankEndsTheJob_data();
    void failingRankEndsTheJob();
    void meshMustMatchRanks();
    void trainingLoopReportsSteps();
    void refusesUnknownOptions();
    void watchdogNamesTheStall_data();
    void watchdogNamesTheStall();
    void watchdogStaysQuietWhileStepsEndInTime();
    void watchdogLimits();
};

void TestCommunicator::collectives_data()
{
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("mesh");
    QTest::newRow("2 ranks, mesh 2") << 2 << "2";
    QTest::newRow("2 ranks, mesh 1x2") << 2 << "1x2";
    QTest::newRow("4 ranks, mesh 2x2") << 4 << "2x2";
}

void TestCommunicator::collectives()
{
    QFETCH(int, ranks);
    QFETCH(QString, mesh);
    const Run r = mpirun(ranks, {QStringLiteral("--self-test"), QStringLiteral("collectives"),
                                 QStringLiteral("--mesh"), mesh});
    QVERIFY2(r.finished, "the self-test hung");
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const auto lines = jsonLines(r.out);
    const int axes = static_cast<int>(mesh.count(QLatin1Char('x'))) + 1;
    // Per axis: all-reduce, 2 all-gathers, 2 reduce-scatters, 2 all-to-alls,
    // the counters; then the summary.
    QCOMPARE(static_cast<int>(lines.size()), axes * 8 + 1);
    QStringList kinds;
    for (const QJsonObject &line : lines) {
        QVERIFY2(line.value(QLatin1String("ok")).toBool(), QJsonDocument(line).toJson().constData());
        kinds << line.value(QLatin1String("check")).toString();
    }
    for (const char *kind : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "counters"})
        QVERIFY(kinds.contains(QLatin1String(kind)));
    const QJsonObject summary = lines.back();
    QCOMPARE(summary.value(QLatin1String("event")).toString(), QStringLiteral("self_test_summary"));
    QCOMPARE(summary.value(QLatin1String("ranks")).toInt(), ranks);
}

void TestCommunicator::failingRankEndsTheJob_data()
{
    QTest::addColumn<int>("ranks");
    QTest::addColumn<QString>("mesh");
    QTest::addColumn<int>("failRank");
    QTest::newRow("2 ranks, rank 1 fails") << 2 << "2" << 1;
    QTest::newRow("4 ranks, rank 3 fails") << 4 << "2x2" << 3;
}

// The other ranks are inside an all-reduce when the failing rank errors: the
// job must still end, non-zero, within seconds, naming the rank.
void TestCommunicator::failingRankEndsTheJob()
{
    QFETCH(int, ranks);
    QFETCH(QString, mesh);
    QFETCH(int, failRank);
    const Run r = mpirun(ranks,
                         {QStringLiteral("--self-test"), QStringLiteral("collectives"),
                          QStringLiteral("--mesh"), mesh, QStringLiteral("--fail-rank"),
                          QString::number(failRank)},
                         30000);
    QVERIFY2(r.finished, "the job hung after a rank failed");
    QVERIFY(r.exitCode != 0);
    QVERIFY2(r.milliseconds < 20000, qPrintable(QString::number(r.milliseconds)));
    QVERIFY2(r.err.contains("tapestry-exec: rank " + QByteArray::number(failRank) + ": "), r.err.constData());
}

void TestCommunicator::meshMustMatchRanks()
{
    const Run r = mpirun(2, {QStringLiteral("--self-test"), QStringLiteral("collectives"),
                             QStringLiteral("--mesh"), QStringLiteral("2x2")});
    QVERIFY(r.finished);
    QVERIFY(r.exitCode != 0);
    QVERIFY2(r.err.contains("tapestry-exec: --mesh 2x2: the mesh has 4 devices but the job has 2 ranks"),
             r.err.constData());
    QVERIFY(r.out.isEmpty());
}

// The single-process reference writes the report of a plan run (hello,
// start, a step per step, summary), read back by the same reader as the
// studio's and the CLI's; the loss falls.
void TestCommunicator::trainingLoopReportsSteps()
{
    const Run r = run(QStringLiteral(TAPESTRY_EXEC),
                      {QStringLiteral("--model"), QStringLiteral("zoo:mlp"), QStringLiteral("--steps"),
                       QStringLiteral("4"), QStringLiteral("--seed"), QStringLiteral("9")},
                      30000);
    QVERIFY(r.finished);
    QVERIFY2(r.exitCode == 0, r.err.constData());
    plan::RunReportReader reader("tapestry-exec --steps");
    std::vector<plan::ReportEvent> events;
    for (const QByteArray &line : r.out.split('\n'))
        if (auto event = reader.read(std::string_view(line.constData(), static_cast<std::size_t>(line.size()))))
            events.push_back(std::move(*event));
    QCOMPARE(static_cast<int>(events.size()), 1 + 1 + 4 + 1);
    QCOMPARE(std::get<plan::ReportHello>(events[0]).ranks, 1);
    const auto &start = std::get<plan::ReportStart>(events[1]);
    QCOMPARE(start.objective, std::string("sum_of_squares"));
    QCOMPARE(start.ranks, 1);
    QCOMPARE(start.backend, std::string("cpu"));
    QVERIFY(start.flopsPerStepPerRank > 0.0);
    double previous = 1e300;
    for (int s = 1; s <= 4; ++s) {
        const auto &step = std::get<plan::ReportStep>(events[static_cast<std::size_t>(s + 1)]);
        QCOMPARE(step.step, s);
        QCOMPARE(step.steps, 4);
        QVERIFY(step.loss > 0.0);
        QVERIFY(step.figures.stepTime > 0.0);
        QVERIFY(step.figures.tokensPerSecond > 0.0);
        QVERIFY(step.figures.gflopsPerRank > 0.0);
        QVERIFY(step.figures.collectives.empty());
        QVERIFY(step.loss < previous);
        previous = step.loss;
    }
    const auto &summary = std::get<plan::ReportSummary>(events.back());
    QCOMPARE(summary.steps, 4);
    QCOMPARE(summary.lastLoss, previous);
    QVERIFY(summary.mean.stepTime > 0.0);
    QVERIFY(!summary.verification);
}

void TestCommunicator::refusesUnknownOptions()
{
    const Run r = run(QStringLiteral(TAPESTRY_EXEC),
                      {QStringLiteral("--model"), QStringLiteral("zoo:mlp"), QStringLiteral("--stpes"),
                       QStringLiteral("3")},
                      30000);
    QVERIFY(r.finished);
    QCOMPARE(r.exitCode, 2);
    // The MPI runtime may add its own notes (hwloc on machines without
    // sysfs); the executor itself says one line.
    QByteArray ours;
    for (const QByteArray &line : r.err.split('\n'))
        if (!line.isEmpty() && !line.startsWith("[hwloc"))
            ours += line + '\n';
    QCOMPARE(ours, QByteArray("tapestry-exec: unknown option '--stpes' (see --help)\n"));
    QVERIFY(r.out.isEmpty());
}

// A watchdog whose abort is recorded instead of ending the process.
struct Recorded {
    std::mutex mutex;
    std::condition_variable fired;
    std::vector<std::string> messages;

    exec::Watchdog::AbortAction action()
    {
        return [this](const std::string &message) {
            std::lock_guard lock(mutex);
            messages.push_back(message);
            fired.notify_all();
        };
    }
    bool wait(int seconds)
    {
        std::unique_lock lock(mutex);
        return fired.wait_for(lock, std::chrono::seconds(seconds), [this] { return !messages.empty(); });
    }
};

void TestCommunicator::watchdogNamesTheStall_data()
{
    QTest::addColumn<int>("rank");
    QTest::addColumn<QString>("where");
    QTest::addColumn<QString>("expected");  // a pattern of the whole message
    const QString tail = QStringLiteral(" \\(--step-timeout 0\\.2 s\\); a rank has stalled or died");
    QTest::newRow("in an all-reduce") << 0 << "all-reduce"
                                      << "rank 0: step 3 waited 0\\.\\d s in all-reduce of "
                                         "'h\\.0/mlp/c_proj/MatMul_output'" + tail;
    QTest::newRow("in an op's all-reduce") << 0 << "loss"
                                           << "rank 0: step 3 waited 0\\.\\d s in all-reduce inside op "
                                              "'lm_head/loss'" + tail;
    QTest::newRow("in the barrier") << 0 << "barrier"
                                    << "rank 0: step 3 waited 0\\.\\d s in the barrier that starts it" + tail;
    QTest::newRow("after a queued all-gather") << 0 << "queued"
                                               << "rank 0: step 3 waited 0\\.\\d s after queuing all-gather of "
                                                  "'h\\.0/mlp/c_proj/MatMul_output'" + tail;
    QTest::newRow("computing") << 0 << "compute" << "rank 0: step 3 ran 0\\.\\d s in op 'lm_head/loss'" + tail;
    QTest::newRow("verification") << 0 << "verification"
                                   << "rank 0: the verification step waited 0\\.\\d s in all-reduce of "
                                      "'h\\.0/mlp/c_proj/MatMul_output'" + tail;
    // A later rank waits its stagger: the lowest waiting rank speaks first.
    QTest::newRow("rank 1 waits 2 s more") << 1 << "all-reduce"
                                           << "rank 1: step 3 waited 2\\.\\d s in all-reduce of "
                                              "'h\\.0/mlp/c_proj/MatMul_output'" + tail;
}

void TestCommunicator::watchdogNamesTheStall()
{
    QFETCH(int, rank);
    QFETCH(QString, where);
    QFETCH(QString, expected);
    Recorded recorded;
    exec::Watchdog watchdog(rank, 0, recorded.action());
    watchdog.setLimit(0.2, 1.0);
    const std::string tensor = "h.0/mlp/c_proj/MatMul_output", op = "lm_head/loss";
    QElapsedTimer clock;
    clock.start();
    if (where == QLatin1String("verification"))
        watchdog.beginStep(exec::Watchdog::Phase::Verification, 0);
    else
        watchdog.beginStep(exec::Watchdog::Phase::Measured, 3);
    if (where == QLatin1String("barrier")) {
        watchdog.enterBarrier();
    } else if (where == QLatin1String("queued")) {
        watchdog.workingOn(&tensor, false);
        watchdog.issued(exec::Collective::AllGather);
        watchdog.workingOn(&op, true);
    } else if (where == QLatin1String("loss") || where == QLatin1String("compute")) {
        watchdog.workingOn(&op, true);
        if (where == QLatin1String("loss"))
            watchdog.enter(exec::Collective::AllReduce);
    } else {
        watchdog.workingOn(&tensor, false);
        watchdog.enter(exec::Collective::AllReduce);
    }
    QVERIFY(recorded.wait(10));
    QVERIFY(clock.elapsed() >= 200 + 2000 * rank);
    std::lock_guard lock(recorded.mutex);
    QCOMPARE(recorded.messages.size(), std::size_t(1));
    const QString message = QString::fromStdString(recorded.messages.front());
    QVERIFY2(QRegularExpression(QLatin1Char('^') + expected + QLatin1Char('$')).match(message).hasMatch(),
             qPrintable(message));
}

void TestCommunicator::watchdogStaysQuietWhileStepsEndInTime()
{
    Recorded recorded;
    exec::Watchdog watchdog(0, 0, recorded.action());
    watchdog.setLimit(0.3, 0.0);
    const std::string tensor = "x";
    for (int s = 1; s <= 6; ++s) {
        watchdog.beginStep(exec::Watchdog::Phase::Measured, s);
        watchdog.workingOn(&tensor, false);
        watchdog.enter(exec::Collective::AllReduce);
        QTest::qSleep(100);
        watchdog.leave();
        watchdog.endStep();
    }
    QVERIFY(!recorded.wait(1));
}

void TestCommunicator::watchdogLimits()
{
    exec::Watchdog watchdog(0, 0, [](const std::string &) {});
    watchdog.setLimit(2.5, 30.0);
    QCOMPARE(watchdog.limit(), 2.5);  // --step-timeout as given
    watchdog.setLimit(0.0, 0.001);
    QCOMPARE(watchdog.limit(), exec::Watchdog::kLimitFloorSeconds);
    watchdog.setLimit(0.0, 7.0);
    QCOMPARE(watchdog.limit(), 7.0 * exec::Watchdog::kLimitMultiple);
}

QTEST_APPLESS_MAIN(TestCommunicator)
#include "tst_communicator.moc"
