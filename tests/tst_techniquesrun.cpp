// The memory techniques run on MPI ranks, each verified against one
// process: selective and full recomputation, ZeRO 1, 2 and 3 on a 2x2 mesh
// (data-parallel and Megatron plans), micro-batches, and all at once. Beside
// the verdict (gradients, updated parameters and the next step's loss), each
// checks from the report that the technique is really in effect against
// the same plan without techniques: recomputation runs more GEMMs and keeps
// fewer activations; ZeRO reduce-scatters gradients, all-gathers parameters
// and holds a quarter of the optimizer state (1), of the gradients (2), of
// the parameters (3); micro-batches run the same FLOPs in m times the GEMM
// calls and keep fewer activations.
#include "processrun.h"

#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

namespace {

const QString kGpt = QStringLiteral("zoo:gpt2?layers=2&batch=8&seq=16&hidden=32&heads=2&vocab=64&positions=16");

using tapestry::testing::lastJsonLine;
using Run = tapestry::testing::ProcessRun;

Run run(const QString &program, const QStringList &args)
{
    return tapestry::testing::runProcess(program, args, 120000);
}

// What one verified run reports.
struct Figures {
    bool ran = false;
    QString error;
    QJsonObject start, summary;
    double memory(const char *part) const
    {
        return summary.value(QStringLiteral("memory_per_rank")).toObject().value(QLatin1String(part)).toDouble();
    }
    double calls(const char *kind) const
    {
        return summary.value(QStringLiteral("collectives"))
            .toObject()
            .value(QLatin1String(kind))
            .toObject()
            .value(QStringLiteral("calls"))
            .toDouble();
    }
    double flops() const { return start.value(QStringLiteral("flops_per_step_per_rank")).toDouble(); }
    // GEMM calls per step.
    double gemmCalls() const
    {
        double n = 0;
        for (const QJsonValue g : start.value(QStringLiteral("gemms_per_step_per_rank")).toArray())
            n += g.toObject().value(QStringLiteral("calls")).toDouble();
        return n;
    }
};

} // namespace

class TestTechniquesRun : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void verified_data();
    void verified();
    // A plan with the optimizer offloaded to the host is costed, not run:
    // the executor says so in one line naming the plan and exits 2.
    void offloadIsRefused();

private:
    // Plans with `options`, runs it on 4 ranks with --verify and Adam.
    Figures runWith(const QString &search, const QStringList &options);
    QTemporaryDir m_dir;
    QMap<QString, Figures> m_baseline;  // by search method
};

void TestTechniquesRun::initTestCase()
{
    QVERIFY(m_dir.isValid());
}

Figures TestTechniquesRun::runWith(const QString &search, const QStringList &options)
{
    Figures f;
    const QString path = m_dir.filePath(QString(search + options.join(QString())).replace(QRegularExpression("[^a-z0-9]"), "_") +
                                        QStringLiteral(".json"));
    const Run plan = run(QStringLiteral(TAPESTRY_CLI),
                         QStringList{QStringLiteral("plan"), kGpt, QStringLiteral("--mesh"), QStringLiteral("2x2"),
                                     QStringLiteral("--search"), search, QStringLiteral("--mesh-profile"),
                                     QStringLiteral("cpu-loopback"), QStringLiteral("-o"), path} +
                             options);
    if (plan.exitCode != 0) {
        f.error = QString::fromUtf8(plan.err);
        return f;
    }
    const Run r = run(QStringLiteral("mpirun"),
                      {QStringLiteral("--oversubscribe"), QStringLiteral("-np"), QStringLiteral("4"),
                       QStringLiteral(TAPESTRY_EXEC), QStringLiteral("--model"), kGpt, QStringLiteral("--plan"), path,
                       QStringLiteral("--verify"), QStringLiteral("--optimizer"), QStringLiteral("adam"),
                       QStringLiteral("--steps"), QStringLiteral("2"), QStringLiteral("--report"), QStringLiteral("-")});
    f.ran = r.exitCode == 0;
    f.error = QString::fromUtf8(r.err);
    f.start = lastJsonLine(r.out, QStringLiteral("start"));
    f.summary = lastJsonLine(r.out, QStringLiteral("summary"));
    return f;
}

void TestTechniquesRun::offloadIsRefused()
{
    const Figures f = runWith(QStringLiteral("dp"), {QStringLiteral("--offload-optimizer"), QStringLiteral("on")});
    QVERIFY(!f.ran);
    QVERIFY2(f.error.contains(QStringLiteral("offload")), qPrintable(f.error));
    QVERIFY2(f.error.contains(QStringLiteral(".json")), qPrintable(f.error));
}

