#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/modelloader.h"
#include "ir/error.h"
#include "plan/fingerprint.h"
#include "plan/planjson.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>

using namespace tapestry;

namespace {

const char *kGpt = "zoo:gpt2-medium?layers=2&batch=2&seq=64";

plan::Plan gptPlan(bool sequenceParallel = false)
{
    const auto g = io::loadModel(kGpt);
    search::ReferenceOptions o;
    o.sequenceParallel = sequenceParallel;
    return search::referencePlan(g, kGpt, sharding::findMeshProfile("dgx-h100").mesh({2, 8}, {"data", "model"}),
                                 search::ReferenceMethod::Megatron, o);
}

struct Cli {
    int code = -1;
    QString out, err;
};

Cli runCli(const QStringList &args)
{
    QProcess p;
    p.start(QStringLiteral(TAPESTRY_CLI), args);
    p.waitForFinished(120000);
    return {p.exitCode(), QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

} // namespace

class TestPlan : public QObject {
    Q_OBJECT

private slots:
    void roundTripIsByteIdentical_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("method");
        QTest::addColumn<bool>("sp");
        QTest::newRow("mlp megatron") << "zoo:mlp" << "megatron" << false;
        QTest::newRow("mlp dp") << "zoo:mlp" << "dp" << false;
        QTest::newRow("gpt megatron") << kGpt << "megatron" << false;
        QTest::newRow("gpt sequence parallel") << kGpt << "megatron" << true;
        QTest::newRow("gpt replicate") << kGpt << "replicate" << false;
        QTest::newRow("gpt techniques") << kGpt << "megatron+techniques" << true;
    }
    void roundTripIsByteIdentical()
    {
        QFETCH(QString, model);
        QFETCH(QString, method);
        QFETCH(bool, sp);
        const auto g = io::loadModel(model.toStdString());
        search::ReferenceOptions o;
        o.sequenceParallel = sp;
        // The memory techniques are part of the plan: written, read and
        // re-costed with it.
        const bool techniques = method.endsWith(QLatin1String("+techniques"));
        if (techniques)
            o.cost.techniques = {true, cost::Recompute::Full, 3, 2};
        // A calibrated device's GEMM table and per-kind link fits, too.
        auto mesh = sharding::findMeshProfile("dgx-h100").mesh({8}, {"model"});
        mesh.device.gemmEfficiency = {{1e6, 0.4}, {1e9, 0.8}};
        mesh.device.kernelBandwidth = {{"normalization", 1e12}};
        mesh.axes[0].link.byKind["reduce-scatter"] = {200e9, 4e-6};
        const auto p = search::referencePlan(g, model.toStdString(), mesh,
                                             *search::referenceMethodFromString(method.section(QLatin1Char('+'), 0, 0).toStdString()), o);
        QCOMPARE(p.costOptions.techniques == cost::Techniques{}, !techniques);
        const std::string text = plan::writePlanJson(p);
        const auto loaded = plan::readPlanJson(text, "plan.json");
        QCOMPARE(plan::writePlanJson(loaded), text);
        QVERIFY(loaded.cost == p.cost);
        QVERIFY(loaded.specs == p.specs);
        // The device's roofline figures travel with the plan.
        QCOMPARE(loaded.mesh.device.memoryBandwidth, 3.35e12);
        QCOMPARE(loaded.mesh.device.kernelLaunch, 3e-6);
        QVERIFY(loaded.mesh.device.gemmEfficiency == mesh.device.gemmEfficiency);
        QVERIFY(loaded.mesh.device.kernelBandwidth == mesh.device.kernelBandwidth);
        QVERIFY(loaded.mesh.axes[0].link.byKind == mesh.axes[0].link.byKind);
        // Re-costing the loaded plan gives the same figures.
        auto again = loaded;
        plan::recostPlan(again, g, "plan.json");
        QCOMPARE(plan::writePlanJson(again), text);
    }

    // A version 1 file (before the memory techniques) loads as a plan
    // that uses none, and costs as it did.
    void versionOneLoadsWithoutTechniques()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = gptPlan();
        std::string text = plan::writePlanJson(p);
        for (const auto &[from, to] : {std::pair<std::string, std::string>{"\"version\": 2", "\"version\": 1"}}) {
            const auto at = text.find(from);
            QVERIFY(at != std::string::npos);
            text.replace(at, from.size(), to);
        }
        const auto line = text.find("  \"techniques\": ");
        QVERIFY(line != std::string::npos);
        text.erase(line, text.find('\n', line) + 1 - line);
        auto loaded = plan::readPlanJson(text, "old.json");
        QVERIFY(loaded.costOptions.techniques == cost::Techniques{});
        plan::recostPlan(loaded, g, "old.json");
        QVERIFY(loaded.cost == p.cost);
    }

