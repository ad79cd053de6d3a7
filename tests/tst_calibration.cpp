// Calibration: the alpha-beta fit recovers the link of timings made by the
// cost model itself (any kinds, group sizes, with and without latency); bad
// samples are refused by name; a profile written from a fit reads back to
// the same figures and, in the user's profile folder, is found by name; a
// real tapestry-exec --calibrate on 2 ranks writes a profile that the
// planner loads.
#include "processrun.h"
#include "cost/collectivetime.h"
#include "cost/linkfit.h"
#include "ir/error.h"
#include "sharding/meshprofile.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

using namespace tapestry;
using sharding::CollectiveKind;

namespace {

std::vector<cost::CollectiveSample> synthetic(double latency, double bandwidth, const std::vector<int> &groups)
{
    std::vector<cost::CollectiveSample> samples;
    for (int n : groups) {
        const sharding::MeshAxis axis{"model", n, {"link", bandwidth, latency, {}}};
        for (CollectiveKind kind : {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                                    CollectiveKind::AllToAll})
            for (std::int64_t bytes : {std::int64_t{4} * n, std::int64_t{4096} * n, std::int64_t{1} << 20,
                                       std::int64_t{16} << 20})
                samples.push_back({kind, n, bytes, cost::collectiveTime(kind, bytes, axis)});
    }
    return samples;
}

} // namespace

class TestCalibration : public QObject {
    Q_OBJECT
private slots:
    void fitRecoversSyntheticLinks_data()
    {
        QTest::addColumn<double>("latency");
        QTest::addColumn<double>("bandwidth");
        QTest::addColumn<QList<int>>("groups");
        QTest::newRow("cpu loopback, 2 ranks") << 0.4e-6 << 0.38e9 << QList<int>{2};
        QTest::newRow("nvlink, 8") << 3e-6 << 450e9 << QList<int>{8};
        QTest::newRow("ethernet, 2 4 8") << 30e-6 << 0.125e9 << QList<int>{2, 4, 8};
        QTest::newRow("no latency") << 0.0 << 1e9 << QList<int>{4};
    }
    void fitRecoversSyntheticLinks()
    {
        QFETCH(double, latency);
        QFETCH(double, bandwidth);
        QFETCH(QList<int>, groups);
        const auto samples = synthetic(latency, bandwidth, std::vector<int>(groups.begin(), groups.end()));
        const cost::LinkFit fit = cost::fitLink(samples);
        QCOMPARE(fit.samples, static_cast<int>(samples.size()));
        QVERIFY2(std::abs(fit.latency - latency) <= 1e-9 * std::max(latency, 1e-6),
                 qPrintable(QString::number(fit.latency, 'g', 12)));
        QVERIFY2(std::abs(fit.bandwidth - bandwidth) <= 1e-9 * bandwidth,
                 qPrintable(QString::number(fit.bandwidth, 'g', 12)));
        QVERIFY(fit.maxRelativeError < 1e-9);
    }

    void fitOfNoisyTimingsStaysClose()
    {
        auto samples = synthetic(5e-6, 2e9, {4});
        for (std::size_t i = 0; i < samples.size(); ++i)
            samples[i].seconds *= i % 2 ? 1.05 : 0.95;
        const cost::LinkFit fit = cost::fitLink(samples);
        QVERIFY(fit.latency > 4e-6 && fit.latency < 6e-6);
        QVERIFY(fit.bandwidth > 1.8e9 && fit.bandwidth < 2.2e9);
        QVERIFY(fit.maxRelativeError > 0.04 && fit.maxRelativeError < 0.2);
    }

    void refusesSamplesThatCannotFit_data()
    {
        QTest::addColumn<int>("which");
        QTest::addColumn<QString>("problem");
        QTest::newRow("one size") << 0 << "two sizes";
        QTest::newRow("zero time") << 1 << "positive time";
        QTest::newRow("one device") << 2 << "2+ devices";
        QTest::newRow("flat times") << 3 << "no bandwidth";
    }
    void refusesSamplesThatCannotFit()
    {
        QFETCH(int, which);
        QFETCH(QString, problem);
        std::vector<cost::CollectiveSample> samples{{CollectiveKind::AllReduce, 2, 1024, 1e-3},
                                                    {CollectiveKind::AllReduce, 2, 1 << 20, 2e-3}};
        if (which == 0)
            samples[1].bytes = 1024;
        if (which == 1)
            samples[0].seconds = 0;
        if (which == 2)
            samples[0].devices = 1;
        if (which == 3)
            samples[1].seconds = 0.5e-3;  // the larger message is faster
        try {
            cost::fitLink(samples, "sweep.json");
            QFAIL("no error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("sweep.json")) &&
                         QString::fromUtf8(e.what()).contains(problem),
                     e.what());
        }
    }