void TestTechniquesRun::verified_data()
{
    QTest::addColumn<QString>("search");
    QTest::addColumn<QString>("recompute");
    QTest::addColumn<int>("zero");
    QTest::addColumn<int>("microBatches");
    QTest::newRow("selective recomputation, megatron") << "megatron" << "selective" << 0 << 1;
    QTest::newRow("full recomputation, dp") << "dp" << "full" << 0 << 1;
    QTest::newRow("full recomputation, megatron") << "megatron" << "full" << 0 << 1;
    QTest::newRow("ZeRO-1, dp") << "dp" << "none" << 1 << 1;
    QTest::newRow("ZeRO-2, dp") << "dp" << "none" << 2 << 1;
    QTest::newRow("ZeRO-3, dp") << "dp" << "none" << 3 << 1;
    QTest::newRow("ZeRO-3, megatron") << "megatron" << "none" << 3 << 1;
    QTest::newRow("2 micro-batches, dp") << "dp" << "none" << 0 << 2;
    QTest::newRow("4 micro-batches, megatron") << "megatron" << "none" << 0 << 4;
    QTest::newRow("ZeRO-2, 2 micro-batches, megatron") << "megatron" << "none" << 2 << 2;
    QTest::newRow("ZeRO-3, full, 2 micro-batches, dp") << "dp" << "full" << 3 << 2;
}

void TestTechniquesRun::verified()
{
    QFETCH(QString, search);
    QFETCH(QString, recompute);
    QFETCH(int, zero);
    QFETCH(int, microBatches);
    if (!m_baseline.contains(search)) {
        m_baseline[search] = runWith(search, {QStringLiteral("--flash-attention"), QStringLiteral("off"),
                                              QStringLiteral("--recompute"), QStringLiteral("none"),
                                              QStringLiteral("--zero"), QStringLiteral("0"),
                                              QStringLiteral("--micro-batches"), QStringLiteral("1"),
                                              QStringLiteral("--offload-optimizer"), QStringLiteral("off")});
        QVERIFY2(m_baseline[search].ran, qPrintable(m_baseline[search].error));
    }
    const Figures &base = m_baseline[search];
    const Figures f =
        runWith(search, {QStringLiteral("--flash-attention"), QStringLiteral("off"), QStringLiteral("--recompute"),
                         recompute, QStringLiteral("--zero"), QString::number(zero), QStringLiteral("--micro-batches"),
                         QString::number(microBatches), QStringLiteral("--offload-optimizer"), QStringLiteral("off")});
    QVERIFY2(f.ran, qPrintable(f.error));
    const QJsonObject verdict = f.summary.value(QStringLiteral("verification")).toObject();
    QVERIFY2(verdict.value(QStringLiteral("passed")).toBool(), qPrintable(f.error));
    QVERIFY(verdict.value(QStringLiteral("max_relative_error")).toDouble() <= 1e-4);
    // Gradients, outputs, every parameter after the update and the next
    // loss: the 28 parameters (wte, wpe, ln_f's two, and per layer ln_1,
    // c_attn, attn.c_proj, ln_2, mlp.c_fc and mlp.c_proj, weight and bias
    // each) twice, and more.
    QVERIFY(verdict.value(QStringLiteral("tensors_compared")).toInt() > 2 * 28);
    QVERIFY(f.summary.value(QStringLiteral("peak_memory_bytes_per_rank")).toDouble() > 0);
    QVERIFY(f.summary.value(QStringLiteral("predicted_memory_bytes_per_rank")).toDouble() > 0);
    QVERIFY(f.start.value(QStringLiteral("techniques")).toString() != QStringLiteral("none"));

    if (recompute != QStringLiteral("none")) {
        // The recomputed forward GEMMs, and fewer activations kept.
        QVERIFY2(f.flops() > base.flops(), qPrintable(QString::number(f.flops())));
        if (zero == 0 && microBatches == 1)
            QVERIFY2(f.memory("activations") < base.memory("activations"),
                     qPrintable(QString::number(f.memory("activations")) + " vs " +
                                QString::number(base.memory("activations"))));
    } else {
        QCOMPARE(f.flops(), base.flops());
    }
    if (zero >= 1) {
        QVERIFY(f.calls("reduce_scatter") > 0);
        QVERIFY(f.calls("all_gather") > 0);
        // Adam's moments, a quarter of them on a data-parallel plan (every
        // parameter replicated over both axes), padding aside.
        QVERIFY(f.memory("optimizer") < base.memory("optimizer") * (search == QStringLiteral("dp") ? 0.3 : 0.8));
    }
    if (zero >= 2 && search == QStringLiteral("dp"))
        // The quarter each rank keeps, and the whole gradients still being
        // summed at the peak (the tied embedding's, from the LM head to the
        // lookup).
        QVERIFY2(f.memory("gradients") < base.memory("gradients") * 0.5,
                 qPrintable(QString::number(f.memory("gradients")) + " vs " +
                            QString::number(base.memory("gradients"))));
    if (zero >= 3) {
        QVERIFY(f.memory("parameters") < base.memory("parameters") * (search == QStringLiteral("dp") ? 0.3 : 0.8));
        QVERIFY(f.calls("all_gather") >= 2 * microBatches);
    }
    if (microBatches > 1) {
        // The same FLOPs in more GEMM calls (each linear layer's m times;
        // attention's batched products per sample and head, as many).
        QVERIFY(f.gemmCalls() > base.gemmCalls());
        QCOMPARE(f.start.value(QStringLiteral("tokens_per_step")).toDouble(),
                 base.start.value(QStringLiteral("tokens_per_step")).toDouble());
        if (zero == 0 && recompute == QStringLiteral("none"))
            QVERIFY(f.memory("activations") < base.memory("activations"));
    }
}

QTEST_GUILESS_MAIN(TestTechniquesRun)
#include "tst_techniquesrun.moc"
