#include "cost/costmodel.h"
#include "io/modelloader.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "analysis/explain.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"

#include <QtTest>
#include <QProcess>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include <cmath>

using namespace tapestry;

namespace {

const std::string kGpt = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256";

plan::Plan megatron(const ir::Graph &g, const std::string &source, const std::string &shape)
{
    const auto sizes = sharding::parseMeshShape(shape);
    const auto m = sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
    return search::referencePlan(g, source, m, search::ReferenceMethod::Megatron);
}

const analysis::Alternative *find(const analysis::Explanation &e, const std::string &placements)
{
    for (const auto &a : e.alternatives)
        if (a.spec.toPlacements() == placements)
            return &a;
    return nullptr;
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

class TestExplain : public QObject {
    Q_OBJECT

private slots:
    // Megatron's second MLP linear splits rows; splitting its columns
    // instead costs more and adds a collective.
    void megatronRowSplitIsChosen()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = megatron(g, kGpt, "4");
        analysis::Explainer explainer(g, p);
        const auto e = explainer.explainTensor("transformer.h.1.mlp.c_proj.weight");
        QCOMPARE(e.chosen.toPlacements(), std::string("[Shard(0)]"));
        QVERIFY(e.alternatives.front().chosen);
        QCOMPARE(e.alternatives.front().spec, e.chosen);
        QCOMPARE(e.alternatives.front().stepTimeDelta, 0.0);
        QCOMPARE(e.alternatives.size(), std::size_t(3));  // replicate, rows, columns
        const auto *columns = find(e, "[Shard(1)]");
        QVERIFY(columns);
        QVERIFY(!columns->chosen);
        QVERIFY2(columns->stepTimeDelta > 0, columns->summary.c_str());
        QVERIFY2(!columns->collectivesAdded.empty(), columns->summary.c_str());
        QVERIFY(columns->summary.find("split columns on model") != std::string::npos);
        QVERIFY(columns->summary.find("adds ") != std::string::npos);
        const auto *replicate = find(e, "[Replicate()]");
        QVERIFY(replicate);
        QVERIFY(replicate->memoryDelta > 0);  // a whole copy of the matrix on every device
        QVERIFY(e.node.find("c_proj") != std::string::npos);
    }

    // The deltas, costed on the changed ops only, are what costing the
    // whole plan with the alternative's changes gives.
    void deltasEqualWholePlanCost_data()
    {
        QTest::addColumn<QString>("shape");
        QTest::addColumn<QString>("tensor");
        QTest::newRow("row weight") << "4" << "transformer.h.1.mlp.c_proj.weight";
        QTest::newRow("column weight") << "4" << "transformer.h.0.attn.c_attn.weight";
        QTest::newRow("bias") << "4" << "transformer.h.0.mlp.c_fc.bias";
        QTest::newRow("activation 2D") << "2x2" << "transformer/h.0/mlp/c_fc/MatMul:0";
        QTest::newRow("embedding 2D") << "2x2" << "transformer.wte.weight";
    }
    void deltasEqualWholePlanCost()
    {
        QFETCH(QString, shape);
        QFETCH(QString, tensor);
        const auto g = io::loadModel(kGpt);
        const auto p = megatron(g, kGpt, shape.toStdString());
        analysis::Explainer explainer(g, p);
        const auto e = explainer.explainTensor(tensor.toStdString());
        QVERIFY(e.alternatives.size() >= 2);
        const auto base = cost::evaluatePlan(g, p.mesh, plan::planSpecs(p, g, "plan"), p.costOptions);
        for (const auto &a : e.alternatives) {
            plan::Plan changed = p;
            for (const auto &[name, spec] : a.changes)
                changed.specs[name].spec = spec;
            QCOMPARE(a.changes.empty(), a.chosen);
            const auto c = cost::evaluatePlan(g, p.mesh, plan::planSpecs(changed, g, "plan"), p.costOptions);
            const double tolerance = 1e-9 * base.stepTime;
            QVERIFY2(std::abs((c.stepTime - base.stepTime) - a.stepTimeDelta) <= tolerance, a.summary.c_str());
            QVERIFY2(std::abs((c.comm - base.comm) - a.commDelta) <= tolerance, a.summary.c_str());
            QVERIFY2(std::abs((c.compute - base.compute) - a.computeDelta) <= tolerance, a.summary.c_str());
            QCOMPARE(a.memoryDelta, c.memory.total() - base.memory.total());
            QCOMPARE(a.fits, c.fitsMemory);
        }
    }

    // The studio keeps one explainer per document and hands it each edited
    // plan: its explanations are a fresh explainer's.
    void explainerHandedAnEditedPlanExplainsItAfresh()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = megatron(g, kGpt, "4");
        analysis::Explainer kept(g, p);
        const auto first = kept.explainTensor("transformer.h.0.mlp.c_fc.weight");
        plan::Plan edited = p;
        for (const auto &[name, spec] : first.alternatives.back().changes)
            edited.specs[name].spec = spec;
        plan::recostPlan(edited, g, "edited");
        kept.setPlan(edited.mesh, edited.costOptions, plan::planSpecs(edited, g, "edited"), edited.cost);
        analysis::Explainer fresh(g, edited);
        for (const char *tensor : {"transformer.h.0.mlp.c_fc.weight", "transformer.h.1.attn.c_attn.weight"}) {
            const auto a = kept.explainTensor(tensor), b = fresh.explainTensor(tensor);
            QCOMPARE(a.alternatives.size(), b.alternatives.size());
            for (std::size_t i = 0; i < a.alternatives.size(); ++i) {
                QCOMPARE(a.alternatives[i].summary, b.alternatives[i].summary);
                QCOMPARE(a.alternatives[i].stepTimeDelta, b.alternatives[i].stepTimeDelta);
                QCOMPARE(a.alternatives[i].changes, b.alternatives[i].changes);
            }
        }
        QVERIFY(kept.explainTensor("transformer.h.0.mlp.c_fc.weight").alternatives.front().spec ==
                first.alternatives.back().spec);
        auto other = edited;
        other.costOptions.overlap = !other.costOptions.overlap;
        QVERIFY_THROWS_EXCEPTION(TapestryError,
                                 kept.setPlan(other.mesh, other.costOptions, plan::planSpecs(other, g, "o"), other.cost));
    }

