#include "io/modelloader.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "search/exactsearch.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <QtTest>

#include <cmath>

using namespace tapestry;

namespace {

sharding::Mesh mesh(const std::string &shape)
{
    const auto sizes = sharding::parseMeshShape(shape);
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
}

search::SearchResult exact(const ir::Graph &g, const std::string &source, const sharding::Mesh &m)
{
    search::SearchOptions options;
    options.timeLimitSeconds = 30;
    return search::exactSearch(g, passes::Coarsen().run(g), source, m, options);
}

search::SearchResult tap(const ir::Graph &g, const std::string &source, const sharding::Mesh &m)
{
    const auto coarse = passes::Coarsen().run(g);
    return search::tapSearch(g, passes::Prune().run(g, coarse), source, m);
}

} // namespace

class TestExactSearch : public QObject {
    Q_OBJECT

private slots:
    // Where the whole-graph program finishes, tap's per-class answer costs
    // the same: tap is right on these graphs.
    void tapEqualsExact_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::newRow("mlp 2") << "zoo:mlp?batch=8" << "2";
        QTest::newRow("abc 4") << "zoo:abc?batch=8" << "4";
        QTest::newRow("gpt2 1 layer 2") << "zoo:gpt2?layers=1&batch=4&seq=32&hidden=64&heads=4&vocab=256" << "2";
        QTest::newRow("gpt2 2 layers 4") << "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256" << "4";
        QTest::newRow("gpt2 2 layers 8") << "zoo:gpt2?layers=2&batch=8&seq=64&hidden=256&heads=8&vocab=1024"
                                         << "8";
        QTest::newRow("llama 1 layer 8")
            << "zoo:llama3-8b?layers=1&batch=8&seq=64&hidden=256&heads=8&kv_heads=8&ffn=512&vocab=1024" << "8";
    }
    void tapEqualsExact()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto m = mesh(shape.toStdString());
        const auto e = exact(g, source, m);
        const auto t = tap(g, source, m);
        QVERIFY(e.stats.optimal);
        QCOMPARE(e.stats.algorithm, std::string("exact"));
        QCOMPARE(e.plan.method, std::string("exact"));
        QVERIFY(e.plan.cost.fitsMemory);
        QVERIFY2(std::abs(t.plan.cost.stepTime - e.plan.cost.stepTime) <= 0.01 * e.plan.cost.stepTime,
                 ("tap " + std::to_string(t.plan.cost.stepTime) + " s, exact " +
                  std::to_string(e.plan.cost.stepTime) + " s")
                     .c_str());
        QVERIFY(e.leastCommunication.cost.comm <= e.plan.cost.comm * (1 + 1e-9));
    }

    // With room for Megatron's plan and not for one more replicated matrix,
    // the plan exact returns fits.
    void respectsTightMemory_data()
    {
        QTest::addColumn<QString>("model");
        QTest::newRow("gpt2") << "zoo:gpt2?layers=2&batch=1&seq=64&hidden=256&heads=8&vocab=4096";
        QTest::newRow("llama") << "zoo:llama3-8b?layers=1&batch=1&seq=64&hidden=256&heads=8&kv_heads=8&ffn=512&vocab=4096";
    }
    // The time limit covers the strategy tables too: a limit they cannot
    // meet is one line naming it, not a search that runs on.
    void timeLimitCoversTheTables()
    {
        const std::string source = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256";
        const auto g = io::loadModel(source);
        search::SearchOptions options;
        options.timeLimitSeconds = 1e-6;
        try {
            search::exactSearch(g, passes::Coarsen().run(g), source, mesh("2x2"), options);
            QFAIL("expected the time limit to stop the search");
        } catch (const TapestryError &e) {
            const std::string what = e.what();
            QVERIFY2(what.find("time limit") != std::string::npos, what.c_str());
        }
    }

    void respectsTightMemory()
    {
        QFETCH(QString, model);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        sharding::Mesh m = mesh("8");
        const auto megatron = search::referencePlan(g, source, m, search::ReferenceMethod::Megatron);
        const auto ample = exact(g, source, m);
        m.device.memoryBytes = megatron.cost.memory.total() + 1024;
        QVERIFY(ample.plan.cost.memory.total() > m.device.memoryBytes);
        const auto tight = exact(g, source, m);
        QVERIFY(tight.plan.searchWarnings.empty());
        QVERIFY(tight.plan.cost.fitsMemory);
        QVERIFY(tight.plan.cost.memory.total() <= m.device.memoryBytes);
        QVERIFY(tight.plan.cost.stepTime >= ample.plan.cost.stepTime * (1 - 1e-9));
    }

    void warnsWhenNothingFits()
    {
        const std::string source = "zoo:mlp?batch=8";
        const auto g = io::loadModel(source);
        sharding::Mesh m = mesh("2");
        m.device.memoryBytes = 16;
        const auto result = exact(g, source, m);
        QVERIFY(!result.plan.cost.fitsMemory);
        QCOMPARE(result.plan.searchWarnings.size(), std::size_t(1));
        QVERIFY(QString::fromStdString(result.plan.searchWarnings[0]).contains(QStringLiteral("least memory")));
    }
};

QTEST_GUILESS_MAIN(TestExactSearch)
#include "tst_exactsearch.moc"