    void writtenAtomicallyAndReadBack()
    {
        QTemporaryDir dir;
        const auto p = gptPlan();
        const std::string path = dir.filePath("plan.json").toStdString();
        plan::writePlanFile(path, p);
        QCOMPARE(plan::writePlanJson(plan::readPlanFile(path)), plan::writePlanJson(p));
        QVERIFY_THROWS_EXCEPTION(TapestryError, plan::writePlanFile(dir.filePath("no/such/dir/plan.json").toStdString(), p));
        QCOMPARE(std::distance(std::filesystem::directory_iterator(dir.path().toStdString()), {}), 1);
    }

    // Axis sizes each within bounds whose product is not: refused with the
    // device limit before planSpecs multiplies them.
    void meshPastTheDeviceLimitIsRefused()
    {
        std::string text = plan::writePlanJson(gptPlan());
        for (const char *size : {"\"size\":2,", "\"size\":8,"}) {
            const auto at = text.find(size);
            QVERIFY(at != std::string::npos);
            text.replace(at, std::string(size).size(), "\"size\":999999,");
        }
        try {
            plan::readPlanJson(text, "huge.json");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.starts_with("huge.json: $.mesh.axes: "), msg.c_str());
            QVERIFY2(msg.find("1048576 devices") != std::string::npos, msg.c_str());
        }
    }

    // Structure, shapes and tensor names; not op names.
    void fingerprint()
    {
        const auto a = io::loadModel("zoo:mlp");
        QCOMPARE(plan::modelFingerprint(a), plan::modelFingerprint(io::loadModel("zoo:mlp")));
        QVERIFY(plan::modelFingerprint(a) != plan::modelFingerprint(io::loadModel("zoo:mlp?batch=16")));
        QVERIFY(plan::modelFingerprint(a) != plan::modelFingerprint(io::loadModel("zoo:abc")));
        auto renamed = a;
        renamed.renameTensor(*renamed.findTensor("x"), "input");
        QVERIFY(plan::modelFingerprint(a) != plan::modelFingerprint(renamed));
        auto opRenamed = a;
        opRenamed.renameOp(ir::OpId(0), "something/else");
        QCOMPARE(plan::modelFingerprint(a), plan::modelFingerprint(opRenamed));
        QVERIFY(plan::modelFingerprint(a).starts_with("fnv1a64:"));
    }

    // Each problem is one clear line naming the plan and the tensor.
    void validationErrors_data()
    {
        QTest::addColumn<QString>("edit");
        QTest::addColumn<QString>("message");
        QTest::newRow("another model") << "model" << "the plan was made for model 'zoo:mlp'";
        QTest::newRow("unknown tensor") << "unknown" << "tensor 'ghost': the model has no tensor of this name";
        QTest::newRow("missing tensor") << "missing" << "tensor 'mlp.fc2.weight': has no spec in the plan";
        QTest::newRow("indivisible split") << "indivisible"
                                           << "tensor 'mlp.fc1.weight': [Replicate(), Shard(0)] does not fit shape "
                                              "[4, 8] on mesh 2x8 (data, model): dim 0 of size 4 cannot be split";
        QTest::newRow("dim out of range") << "range" << "tensor 'x': [Shard(2), Replicate()] does not fit";
        QTest::newRow("wrong rank") << "rank" << "tensor 'x': [Replicate()] does not fit shape [8, 4] on mesh 2x8 "
                                                "(data, model): spec has 1 placement(s) for a mesh of 2 axes";
        QTest::newRow("partial parameter") << "partial"
                                           << "tensor 'mlp.fc2.weight': is a parameter and cannot be stored as a "
                                              "partial sum";
    }
    void validationErrors()
    {
        QFETCH(QString, edit);
        QFETCH(QString, message);
        const auto g = io::loadModel("zoo:mlp");
        const auto mesh = sharding::findMeshProfile("dgx-h100").mesh({2, 8}, {"data", "model"});
        auto p = search::referencePlan(g, "zoo:mlp", mesh, search::ReferenceMethod::Replicate);
        using sharding::Placement;
        auto other = g;
        if (edit == QLatin1String("model"))
            other = io::loadModel("zoo:mlp?batch=16");
        else if (edit == QLatin1String("unknown"))
            p.specs["ghost"] = p.specs.at("x");
        else if (edit == QLatin1String("missing"))
            p.specs.erase("mlp.fc2.weight");
        else if (edit == QLatin1String("indivisible"))
            p.specs["mlp.fc1.weight"].spec.placements[1] = Placement::shard(0);
        else if (edit == QLatin1String("range"))
            p.specs["x"].spec.placements[0] = Placement::shard(2);
        else if (edit == QLatin1String("rank"))
            p.specs["x"].spec.placements.pop_back();
        else if (edit == QLatin1String("partial"))
            p.specs["mlp.fc2.weight"].spec.placements[0] = Placement::partial();
        try {
            plan::recostPlan(p, other, "plan.json");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.starts_with("plan.json: "), msg.c_str());
            QVERIFY2(msg.find(message.toStdString()) != std::string::npos, msg.c_str());
            QVERIFY(msg.find('\n') == std::string::npos);
        }
    }

    void malformedJsonNamesPath_data()
    {
        QTest::addColumn<QString>("from");
        QTest::addColumn<QString>("to");
        QTest::addColumn<QString>("path");
        QTest::newRow("format") << "\"tapestry.plan\"" << "\"tapestry.model\"" << "$.format";
        QTest::newRow("version") << "\"version\": 2" << "\"version\": 3" << "$.version";
        QTest::newRow("recompute") << "\"recompute\":\"none\"" << "\"recompute\":\"some\"" << "$.techniques.recompute";
        QTest::newRow("zero stage") << "\"zero_stage\":0" << "\"zero_stage\":4" << "$.techniques.zero_stage";
        QTest::newRow("micro-batches") << "\"micro_batches\":1" << "\"micro_batches\":0" << "$.techniques.micro_batches";
        QTest::newRow("placement") << "\"Shard(1)\"" << "\"Split(1)\"" << "placements[0]";
        QTest::newRow("source") << "\"source\":\"reference\"" << "\"source\":\"guess\"" << ".source";
        QTest::newRow("kind") << "\"kind\":\"all-reduce\"" << "\"kind\":\"broadcast\"" << "$.collectives[0].kind";
        QTest::newRow("truncated") << "\"warnings\"" << "" << "not valid JSON";
        // Sizes that make no device or setting: refused, not costed.
        QTest::newRow("negative memory") << "\"memory_bytes\":85899345920" << "\"memory_bytes\":-1"
                                         << "$.mesh.device.memory_bytes: is negative";
        QTest::newRow("memory past 64 bits") << "\"memory_bytes\":85899345920"
                                             << "\"memory_bytes\":18446744073709551615"
                                             << "$.mesh.device.memory_bytes: integer overflows 64 bits";
        QTest::newRow("negative parameter bytes") << "\"parameter_bytes\":2.0" << "\"parameter_bytes\":-2.0"
                                                  << "$.cost_options.parameter_bytes";
        QTest::newRow("number past a double") << "\"parameter_bytes\":2.0" << "\"parameter_bytes\":1e999"
                                              << "not valid JSON";
    }
    void malformedJsonNamesPath()
    {
        QFETCH(QString, from);
        QFETCH(QString, to);
        QFETCH(QString, path);
        const auto g = io::loadModel("zoo:mlp");
        const auto p = search::referencePlan(g, "zoo:mlp", sharding::findMeshProfile("dgx-h100").mesh({2}, {"model"}),
                                             search::ReferenceMethod::Megatron);
        std::string text = plan::writePlanJson(p);
        const auto at = text.find(from.toStdString());
        QVERIFY(at != std::string::npos);
        text = to.isEmpty() ? text.substr(0, at) : text.replace(at, from.size(), to.toStdString());
        try {
            plan::readPlanJson(text, "hand.json");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.starts_with("hand.json"), msg.c_str());
            QVERIFY2(msg.find(path.toStdString()) != std::string::npos, msg.c_str());
        }
    }

    void cliExitCodes_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("says");
        QTest::newRow("megatron") << QStringList{"plan", "zoo:mlp", "--mesh", "4", "--search", "megatron"} << 0
                                  << "step time";
        QTest::newRow("json") << QStringList{"plan", "zoo:mlp", "--mesh", "2x2", "--search", "dp", "--json"} << 0
                              << "\"step_time_s\"";
        QTest::newRow("unknown search") << QStringList{"plan", "zoo:mlp", "--mesh", "4", "--search", "alpa"} << 2
                                        << "unknown search 'alpa'";
        QTest::newRow("no mesh") << QStringList{"plan", "zoo:mlp", "--search", "dp"} << 2 << "--mesh";
        QTest::newRow("bad mesh") << QStringList{"plan", "zoo:mlp", "--mesh", "4y2", "--search", "dp"} << 2
                                  << "--mesh";
        QTest::newRow("refused heads") << QStringList{"plan", "zoo:gpt2?layers=1&seq=64", "--mesh", "8", "--search",
                                                      "megatron"}
                                       << 2 << "12 attention heads";
        QTest::newRow("unknown profile") << QStringList{"plan", "zoo:mlp", "--mesh", "4", "--search", "dp",
                                                        "--mesh-profile", "nope"}
                                         << 2 << "unknown mesh profile 'nope'";
    }
    void cliExitCodes()
    {
        QFETCH(QStringList, args);
        QFETCH(int, code);
        QFETCH(QString, says);
        const auto r = runCli(args);
        QCOMPARE(r.code, code);
        QVERIFY2((r.out + r.err).contains(says), qPrintable(r.out + r.err));
    }

    // plan -o, then cost: the same figures; another model or a bad edit exits 2.
    void cliPlanThenCost()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("plan.json"));
        auto r = runCli({"plan", "zoo:mlp", "--mesh", "4", "--axes", "tp", "--mesh-profile", "pcie-8x", "--search",
                         "megatron", "-o", file});
        QCOMPARE(r.code, 0);
        const auto p = plan::readPlanFile(file.toStdString());
        QCOMPARE(p.mesh.profile, std::string("pcie-8x"));
        QCOMPARE(p.mesh.axes[0].name, std::string("tp"));
        r = runCli({"cost", "zoo:mlp", file, "--json"});
        QCOMPARE(r.code, 0);
        QVERIFY(p.cost.commBytes > 0);
        QVERIFY2(r.out.contains(QStringLiteral("\"comm_bytes\": %1,").arg(p.cost.commBytes)), qPrintable(r.out));
        r = runCli({"cost", "zoo:mlp?batch=16", file});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(QStringLiteral("the plan was made for model 'zoo:mlp'")), qPrintable(r.err));

        std::string text = io::readFile(file.toStdString());
        const auto at = text.find("\"Shard(1)\"");
        text.replace(at, 10, "\"Shard(0)\"");  // fc1.weight [4, 8] split by rows: 4 over 4 fits
        io::writeOutputFile(file.toStdString(), text);
        r = runCli({"cost", "zoo:mlp", file});
        QCOMPARE(r.code, 0);
        text.replace(at, 10, "\"Shard(7)\"");
        io::writeOutputFile(file.toStdString(), text);
        r = runCli({"cost", "zoo:mlp", file});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(QStringLiteral("tensor 'mlp.fc1.weight'")), qPrintable(r.err));
    }

    void cliCostSaysWhenItDoesNotFit()
    {
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("big.json"));
        const QString model = QStringLiteral("zoo:mlp?batch=8&hidden=16384&ffn=65536");
        QCOMPARE(runCli({"plan", model, "--mesh", "2", "--mesh-profile", "cpu-loopback", "--search", "replicate",
                         "-o", file})
                     .code,
                 0);
        const auto r = runCli({"cost", model, file});
        QCOMPARE(r.code, 0);
        QVERIFY2(r.out.contains(QStringLiteral("DOES NOT FIT")), qPrintable(r.out));
    }
};

QTEST_APPLESS_MAIN(TestPlan)
#include "tst_plan.moc"