    // A known bandwidth and the latency fitted alone: exact on clean
    // timings; on timings too flat for fitLink (a busy machine's waits) a
    // positive latency under the given bandwidth.
    void latencyFitsUnderAGivenBandwidth()
    {
        const auto clean = synthetic(3e-6, 2e9, {2, 4});
        const cost::LinkFit fit = cost::fitLatency(clean, 2e9);
        QVERIFY2(std::abs(fit.latency - 3e-6) <= 1e-9 * 3e-6, qPrintable(QString::number(fit.latency, 'g', 12)));
        QCOMPARE(fit.bandwidth, 2e9);
        QCOMPARE(fit.samples, static_cast<int>(clean.size()));
        QVERIFY(fit.maxRelativeError < 1e-9);

        const std::vector<cost::CollectiveSample> flat{{CollectiveKind::AllReduce, 2, 1024, 1e-3},
                                                       {CollectiveKind::AllReduce, 2, 1 << 20, 0.5e-3}};
        QVERIFY_THROWS_EXCEPTION(TapestryError, cost::fitLink(flat));
        const cost::LinkFit busy = cost::fitLatency(flat, 4e9);
        QCOMPARE(busy.bandwidth, 4e9);
        // Between the per-step latencies each sample alone would give.
        QVERIFY2(busy.latency > 1.2e-4 && busy.latency < 5e-4, qPrintable(QString::number(busy.latency, 'g', 6)));

        // Times below what the bandwidth alone explains hold the latency at 0.
        const cost::LinkFit fast = cost::fitLatency(flat, 1e6);
        QCOMPARE(fast.latency, 0.0);
        try {
            cost::fitLatency(flat, 0.0, "sweep.json");
            QFAIL("no error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("sweep.json")), e.what());
        }
    }

    void writtenProfileLoads()
    {
        const cost::LinkFit fit = cost::fitLink(synthetic(0.7e-6, 0.5e9, {2}));
        sharding::MeshProfile p;
        p.name = "this-box";
        p.description = "measured";
        p.intraNodeDevices = 2;
        p.device.name = "CPU core";
        p.device.memoryBytes = std::int64_t{4} << 30;
        p.device.peakFlops = {{"float32", 20e9}, {"bfloat16", 5e9}};
        p.device.achievableFraction = 0.4;
        p.device.memoryBandwidth = 12e9;
        p.device.kernelLaunch = 2e-7;
        p.device.gemmEfficiency = {{8e3, 0.3}, {8e6, 0.9}};
        p.device.kernelBandwidth = {{"transpose", 3e9}, {"softmax", 6e9}};
        p.intraNode = {"MPI", fit.bandwidth, fit.latency, {{"reduce-scatter", {fit.bandwidth / 2, 2e-6}}}};
        p.interNode = {"TCP", 0.1e9, 30e-6, {}};
        const std::string text = sharding::writeMeshProfileJson(p);
        const sharding::MeshProfile back = sharding::readMeshProfileJson(text, "written");
        QCOMPARE(back.name, p.name);
        QCOMPARE(back.intraNodeDevices, 2);
        QCOMPARE(back.device.peakFlops, p.device.peakFlops);
        QCOMPARE(back.device.achievableFraction, 0.4);
        QCOMPARE(back.device.memoryBandwidth, 12e9);
        QCOMPARE(back.device.kernelLaunch, 2e-7);
        QCOMPARE(back.device.memoryBytes, p.device.memoryBytes);
        QCOMPARE(back.intraNode.bandwidth, fit.bandwidth);
        QCOMPARE(back.intraNode.latency, fit.latency);
        QCOMPARE(back.interNode.latency, 30e-6);
        QVERIFY(back.device.gemmEfficiency == p.device.gemmEfficiency);
        QVERIFY(back.device.kernelBandwidth == p.device.kernelBandwidth);
        QCOMPARE(back.device.bandwidthOf("transpose"), 3e9);
        QCOMPARE(back.device.bandwidthOf("activation"), 12e9);  // not measured apart: the memory bandwidth
        QCOMPARE(back.device.bandwidthOf(""), 12e9);
        QVERIFY(back.intraNode.byKind == p.intraNode.byKind);
        QVERIFY(back.interNode.byKind.empty());

        // In the user's folder it is a profile like the shipped ones.
        QTemporaryDir data;
        qputenv("XDG_DATA_HOME", data.path().toUtf8());
        QVERIFY(QDir().mkpath(data.filePath(QStringLiteral("tapestry/meshes"))));
        QFile f(data.filePath(QStringLiteral("tapestry/meshes/this-box.json")));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray::fromStdString(text));
        f.close();
        const auto names = sharding::meshProfileNames();
        QVERIFY(std::find(names.begin(), names.end(), "this-box") != names.end());
        QVERIFY(std::find(names.begin(), names.end(), "cpu-loopback") != names.end());
        QCOMPARE(sharding::findMeshProfile("this-box").device.achievableFraction, 0.4);
        qunsetenv("XDG_DATA_HOME");
    }