    void explainsCoarseNodeByItsWeight()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = megatron(g, kGpt, "4");
        analysis::Explainer explainer(g, p);
        const auto byTensor = explainer.explainTensor("transformer.h.0.mlp.c_proj.weight");
        const auto &nodes = explainer.coarse().nodes();
        auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto &n) { return n.name == byTensor.node; });
        QVERIFY(it != nodes.end());
        const auto byNode = explainer.explainNode(it->id);
        QCOMPARE(byNode.tensor, byTensor.tensor);
        QCOMPARE(byNode.alternatives.size(), byTensor.alternatives.size());
    }

    void unknownTensorIsAnError()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = megatron(g, kGpt, "4");
        analysis::Explainer explainer(g, p);
        try {
            explainer.explainTensor("transformer.h.9.mlp.c_proj.weight");
            QFAIL("expected an error");
        } catch (const TapestryError &err) {
            QCOMPARE(err.error().where, std::string("transformer.h.9.mlp.c_proj.weight"));
        }
    }

    void cliExitCodes_data()
    {
        QTest::addColumn<QStringList>("extra");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("expect");
        QTest::newRow("tensor json") << QStringList{"transformer.h.0.mlp.c_proj.weight", "--json"} << 0
                                     << "\"collectives_added\"";
        QTest::newRow("tensor text") << QStringList{"transformer.h.0.mlp.c_proj.weight"} << 0 << "split columns";
        QTest::newRow("unknown tensor") << QStringList{"no.such.weight"} << 2 << "no.such.weight";
        QTest::newRow("other model") << QStringList{"transformer.h.0.mlp.c_proj.weight", "--model", "zoo:mlp"} << 2
                                     << "fingerprint";
        QTest::newRow("missing tensor") << QStringList{} << 2 << "expected PLAN and TENSOR";
    }
    void cliExitCodes()
    {
        QFETCH(QStringList, extra);
        QFETCH(int, code);
        QFETCH(QString, expect);
        QTemporaryDir dir;
        const QString file = dir.filePath(QStringLiteral("plan.json"));
        const auto g = io::loadModel(kGpt);
        plan::writePlanFile(file.toStdString(), megatron(g, kGpt, "4"));
        const auto r = runCli(QStringList{QStringLiteral("explain"), file} + extra);
        QCOMPARE(r.code, code);
        if (code == 0) {
            QVERIFY2(r.out.contains(expect), qPrintable(r.out));
            if (extra.contains(QStringLiteral("--json")))
                QCOMPARE(nlohmann::json::parse(r.out.toStdString())["alternatives"].size(), std::size_t(3));
        } else {
            QVERIFY2(r.err.contains(expect), qPrintable(r.err));
            QCOMPARE(r.err.trimmed().count(QLatin1Char('\n')), 0);  // one line
        }
    }
};

QTEST_GUILESS_MAIN(TestExplain)
#include "tst_explain.moc"
