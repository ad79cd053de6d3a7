#include "ir/error.h"
#include "plan/runreport.h"

#include <QtTest>

using namespace tapestry;
using namespace tapestry::plan;

namespace {

ReportStart sampleStart()
{
    ReportStart s;
    s.model = "zoo:gpt2?layers=2";
    s.plan = "plan.json";
    s.method = "megatron";
    s.mesh = "2x2";
    s.ranks = 4;
    s.objective = "loss";
    s.tokensPerStep = 64;
    s.flopsPerStepPerRank = 1.5e9;
    s.gemmsPerStepPerRank = {{false, true, 64, 768, 256, 3}, {true, false, 256, 768, 64, 1}};
    s.arenaBytesPerRank = 1 << 20;
    s.planAllReduces = 8;
    s.predicted = {"cpu-loopback", 0.02, 0.015, 0.005, 0.011, 0.004, {{"all_reduce", 0.004}, {"all_gather", 0.001}},
                   {{"gemm", 0.011}, {"softmax", 0.003}, {"other", 0.001}}};
    s.backend = "cpu";
    s.device = "CPU (OpenBLAS)";
    s.precision = "fp32";
    return s;
}

StepFigures sampleFigures()
{
    StepFigures f;
    f.stepTime = 0.025;
    f.forward = 0.01;
    f.backward = 0.012;
    f.update = 0.003;
    f.comm = 0.006;
    f.gemm = 0.011;
    f.otherKernels = 0.004;
    f.collectives = {{"all_reduce", {8, 4096, 0.006}}};
    f.tokensPerSecond = 2560;
    f.gflopsPerRank = 60;
    f.gemmGflopsPerRank = 136;
    f.kernelSeconds = {{"gemm", 0.011}, {"normalization", 0.0015}, {"other", 0.0025}};
    return f;
}

ReportSummary sampleSummary(bool verified)
{
    ReportSummary s;
    s.model = "zoo:gpt2?layers=2";
    s.plan = "plan.json";
    s.mesh = "2x2";
    s.ranks = 4;
    s.steps = 3;
    s.firstLoss = 6.9;
    s.lastLoss = 6.7;
    s.mean = sampleFigures();
    s.predictedStepTime = 0.02;
    s.meshProfile = "cpu-loopback";
    s.predictedOverMeasured = 0.8;
    s.backend = "cpu";
    s.device = "CPU (OpenBLAS)";
    s.precision = "fp32";
    s.tflopsPerRank = 0.06;
    s.devicePeakTflops = 1.0;
    s.fractionOfPeak = 0.06;
    if (verified)
        s.verification = ReportVerification{true, 1e-6, "loss", 1e-4, 12, 6.9, 6.9};
    return s;
}

ReportEvent readOne(const std::string &line)
{
    RunReportReader reader("report");
    auto event = reader.read(std::string_view(line));
    if (!event)
        throw std::runtime_error("no event read from " + line);
    return *event;
}

} // namespace

class TestRunReport : public QObject {
    Q_OBJECT

private slots:
    void roundTrip_data()
    {
        QTest::addColumn<int>("which");
        QTest::newRow("hello over stdout") << 0;
        QTest::newRow("hello over tcp") << 1;
        QTest::newRow("start") << 2;
        QTest::newRow("step") << 3;
        QTest::newRow("summary") << 4;
        QTest::newRow("summary with verification") << 5;
        QTest::newRow("calibration") << 6;
        QTest::newRow("error") << 7;
        QTest::newRow("summary of a pipeline") << 8;
    }

    void roundTrip()
    {
        QFETCH(int, which);
        ReportEvent event;
        switch (which) {
        case 0: event = ReportHello{kRunReportSchema, "tapestry-exec", 4, std::nullopt}; break;
        case 1: event = ReportHello{kRunReportSchema, "tapestry-exec", 2, "s3cret"}; break;
        case 2: event = sampleStart(); break;
        case 3: event = ReportStep{2, 3, 6.8, sampleFigures()}; break;
        case 4: event = sampleSummary(false); break;
        case 5: event = sampleSummary(true); break;
        case 6: event = ReportCalibration{"-", nlohmann::json{{"format", "tapestry.mesh-profile"}}}; break;
        case 8: {
            ReportSummary s = sampleSummary(true);
            ReportPipeline p;
            p.stages = {{{false, 0, 0, 0.0, 0.001}, {true, 0, 0, 0.002, 0.004}},
                        {{false, 0, 1, 0.001, 0.002}, {true, 0, 1, 0.0015, 0.0025}}};
            p.bubbleFraction = 0.25;
            p.predictedBubbleFraction = 0.2;
            s.pipeline = p;
            event = s;
            break;
        }
        default: event = ReportError{"plan.json: mesh: 4 devices but the job has 2 ranks"}; break;
        }
        const std::string line = reportLine(event);
        QVERIFY(line.find('\n') == std::string::npos);
        QVERIFY(readOne(line) == event);
    }

