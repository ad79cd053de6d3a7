#include "io/modelloader.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "analysis/plandiff.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"

#include <QtTest>
#include <QProcess>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <cmath>

using namespace tapestry;

namespace {

plan::Plan reference(const ir::Graph &g, const std::string &source, const std::string &shape,
                     search::ReferenceMethod method)
{
    const auto sizes = sharding::parseMeshShape(shape);
    const auto m = sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
    return search::referencePlan(g, source, m, method);
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

class TestPlanDiff : public QObject {
    Q_OBJECT

private slots:
    void megatronAgainstDataParallel_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::newRow("gpt2 4") << "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256" << "4";
        QTest::newRow("gpt2 2x2") << "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256" << "2x2";
        QTest::newRow("mlp 2") << "zoo:mlp?batch=8" << "2";
    }
    void megatronAgainstDataParallel()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto a = reference(g, source, shape.toStdString(), search::ReferenceMethod::Megatron);
        const auto b = reference(g, source, shape.toStdString(), search::ReferenceMethod::DataParallel);
        const auto diff = analysis::diffPlans(g, a, b);

        std::vector<std::string> expected, got;
        for (const auto &[name, entry] : a.specs)
            if (entry.spec != b.specs.at(name).spec)
                expected.push_back(name);
        for (const auto &c : diff.specs) {
            got.push_back(c.tensor);
            QCOMPARE(c.a, a.specs.at(c.tensor).spec);
            QCOMPARE(c.b, b.specs.at(c.tensor).spec);
        }
        QVERIFY(!expected.empty());
        QCOMPARE(got, expected);

        QCOMPARE(diff.stepTimeDelta, b.cost.stepTime - a.cost.stepTime);
        QCOMPARE(diff.commDelta, b.cost.comm - a.cost.comm);
        QCOMPARE(diff.memoryDelta, b.cost.memory.total() - a.cost.memory.total());
        // Classes and collective kinds partition the ops' and collectives' time.
        double byClass = 0, byCollective = 0;
        for (const auto &[name, group] : diff.byClass)
            byClass += group.delta();
        for (const auto &[kind, group] : diff.byCollective)
            byCollective += group.delta();
        const auto opTime = [](const plan::Plan &p) {
            return p.cost.byPhase.at("forward").total() + p.cost.byPhase.at("backward").total();
        };
        const double tolerance = 1e-9 * std::max(a.cost.stepTime, b.cost.stepTime);
        QVERIFY(std::abs(byClass - (opTime(b) - opTime(a))) <= tolerance);
        QVERIFY(std::abs(byCollective - diff.commDelta) <= tolerance);
        if (model.contains(QStringLiteral("gpt2")))
            QVERIFY(diff.byClass.count("(outside classes)") && diff.byClass.size() == 2);
    }

    void identicalPlansHaveNoDifference()
    {
        const std::string source = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256";
        const auto g = io::loadModel(source);
        const auto a = reference(g, source, "4", search::ReferenceMethod::Megatron);
        const auto diff = analysis::diffPlans(g, a, a);
        QVERIFY(diff.identical());
        QCOMPARE(diff.stepTimeDelta, 0.0);
        QCOMPARE(diff.commDelta, 0.0);
        QCOMPARE(diff.computeDelta, 0.0);
        QCOMPARE(diff.memoryDelta, std::int64_t(0));
        QVERIFY(!diff.byClass.empty());
        for (const auto &[name, group] : diff.byClass)
            QCOMPARE(group.delta(), 0.0);
    }

    void differentModelsAreAnError()
    {
        const auto g = io::loadModel("zoo:mlp?batch=8"), h = io::loadModel("zoo:mlp?batch=16");
        const auto a = reference(g, "zoo:mlp?batch=8", "2", search::ReferenceMethod::Megatron);
        const auto b = reference(h, "zoo:mlp?batch=16", "2", search::ReferenceMethod::Megatron);
        try {
            analysis::diffPlans(g, a, b, "a.json", "b.json");
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            QCOMPARE(e.error().input, std::string("b.json"));
            QVERIFY(std::string(e.what()).find("different models") != std::string::npos);
        }
    }

    void cliExitCodes_data()
    {
        QTest::addColumn<QString>("second");  // model of plan b
        QTest::addColumn<bool>("json");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("expect");
        QTest::newRow("json") << "zoo:mlp?batch=8" << true << 0 << "\"by_collective\"";
        QTest::newRow("text") << "zoo:mlp?batch=8" << false << 0 << "tensor(s) stored differently";
        QTest::newRow("other model") << "zoo:mlp?batch=16" << false << 2 << "different models";
    }
    void cliExitCodes()
    {
        QFETCH(QString, second);
        QFETCH(bool, json);
        QFETCH(int, code);
        QFETCH(QString, expect);
        QTemporaryDir dir;
        const QString fileA = dir.filePath(QStringLiteral("a.json")), fileB = dir.filePath(QStringLiteral("b.json"));
        const auto g = io::loadModel("zoo:mlp?batch=8"), h = io::loadModel(second.toStdString());
        const auto a = reference(g, "zoo:mlp?batch=8", "2", search::ReferenceMethod::Megatron);
        const auto b = reference(h, second.toStdString(), "2", search::ReferenceMethod::DataParallel);
        plan::writePlanFile(fileA.toStdString(), a);
        plan::writePlanFile(fileB.toStdString(), b);
        QStringList args{QStringLiteral("diff"), fileA, fileB};
        if (json)
            args << QStringLiteral("--json");
        const auto r = runCli(args);
        QCOMPARE(r.code, code);
        if (code != 0) {
            QVERIFY2(r.err.contains(expect), qPrintable(r.err));
            QCOMPARE(r.err.trimmed().count(QLatin1Char('\n')), 0);
            return;
        }
        QVERIFY2(r.out.contains(expect), qPrintable(r.out));
        if (json) {
            const auto j = nlohmann::json::parse(r.out.toStdString());
            QCOMPARE(j["specs"].size(), analysis::diffPlans(g, a, b).specs.size());
        }
    }
};

QTEST_GUILESS_MAIN(TestPlanDiff)
#include "tst_plandiff.moc"
