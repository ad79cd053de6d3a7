#include "ir/error.h"
#include "sharding/mesh.h"
#include "sharding/meshprofile.h"

#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

using namespace tapestry;

class TestMesh : public QObject {
    Q_OBJECT

private slots:
    void parseShape_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("sizes");  // empty: an error
        QTest::newRow("1d") << "8" << "8";
        QTest::newRow("2d") << "2x8" << "2,8";
        QTest::newRow("4x2") << "4x2" << "4,2";
        QTest::newRow("3d") << "2x2x2" << "2,2,2";
        QTest::newRow("empty") << "" << "";
        QTest::newRow("leading x") << "x8" << "";
        QTest::newRow("trailing x") << "8x" << "";
        QTest::newRow("zero") << "0" << "";
        QTest::newRow("letters") << "eight" << "";
        QTest::newRow("comma") << "2,8" << "";
        QTest::newRow("past the device limit") << "1024x1025" << "";
    }
    void parseShape()
    {
        QFETCH(QString, text);
        QFETCH(QString, sizes);
        if (sizes.isEmpty()) {
            try {
                sharding::parseMeshShape(text.toStdString());
                QFAIL("expected an error");
            } catch (const TapestryError &e) {
                QVERIFY(std::string(e.what()).find("--mesh") != std::string::npos);
            }
            return;
        }
        QStringList got;
        for (int n : sharding::parseMeshShape(text.toStdString()))
            got << QString::number(n);
        QCOMPARE(got.join(QLatin1Char(',')), sizes);
    }

    void defaultAxisNames()
    {
        QCOMPARE(sharding::defaultAxisNames(1), std::vector<std::string>{"model"});
        QCOMPARE(sharding::defaultAxisNames(2), (std::vector<std::string>{"data", "model"}));
        QVERIFY_THROWS_EXCEPTION(TapestryError, sharding::defaultAxisNames(3));
    }

    // A mesh written in one line, names as Mesh::toString writes them; what
    // meshText writes reads back to the same sizes and names.
    void meshTextRoundTrips()
    {
        const auto named = sharding::parseMeshText(" 2x2x2 (dp, tp,sp) ");
        QCOMPARE(named.sizes, (std::vector<int>{2, 2, 2}));
        QCOMPARE(named.names, (std::vector<std::string>{"dp", "tp", "sp"}));
        QVERIFY(sharding::parseMeshText("4x2").names.empty());
        const auto profile = sharding::findMeshProfile("dgx-h100");
        for (const auto &[sizes, names] : std::vector<std::pair<std::vector<int>, std::vector<std::string>>>{
                 {{8}, {"model"}}, {{4, 2}, {"data", "model"}}, {{4, 2}, {"x", "y"}}, {{2, 2, 2}, {"dp", "tp", "sp"}}}) {
            const auto mesh = profile.mesh(sizes, names);
            const auto back = sharding::parseMeshText(sharding::meshText(mesh));
            QCOMPARE(back.sizes, sizes);
            QCOMPARE(back.names.empty() ? sharding::defaultAxisNames(sizes.size()) : back.names, names);
            QCOMPARE(sharding::parseMeshText(mesh.toString()).names, names);
        }
        QCOMPARE(sharding::meshText(profile.mesh({4, 2}, {"data", "model"})), std::string("4x2"));
        for (const char *bad : {"2x2x2 (dp, tp)", "2x2 (dp, tp", "2x2x (a, b, c)", "(a)"}) {
            try {
                sharding::parseMeshText(bad);
                QFAIL(bad);
            } catch (const TapestryError &e) {
                QVERIFY2(std::string(e.what()).find(bad) != std::string::npos, e.what());
            }
        }
    }

    void shippedProfilesLoad_data()
    {
        QTest::addColumn<QString>("name");
        for (const char *n : {"dgx-h100", "dgx-h200", "dgx-a100", "pcie-8x", "cpu-loopback"})
            QTest::newRow(n) << n;
    }
    void shippedProfilesLoad()
    {
        QFETCH(QString, name);
        const auto p = sharding::findMeshProfile(name.toStdString());
        QCOMPARE(QString::fromStdString(p.name), name);
        QVERIFY(p.device.memoryBytes > 0);
        QVERIFY(p.device.peak(ir::DType::F32) > 0);
        QVERIFY(p.intraNode.bandwidth > p.interNode.bandwidth);
        QVERIFY(p.device.achievableFraction > 0 && p.device.achievableFraction <= 1);
        // Every shipped profile gives the roofline's figures.
        QVERIFY(p.device.memoryBandwidth > 0);
        QVERIFY(p.device.kernelLaunch > 0 && p.device.kernelLaunch < 1e-4);
    }

    void dgxH100Figures()
    {
        const auto p = sharding::findMeshProfile("dgx-h100");
        QCOMPARE(p.intraNodeDevices, 8);
        QCOMPARE(p.device.peak(ir::DType::BF16), 989e12);
        QCOMPARE(p.device.memoryBytes, std::int64_t{80} * 1024 * 1024 * 1024);
        QCOMPARE(p.intraNode.bandwidth, 450e9);
        QCOMPARE(p.interNode.bandwidth, 50e9);  // 400 Gb/s
        QCOMPARE(p.device.memoryBandwidth, 3.35e12);  // HBM3, the datasheet's
        // Integer dtypes fall back to float32's peak.
        QCOMPARE(p.device.peak(ir::DType::I64), p.device.peak(ir::DType::F32));
    }

    // An axis whose devices all sit in one node gets NVLink, else the network.
    void linkByPosition_data()
    {
        QTest::addColumn<QString>("shape");
        QTest::addColumn<QString>("links");  // per axis: i (intra) or n (network)
        QTest::newRow("8") << "8" << "i";
        QTest::newRow("16") << "16" << "n";
        QTest::newRow("2x8") << "2x8" << "ni";
        QTest::newRow("4x2") << "4x2" << "ii";
        QTest::newRow("8x2") << "8x2" << "ni";
        QTest::newRow("2x2x2") << "2x2x2" << "iii";
        QTest::newRow("4x4x2") << "4x4x2" << "nii";
    }
    void linkByPosition()
    {
        QFETCH(QString, shape);
        QFETCH(QString, links);
        const auto p = sharding::findMeshProfile("dgx-h100");
        const auto sizes = sharding::parseMeshShape(shape.toStdString());
        std::vector<std::string> names;
        for (std::size_t i = 0; i < sizes.size(); ++i)
            names.push_back("a" + std::to_string(i));
        const auto mesh = p.mesh(sizes, names);
        QString got;
        for (const auto &a : mesh.axes)
            got += a.link.name == p.intraNode.name ? QLatin1Char('i') : QLatin1Char('n');
        QCOMPARE(got, links);
        QCOMPARE(mesh.deviceCount(), [&] { int n = 1; for (int s : sizes) n *= s; return n; }());
    }

    void meshNamesAndLookup()
    {
        const auto mesh = sharding::findMeshProfile("dgx-h100").mesh({4, 2}, {"data", "model"});
        QCOMPARE(mesh.toString(), std::string("4x2 (data, model)"));
        QCOMPARE(mesh.axisIndex("model"), std::optional<int>(1));
        QCOMPARE(mesh.axisIndex("pipe"), std::optional<int>());
        QVERIFY_THROWS_EXCEPTION(TapestryError,
                                 sharding::findMeshProfile("dgx-h100").mesh({4, 2}, {"data"}));
        QVERIFY_THROWS_EXCEPTION(TapestryError,
                                 sharding::findMeshProfile("dgx-h100").mesh({4, 2}, {"x", "x"}));
    }

    // Sizes whose product overflows (64 bits here) are refused with the
    // device limit, as are sizes below 1; 2^20 devices are a mesh.
    void meshPastTheDeviceLimitIsRefused()
    {
        const auto profile = sharding::findMeshProfile("dgx-h100");
        QCOMPARE(profile.mesh({1024, 1024}, {"data", "model"}).deviceCount(), 1 << 20);
        for (const auto &sizes : std::vector<std::vector<int>>{{1024, 1025}, {999999, 999999, 999999, 999999}, {0, 2}}) {
            std::vector<std::string> names{"a", "b", "c", "d"};
            names.resize(sizes.size());
            try {
                profile.mesh(sizes, names);
                QFAIL("expected an error");
            } catch (const TapestryError &e) {
                QVERIFY2(std::string(e.what()).starts_with("--mesh: "), e.what());
            }
        }
        // With axis names too, the error says why.
        try {
            sharding::parseMeshText("1024x1025 (a, b)");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            QVERIFY2(std::string(e.what()).find("at most 1048576 devices") != std::string::npos, e.what());
        }
    }

    void badProfileNamesFileAndPath_data()
    {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("path");
        const QString good = QStringLiteral(
            R"({"format":"tapestry.mesh-profile","version":1,"name":"t","description":"d","intra_node_devices":4,)"
            R"("device":{"name":"x","memory_bytes":1000,"peak_flops":{"float32":1e12},"achievable_fraction":0.5},)"
            R"("links":{"intra_node":{"name":"a","bandwidth_bytes_per_s":1e9,"latency_s":1e-6},)"
            R"("inter_node":{"name":"b","bandwidth_bytes_per_s":1e8,"latency_s":1e-5}}})");
        QTest::newRow("not json") << "{" << "not valid JSON";
        QTest::newRow("format") << QString(good).replace("tapestry.mesh-profile", "other") << "$.format";
        QTest::newRow("memory missing") << QString(good).replace(R"("memory_bytes":1000,)", "")
                                        << "$.device.memory_bytes";
        QTest::newRow("bandwidth negative") << QString(good).replace("1e8", "-1")
                                            << "$.links.inter_node.bandwidth_bytes_per_s";
        QTest::newRow("dtype") << QString(good).replace(R"("float32":1e12)", R"("float32":1e12,"fp7":1)")
                               << "$.device.peak_flops.fp7";
        QTest::newRow("fraction") << QString(good).replace("0.5", "1.5") << "$.device.achievable_fraction";
        QTest::newRow("memory bandwidth zero")
            << QString(good).replace(R"("achievable_fraction":0.5)", R"("achievable_fraction":0.5,"memory_bandwidth_bytes_per_s":0)")
            << "$.device.memory_bandwidth_bytes_per_s";
        QTest::newRow("kernel launch past a second")
            << QString(good).replace(R"("achievable_fraction":0.5)", R"("achievable_fraction":0.5,"kernel_launch_s":2)")
            << "$.device.kernel_launch_s";
        QTest::newRow("kernel launch a string")
            << QString(good).replace(R"("achievable_fraction":0.5)", R"("achievable_fraction":0.5,"kernel_launch_s":"3us")")
            << "$.device.kernel_launch_s";
        QTest::newRow("number past a double") << QString(good).replace("1e-6", "1e999") << "not valid JSON";
        QTest::newRow("devices per node past an int")
            << QString(good).replace(R"("intra_node_devices":4)", R"("intra_node_devices":4294967300)")
            << "$.intra_node_devices";
        QTest::newRow("version past an int") << QString(good).replace(R"("version":1)", R"("version":4294967297)")
                                             << "$.version";
        QTest::newRow("good") << good << "";
    }
    void badProfileNamesFileAndPath()
    {
        QFETCH(QString, json);
        QFETCH(QString, path);
        QTemporaryDir dir;
        const std::string file = dir.filePath("bad.json").toStdString();
        std::ofstream(file) << json.toStdString();
        if (path.isEmpty()) {
            QCOMPARE(sharding::findMeshProfile(file).intraNodeDevices, 4);
            return;
        }
        try {
            sharding::findMeshProfile(file);
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.find(file) == 0, msg.c_str());
            QVERIFY2(msg.find(path.toStdString()) != std::string::npos, msg.c_str());
        }
    }

    void unknownProfileListsKnown()
    {
        try {
            sharding::findMeshProfile("dgx-z9");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY(msg.find("dgx-z9") != std::string::npos);
            QVERIFY(msg.find("dgx-h100") != std::string::npos);
        }
    }
};

QTEST_APPLESS_MAIN(TestMesh)
#include "tst_mesh.moc"