    // The field names of executor/REPORT.md are the wire format.
    void wireNames()
    {
        const nlohmann::json start = toJson(sampleStart());
        QCOMPARE(QString::fromStdString(start["event"].get<std::string>()), QStringLiteral("start"));
        for (const char *key : {"model", "plan", "method", "mesh", "ranks", "objective", "tokens_per_step",
                                "flops_per_step_per_rank", "gemms_per_step_per_rank", "arena_bytes_per_rank",
                                "plan_all_reduces", "predicted_step_time_s", "mesh_profile", "backend", "device",
                                "precision", "predicted_compute_s", "predicted_gemm_s", "predicted_other_kernels_s",
                                "predicted_comm_s", "predicted_collectives_s"})
            QVERIFY2(start.contains(key), key);
        QCOMPARE(start["gemms_per_step_per_rank"][0]["trans_b"].get<bool>(), true);
        QCOMPARE(start["predicted_gemm_s"].get<double>(), 0.011);
        QCOMPARE(start["predicted_other_kernels_s"].get<double>(), 0.004);
        QCOMPARE(start["predicted_kernels_s"]["softmax"].get<double>(), 0.003);
        const nlohmann::json summary = toJson(sampleSummary(true));
        for (const char *key : {"step_time_s", "forward_s", "backward_s", "update_s", "comm_s", "gemm_s",
                                "other_kernels_s", "collectives", "tokens_per_s", "gflops_per_rank",
                                "gemm_gflops_per_rank", "first_loss", "last_loss", "predicted_over_measured",
                                "tflops_per_rank", "device_peak_tflops", "fraction_of_peak", "verification"})
            QVERIFY2(summary.contains(key), key);
        QCOMPARE(summary["collectives"]["all_reduce"]["calls"].get<double>(), 8.0);
        QCOMPARE(summary["kernels_s"]["normalization"].get<double>(), 0.0015);
        QCOMPARE(summary["verification"]["tensors_compared"].get<int>(), 12);
    }

    void unknownSchemaRefused()
    {
        RunReportReader reader("tapestry-exec report");
        try {
            reader.read(std::string_view(R"({"event":"hello","schema":2,"program":"tapestry-exec","ranks":2})"));
            QFAIL("schema 2 was read");
        } catch (const TapestryError &e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(!what.contains(u'\n'), qPrintable(what));
            QVERIFY2(what.contains(QStringLiteral("tapestry-exec report")), qPrintable(what));
            QVERIFY2(what.contains(QStringLiteral("report schema 2 is not one this reader knows (schema 1)")),
                     qPrintable(what));
        }
        QVERIFY_THROWS_EXCEPTION(TapestryError, reader.read(std::string_view(R"({"event":"hello","ranks":2})")));
    }

    void malformedLineNamed_data()
    {
        QTest::addColumn<QString>("line");
        QTest::addColumn<QString>("expected");
        QTest::newRow("not json") << QStringLiteral("step 2/3 done") << QStringLiteral("line 2: not a JSON object");
        QTest::newRow("array") << QStringLiteral("[1,2]") << QStringLiteral("line 2: not a JSON object");
        QTest::newRow("no event") << QStringLiteral(R"({"step":1})") << QStringLiteral("line 2: no \"event\" field");
        QTest::newRow("wrong type") << QStringLiteral(R"({"event":"step","step_time_s":"fast"})")
                                    << QStringLiteral("line 2: step field 'step_time_s' has the wrong type (string)");
        QTest::newRow("collectives not an object")
            << QStringLiteral(R"({"event":"summary","collectives":[1]})")
            << QStringLiteral("line 2: summary field 'collectives' is not an object");
    }

    void malformedLineNamed()
    {
        QFETCH(QString, line);
        QFETCH(QString, expected);
        RunReportReader reader("run.jsonl");
        QVERIFY(reader.read(std::string_view(reportLine(ReportHello{kRunReportSchema, "tapestry-exec", 1, {}}))));
        try {
            reader.read(std::string_view(line.toStdString()));
            QFAIL("a malformed line was read");
        } catch (const TapestryError &e) {
            QCOMPARE(QString::fromUtf8(e.what()), QStringLiteral("run.jsonl: ") + expected);
        }
    }

    // Readers skip what they do not know: events, fields, blank lines.
    void unknownSkipped()
    {
        RunReportReader reader("report");
        QVERIFY(!reader.read(std::string_view(R"({"event":"loaded","model":"m","ranks":1,"ops":3})")));
        QVERIFY(!reader.read(std::string_view("  ")));
        const auto step = reader.read(std::string_view(R"({"event":"step","step":1,"steps":2,"loss":1.5,"new_field":[1]})"));
        QVERIFY(step && std::holds_alternative<ReportStep>(*step));
        QCOMPARE(std::get<ReportStep>(*step).loss, 1.5);
        QCOMPARE(reader.lines(), 3);
    }
};

QTEST_GUILESS_MAIN(TestRunReport)
#include "tst_runreport.moc"
