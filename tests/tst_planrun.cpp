// Plans run on MPI ranks and checked against one process: Megatron's
// column/row split of the tutorial MLP and ABC models on 2 and 4 ranks,
// LESSONS.md case 3 (the 2D MLP on a 4x2 mesh, 8 ranks), a 2-layer GPT with
// the megatron plan on 2 and 4 ranks (vocabulary-parallel embedding and
// loss), each verified; a plan missing an all-reduce failing verification;
// a mesh that does not match the rank count; tapestry-cli run --json.
#include "processrun.h"
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

namespace {

const QString kGpt = QStringLiteral("zoo:gpt2?layers=2&hidden=64&heads=4&vocab=128&seq=16&batch=2");

using Run = tapestry::testing::ProcessRun;
using tapestry::testing::lastJsonLine;

Run run(const QString &program, const QStringList &args, int timeoutMs = 60000)
{
    QProcessEnvironment exec;
    exec.insert(QStringLiteral("TAPESTRY_EXEC"), QStringLiteral(TAPESTRY_EXEC));
    return tapestry::testing::runProcess(program, args, timeoutMs, exec);
}

Run mpirun(int ranks, const QStringList &execArgs)
{
    return run(QStringLiteral("mpirun"), QStringList{QStringLiteral("--oversubscribe"), QStringLiteral("-np"),
                                                     QString::number(ranks), QStringLiteral(TAPESTRY_EXEC)} +
                                             execArgs);
}

QJsonObject readJson(const QString &path)
{
    QFile f(path);
    f.open(QIODevice::ReadOnly);
    return QJsonDocument::fromJson(f.readAll()).object();
}

} // namespace

class TestPlanRun : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void verifiedRun_data();
    void verifiedRun();
    void droppedAllReduceFailsVerification();
    void meshMustMatchRanks();
    void cliRunReportsPassAndThroughput();

private:
    // A reference plan written by tapestry-cli plan into the temporary folder.
    QString referencePlan(const QString &model, const QString &mesh, const QString &method);
    QTemporaryDir m_dir;
};

void TestPlanRun::initTestCase()
{
    QVERIFY(m_dir.isValid());
}

QString TestPlanRun::referencePlan(const QString &model, const QString &mesh, const QString &method)
{
    const QString path = m_dir.filePath(QString(model + mesh + method).replace(QRegularExpression("[^a-z0-9]"), "_") +
                                        QStringLiteral(".json"));
    if (!QFile::exists(path)) {
        const Run r = run(QStringLiteral(TAPESTRY_CLI),
                          {QStringLiteral("plan"), model, QStringLiteral("--mesh"), mesh, QStringLiteral("--search"),
                           method, QStringLiteral("--mesh-profile"), QStringLiteral("cpu-loopback"),
                           // The plain plans: the techniques have their own suite (tst_techniquesrun).
                           QStringLiteral("--flash-attention"), QStringLiteral("off"), QStringLiteral("--recompute"),
                           QStringLiteral("none"), QStringLiteral("--zero"), QStringLiteral("0"),
                           QStringLiteral("--micro-batches"), QStringLiteral("1"), QStringLiteral("--offload-optimizer"),
                           QStringLiteral("off"), QStringLiteral("-o"), path});
        if (r.exitCode != 0)
            qWarning() << r.err;
    }
    return path;
}

void TestPlanRun::verifiedRun_data()
{
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("plan");  // a mesh for a megatron plan, or a sample plan file
    QTest::addColumn<int>("ranks");
    QTest::addColumn<int>("allReduces");  // per step; -1 for another mix of collectives
    QTest::newRow("mlp megatron 2") << "zoo:mlp" << "2" << 2 << 1;
    QTest::newRow("mlp megatron 4") << "zoo:mlp" << "4" << 4 << 1;
    QTest::newRow("abc megatron 2") << "zoo:abc" << "2" << 2 << 1;
    QTest::newRow("mlp 2D 4x2") << "zoo:mlp" << "samples/plans/mlp-2d-4x2.json" << 8 << -1;
    // Embedding, 2 per layer and the loss's max, sum and target logit
    // forward; 2 per layer and the LM head's input backward.
    QTest::newRow("gpt megatron 2") << kGpt << "2" << 2 << 13;
    QTest::newRow("gpt megatron 4") << kGpt << "4" << 4 << 13;
}