    // The real thing on 2 ranks, on a small workload so that it is quick.
    void executorWritesAProfileThePlannerLoads()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("box.json"));
        const auto p = tapestry::testing::runProcess(
            QStringLiteral("mpirun"),
            {QStringLiteral("--oversubscribe"), QStringLiteral("-np"), QStringLiteral("2"), QStringLiteral(TAPESTRY_EXEC),
             QStringLiteral("--calibrate"), file, QStringLiteral("--model"),
             QStringLiteral("zoo:gpt2?layers=1&hidden=64&heads=4&seq=16&batch=2&vocab=128")},
            300000);
        QVERIFY2(p.exitCode == 0, p.err.constData());
        const sharding::MeshProfile profile = sharding::loadMeshProfileFile(file.toStdString());
        QCOMPARE(profile.name, std::string("box"));
        QVERIFY(profile.device.peakFlops.at("float32") > 0);
        // The roofline's figures: a memory bus between 100 MB/s and 10 TB/s,
        // a launch of at most a millisecond.
        QVERIFY(profile.device.memoryBandwidth > 1e8 && profile.device.memoryBandwidth < 1e13);
        QVERIFY(profile.device.kernelLaunch >= 0 && profile.device.kernelLaunch <= 1e-3);
        QVERIFY(profile.device.achievableFraction > 0 && profile.device.achievableFraction <= 1);
        QVERIFY(profile.intraNode.bandwidth > 0 && profile.intraNode.latency > 0);
        // GEMMs by size, square products of 16 to 1,024, and each kind of
        // collective fitted apart.
        const auto &gemms = profile.device.gemmEfficiency;
        QCOMPARE(gemms.size(), std::size_t{7});
        QCOMPARE(gemms.front().flops, 2.0 * 16 * 16 * 16);
        QCOMPARE(gemms.back().flops, 2.0 * 1024 * 1024 * 1024);
        QVERIFY(!sharding::gemmEfficiencyProblem(gemms));
        for (const char *family : {"transpose", "activation", "softmax", "normalization"})
            QVERIFY2(profile.device.kernelBandwidth.count(family) && profile.device.kernelBandwidth.at(family) > 1e8 &&
                         profile.device.kernelBandwidth.at(family) < 1e13,
                     family);
        for (const char *kind : {"all-reduce", "all-gather", "reduce-scatter"})
            QVERIFY2(profile.intraNode.byKind.count(kind) && profile.intraNode.byKind.at(kind).bandwidth > 0, kind);

        QFile f(file);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject calibration = QJsonDocument::fromJson(f.readAll()).object().value(QStringLiteral("calibration")).toObject();
        const QJsonArray axes = calibration.value(QStringLiteral("axes")).toArray();
        QCOMPARE(axes.size(), 1);
        QCOMPARE(axes[0].toObject().value(QStringLiteral("samples")).toArray().size(), 18);  // 3 kinds x 6 sizes
        QVERIFY(axes[0].toObject().value(QStringLiteral("within_host")).toBool());

        QProcess plan;
        plan.start(QStringLiteral(TAPESTRY_CLI), {QStringLiteral("plan"), QStringLiteral("zoo:mlp"), QStringLiteral("--mesh"),
                                                 QStringLiteral("2"), QStringLiteral("--search"), QStringLiteral("tap"),
                                                 QStringLiteral("--mesh-profile"), file,
                                                 QStringLiteral("-o"), dir.filePath(QStringLiteral("plan.json"))});
        QVERIFY(plan.waitForFinished(60000));
        QVERIFY2(plan.exitCode() == 0, plan.readAllStandardError().constData());
    }

    // A GEMM's share of peak by its calls' size: the table interpolated in
    // log FLOPs, flat past its ends; without one, the achievable fraction.
    void gemmEfficiencyInterpolates()
    {
        sharding::DeviceProfile d;
        d.achievableFraction = 0.7;
        QCOMPARE(d.gemmFraction(1e9), 0.7);
        d.gemmEfficiency = {{1e3, 0.5}, {1e6, 0.9}, {1e9, 1.0}};
        QCOMPARE(d.gemmFraction(10), 0.5);
        QCOMPARE(d.gemmFraction(1e3), 0.5);
        QVERIFY(std::abs(d.gemmFraction(std::sqrt(1e3 * 1e6)) - 0.7) < 1e-12);
        QCOMPARE(d.gemmFraction(1e6), 0.9);
        QCOMPARE(d.gemmFraction(1e12), 1.0);
        QCOMPARE(d.gemmFraction(0), 0.7);  // not a GEMM
    }

    // A kind's own fit prices that kind alone.
    void collectiveTimeByKind()
    {
        sharding::MeshAxis axis{"model", 2, {"link", 4e9, 1e-5, {}}};
        const double allReduce = cost::collectiveTime(CollectiveKind::AllReduce, 1 << 20, axis);
        const double scatter = cost::collectiveTime(CollectiveKind::ReduceScatter, 1 << 20, axis);
        axis.link.byKind["reduce-scatter"] = {1e9, 2e-5};
        QCOMPARE(cost::collectiveTime(CollectiveKind::AllReduce, 1 << 20, axis), allReduce);
        QCOMPARE(cost::collectiveTime(CollectiveKind::ReduceScatter, 1 << 20, axis), 2e-5 + 0.5 * (1 << 20) / 1e9);
        QVERIFY(cost::collectiveTime(CollectiveKind::ReduceScatter, 1 << 20, axis) > scatter);
    }

    // A table that is no table is refused by its path.
    void badGemmTableRefused_data()
    {
        QTest::addColumn<QString>("table");
        QTest::addColumn<QString>("problem");
        QTest::newRow("descending") << "[[1e6, 0.9], [1e3, 0.5]]" << "FLOPs must ascend";
        QTest::newRow("fraction above 1") << "[[1e3, 1.5]]" << "fraction in (0, 1]";
        QTest::newRow("not pairs") << "[1e3, 0.5]" << "[FLOPs of one GEMM call, fraction of peak]";
    }

    void unknownKernelFamilyRefused()
    {
        std::string text = sharding::writeMeshProfileJson(sharding::findMeshProfile("cpu-loopback"));
        const std::string key = "\"achievable_fraction\"";
        text.insert(text.find(key), "\"kernel_bandwidth_bytes_per_s\": {\"convolution\": 1e9}, ");
        try {
            sharding::readMeshProfileJson(text, "box.json");
            QFAIL("accepted");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("kernel_bandwidth_bytes_per_s.convolution")) &&
                         QString::fromUtf8(e.what()).contains(QStringLiteral("unknown kernel family")),
                     e.what());
        }
    }
    void badGemmTableRefused()
    {
        QFETCH(QString, table);
        QFETCH(QString, problem);
        sharding::MeshProfile p = sharding::findMeshProfile("cpu-loopback");
        std::string text = sharding::writeMeshProfileJson(p);
        const std::string key = "\"achievable_fraction\"";
        text.insert(text.find(key), "\"gemm_efficiency\": " + table.toStdString() + ", ");
        try {
            sharding::readMeshProfileJson(text, "box.json");
            QFAIL("accepted");
        } catch (const TapestryError &e) {
            const QString what = QString::fromUtf8(e.what());
            QVERIFY2(what.contains(QStringLiteral("box.json")) && what.contains(QStringLiteral("gemm_efficiency")) &&
                         what.contains(problem),
                     e.what());
        }
    }

    void calibrationRefusesAMeshOfOtherSize()
    {
        const auto p = tapestry::testing::runProcess(
            QStringLiteral("mpirun"),
            {QStringLiteral("--oversubscribe"), QStringLiteral("-np"), QStringLiteral("2"), QStringLiteral(TAPESTRY_EXEC),
             QStringLiteral("--calibrate"), QStringLiteral("-"), QStringLiteral("--mesh"), QStringLiteral("2x2")},
            120000);
        QCOMPARE(p.exitCode, 2);
        QVERIFY(p.out.isEmpty());
    }
};

QTEST_GUILESS_MAIN(TestCalibration)
#include "tst_calibration.moc"