void TestPlanRun::verifiedRun()
{
    QFETCH(QString, model);
    QFETCH(QString, plan);
    QFETCH(int, ranks);
    QFETCH(int, allReduces);
    const QString path = plan.endsWith(QStringLiteral(".json"))
                             ? QStringLiteral(TAPESTRY_SOURCE_DIR "/") + plan
                             : referencePlan(model, plan, QStringLiteral("megatron"));
    const Run r = mpirun(ranks, {QStringLiteral("--model"), model, QStringLiteral("--plan"), path,
                                 QStringLiteral("--verify"), QStringLiteral("--steps"), QStringLiteral("2"),
                                 QStringLiteral("--report"), QStringLiteral("-")});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonObject summary = lastJsonLine(r.out, QStringLiteral("summary"));
    const QJsonObject verdict = summary.value(QStringLiteral("verification")).toObject();
    QVERIFY2(verdict.value(QStringLiteral("passed")).toBool(), r.err.constData());
    QVERIFY(verdict.value(QStringLiteral("max_relative_error")).toDouble() <= 1e-4);
    QVERIFY(verdict.value(QStringLiteral("tensors_compared")).toInt() >= 4);
    QCOMPARE(summary.value(QStringLiteral("ranks")).toInt(), ranks);
    QVERIFY(summary.value(QStringLiteral("tokens_per_s")).toDouble() > 0);
    QVERIFY(summary.value(QStringLiteral("predicted_step_time_s")).toDouble() > 0);
    // Kernel time is part of the step, and the GEMMs listed for a benchmark
    // to replay are exactly the FLOPs the rate is computed from.
    const double gemm = summary.value(QStringLiteral("gemm_s")).toDouble();
    QVERIFY(gemm > 0);
    QVERIFY(gemm + summary.value(QStringLiteral("other_kernels_s")).toDouble() <=
            summary.value(QStringLiteral("step_time_s")).toDouble());
    const QJsonObject start = lastJsonLine(r.out, QStringLiteral("start"));
    double gemmFlops = 0;
    for (const QJsonValue g : start.value(QStringLiteral("gemms_per_step_per_rank")).toArray()) {
        const QJsonObject c = g.toObject();
        gemmFlops += 2.0 * c.value(QStringLiteral("m")).toDouble() * c.value(QStringLiteral("n")).toDouble() *
                     c.value(QStringLiteral("k")).toDouble() * c.value(QStringLiteral("calls")).toDouble();
    }
    QCOMPARE(gemmFlops, start.value(QStringLiteral("flops_per_step_per_rank")).toDouble());
    const QJsonObject collectives = summary.value(QStringLiteral("collectives")).toObject();
    if (allReduces >= 0) {
        // Megatron's plans: every collective of a step is an all-reduce, as many as the plan lists.
        QCOMPARE(collectives.keys(), QStringList{QStringLiteral("all_reduce")});
        QCOMPARE(collectives.value(QStringLiteral("all_reduce")).toObject().value(QStringLiteral("calls")).toDouble(),
                 double(allReduces));
        QCOMPARE(readJson(path).value(QStringLiteral("collectives")).toArray().size(), allReduces);
    } else {
        // Case 3: gathers before the matmuls, reduce-scatters after, no all-reduce.
        QVERIFY(collectives.contains(QStringLiteral("all_gather")));
        QVERIFY(collectives.contains(QStringLiteral("reduce_scatter")));
        QVERIFY(!collectives.contains(QStringLiteral("all_reduce")));
    }
}

void TestPlanRun::droppedAllReduceFailsVerification()
{
    for (const QString &model : {QStringLiteral("zoo:mlp"), kGpt}) {
        const Run r = mpirun(2, {QStringLiteral("--model"), model, QStringLiteral("--plan"),
                                 referencePlan(model, QStringLiteral("2"), QStringLiteral("megatron")),
                                 QStringLiteral("--verify"), QStringLiteral("--steps"), QStringLiteral("1"),
                                 QStringLiteral("--test-drop-collective"), QStringLiteral("1")});
        QCOMPARE(r.exitCode, 1);
        QVERIFY2(r.err.contains("verification FAILED"), r.err.constData());
    }
}

void TestPlanRun::meshMustMatchRanks()
{
    const Run r = mpirun(4, {QStringLiteral("--model"), QStringLiteral("zoo:mlp"), QStringLiteral("--plan"),
                             referencePlan(QStringLiteral("zoo:mlp"), QStringLiteral("2"), QStringLiteral("megatron"))});
    QCOMPARE(r.exitCode, 2);
    QVERIFY(r.out.isEmpty());
    QStringList ours;
    for (const QByteArray &line : r.err.split('\n'))
        if (line.startsWith("tapestry-exec:"))
            ours << QString::fromUtf8(line);
    QCOMPARE(ours.size(), 1);
    QVERIFY2(ours[0].contains(QStringLiteral("has 2 devices but the job has 4 ranks")), qPrintable(ours[0]));
}

void TestPlanRun::cliRunReportsPassAndThroughput()
{
    const Run r = run(QStringLiteral(TAPESTRY_CLI),
                      {QStringLiteral("run"), QStringLiteral("zoo:mlp"), QStringLiteral("--plan"),
                       referencePlan(QStringLiteral("zoo:mlp"), QStringLiteral("2"), QStringLiteral("megatron")),
                       QStringLiteral("--np"), QStringLiteral("2"), QStringLiteral("--verify"), QStringLiteral("--steps"),
                       QStringLiteral("2"), QStringLiteral("--json")});
    QVERIFY2(r.exitCode == 0, r.err.constData());
    const QJsonObject j = QJsonDocument::fromJson(r.out).object();
    QVERIFY2(j.value(QStringLiteral("verification")).toObject().value(QStringLiteral("passed")).toBool(),
             r.out.constData());
    QVERIFY(j.value(QStringLiteral("tokens_per_s")).toDouble() > 0);
    QVERIFY(j.value(QStringLiteral("measured_step_time_s")).toDouble() > 0);
    QVERIFY(j.value(QStringLiteral("predicted_step_time_s")).toDouble() > 0);
}

QTEST_GUILESS_MAIN(TestPlanRun)
#include "tst_planrun.moc"
