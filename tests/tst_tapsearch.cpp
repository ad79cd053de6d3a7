#include "io/modelloader.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "search/activationlayout.h"
#include "search/exactsearch.h"
#include "search/referenceplan.h"
#include "search/segmentcost.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtTest>

#include <limits>
#include <map>
#include <regex>

using namespace tapestry;

namespace {

sharding::Mesh mesh(std::vector<int> sizes)
{
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
}

search::SearchResult tap(const ir::Graph &g, const std::string &source, const sharding::Mesh &m, bool decompose = true)
{
    const auto coarse = passes::Coarsen().run(g);
    const auto classes = passes::Prune().run(g, coarse);
    search::SearchOptions options;
    options.decompose = decompose;
    return search::tapSearch(g, classes, source, m, options);
}

// "transformer.h.3.attn.q_proj.weight" -> "attn.q_proj.weight"; empty outside layers.
std::string layerWeight(const std::string &name)
{
    static const std::regex layer(R"(^.*(?:\.h|\.layers)\.\d+\.(.*\.weight)$)");
    std::smatch m;
    return std::regex_match(name, m, layer) ? std::string(m[1]) : std::string();
}

// Compute and communication charged to the ops of transformer layers.
double layerTime(const plan::Plan &p)
{
    static const std::regex layer(R"((?:^|/)(?:h|layers)\.\d+/)");
    double t = 0;
    for (const auto &[op, totals] : p.cost.byOp)
        if (std::regex_search(op, layer))
            t += totals.total();
    return t;
}

} // namespace

class TestTapSearch : public QObject {
    Q_OBJECT

private slots:
    void findsMegatronWhenOnlyFullShardingFits_data()
    {
        QTest::addColumn<QString>("model");
        QTest::newRow("gpt2") << "zoo:gpt2?layers=2&batch=1&seq=64&hidden=256&heads=8&vocab=4096";
        QTest::newRow("gpt3") << "zoo:gpt3-6.7b?layers=8&batch=1&seq=64&hidden=512&heads=8&vocab=4096";
        QTest::newRow("llama") << "zoo:llama3-8b?layers=2&batch=1&seq=64&hidden=256&heads=8&kv_heads=8&ffn=512&vocab=4096";
    }
    void findsMegatronWhenOnlyFullShardingFits()
    {
        QFETCH(QString, model);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        sharding::Mesh m = mesh({8});
        const plan::Plan megatron = search::referencePlan(g, source, m, search::ReferenceMethod::Megatron);
        // Room for Megatron's plan and not for one more replicated layer matrix.
        m.device.memoryBytes = megatron.cost.memory.total() + 1024;
        const auto result = tap(g, source, m);
        QVERIFY(result.plan.cost.fitsMemory);
        int layerWeights = 0;
        for (const auto &[name, entry] : megatron.specs) {
            if (layerWeight(name).empty())
                continue;
            ++layerWeights;
            QVERIFY2(result.plan.specs.at(name).spec == entry.spec,
                     (name + ": tap " + result.plan.specs.at(name).spec.toPlacements() + ", megatron " +
                      entry.spec.toPlacements())
                         .c_str());
        }
        QVERIFY(layerWeights >= 12);
        // The layers cost what Megatron's cost; outside them tap may do
        // better than Megatron's vocabulary-parallel embedding.
        const double tapLayers = layerTime(result.plan), megatronLayers = layerTime(megatron);
        QVERIFY2(std::abs(tapLayers - megatronLayers) <= 1e-3 * megatronLayers,
                 (std::to_string(tapLayers) + " vs " + std::to_string(megatronLayers)).c_str());
        QVERIFY(result.plan.cost.stepTime <= megatron.cost.stepTime * (1 + 1e-9));
    }

    void equalsExhaustiveSearch_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::newRow("mlp 1D") << "zoo:mlp?batch=8" << "4";
        QTest::newRow("gpt2 1D") << "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256" << "4";
        QTest::newRow("mlp 2D") << "zoo:mlp?batch=8" << "2x2";
    }
    void equalsExhaustiveSearch()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto m = mesh(sharding::parseMeshShape(shape.toStdString()));
        const auto fast = tap(g, source, m, true);
        const auto exhaustive = tap(g, source, m, false);
        QCOMPARE(fast.plan.cost.stepTime, exhaustive.plan.cost.stepTime);
        QCOMPARE(fast.leastCommunication.cost.comm, exhaustive.leastCommunication.cost.comm);
        QVERIFY(fast.stats.plansEvaluated <= exhaustive.stats.plansEvaluated);
    }

    void atLeastAsCheapAsReferencePlans_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::newRow("gpt2 8") << "zoo:gpt2?layers=2&batch=8&seq=128&hidden=256&heads=8&vocab=1024" << "8";
        QTest::newRow("llama 8") << "zoo:llama3-8b?layers=2&batch=8&seq=64&hidden=256&heads=8&kv_heads=8&ffn=512&vocab=1024"
                                 << "8";
        QTest::newRow("bert 4") << "zoo:bert-base?layers=2&batch=8&seq=64&hidden=128&heads=4&vocab=512" << "4";
    }
    void atLeastAsCheapAsReferencePlans()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto m = mesh(sharding::parseMeshShape(shape.toStdString()));
        const auto result = tap(g, source, m);
        QVERIFY(result.plan.cost.fitsMemory);
        QCOMPARE(result.plan.method, std::string("tap"));
        for (auto method : {search::ReferenceMethod::Megatron, search::ReferenceMethod::DataParallel}) {
            const auto reference = search::referencePlan(g, source, m, method);
            QVERIFY2(result.plan.cost.stepTime <= reference.cost.stepTime * (1 + 1e-9),
                     (std::string(search::toString(method)) + ": tap " + std::to_string(result.plan.cost.stepTime) +
                      " vs " + std::to_string(reference.cost.stepTime))
                         .c_str());
        }
        QVERIFY(result.leastCommunication.cost.comm <= result.plan.cost.comm);
        QVERIFY(result.leastCommunication.cost.fitsMemory);
    }

    // tapestry-cli plan --search tap (and exact): the library's plan, the search's
    // figures and the least-communication plan in --json; bad input exits 2.
    void cliPlanWithTap()
    {
        const std::string source = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256";
        QProcess p;
        p.start(QStringLiteral(TAPESTRY_CLI), {QStringLiteral("plan"), QString::fromStdString(source),
                                               QStringLiteral("--mesh"), QStringLiteral("4"), QStringLiteral("--search"),
                                               QStringLiteral("tap"), QStringLiteral("--memory-gib"),
                                               QStringLiteral("0.01"), QStringLiteral("--json")});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 0);
        QVERIFY2(p.readAllStandardError().isEmpty(), "progress must stay silent when stderr is not a terminal");
        const QJsonObject j = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
        sharding::Mesh m = mesh({4});
        m.device.memoryBytes = static_cast<std::int64_t>(std::llround(0.01 * 1024.0 * 1024.0 * 1024.0));
        const auto expected = tap(io::loadModel(source), source, m);
        QCOMPARE(j[QStringLiteral("method")].toString(), QStringLiteral("tap"));
        QCOMPARE(j[QStringLiteral("memory_capacity_bytes")].toDouble(), static_cast<double>(m.device.memoryBytes));
        QCOMPARE(j[QStringLiteral("step_time_s")].toDouble(), expected.plan.cost.stepTime);
        const QJsonObject search = j[QStringLiteral("search")].toObject();
        QCOMPARE(search[QStringLiteral("algorithm")].toString(), QStringLiteral("tap"));
        QCOMPARE(search[QStringLiteral("classes")].toInt(), 1);
        QCOMPARE(static_cast<std::size_t>(search[QStringLiteral("plans_evaluated")].toDouble()),
                 expected.stats.plansEvaluated);
        QVERIFY(search[QStringLiteral("seconds")].toDouble() > 0);
        QVERIFY(search[QStringLiteral("load_seconds")].toDouble() > 0);
        const QJsonObject least = j[QStringLiteral("least_communication")].toObject();
        QCOMPARE(least[QStringLiteral("comm_s")].toDouble(), expected.leastCommunication.cost.comm);
        QCOMPARE(least[QStringLiteral("step_time_s")].toDouble(), expected.leastCommunication.cost.stepTime);

        QProcess exact;
        exact.start(QStringLiteral(TAPESTRY_CLI),
                    {QStringLiteral("plan"), QStringLiteral("zoo:mlp?batch=8"), QStringLiteral("--mesh"),
                     QStringLiteral("2"), QStringLiteral("--search"), QStringLiteral("exact"), QStringLiteral("--json")});
        QVERIFY(exact.waitForFinished(60000));
        QCOMPARE(exact.exitCode(), 0);
        const QJsonObject e = QJsonDocument::fromJson(exact.readAllStandardOutput()).object();
        QCOMPARE(e[QStringLiteral("method")].toString(), QStringLiteral("exact"));
        QCOMPARE(e[QStringLiteral("search")].toObject()[QStringLiteral("algorithm")].toString(), QStringLiteral("exact"));

        for (const QStringList &bad : {QStringList{QStringLiteral("--search"), QStringLiteral("tapp")},
                                       QStringList{QStringLiteral("--search"), QStringLiteral("tap"),
                                                   QStringLiteral("--memory-gib"), QStringLiteral("lots")}}) {
            QProcess q;
            q.start(QStringLiteral(TAPESTRY_CLI), QStringList{QStringLiteral("plan"), QStringLiteral("zoo:mlp"),
                                                              QStringLiteral("--mesh"), QStringLiteral("2")} +
                                                      bad);
            QVERIFY(q.waitForFinished(60000));
            QCOMPARE(q.exitCode(), 2);
            QVERIFY(q.readAllStandardError().startsWith("tapestry-cli plan: --"));
        }
    }

    // The class is searched on one instance: the work does not grow with depth.
    void workIsFlatInLayerCount()
    {
        const auto m = mesh({4});
        std::size_t evaluated[2] = {0, 0};
        int i = 0;
        for (int layers : {2, 16}) {
            const std::string source =
                "zoo:gpt2?layers=" + std::to_string(layers) + "&batch=4&seq=32&hidden=64&heads=4&vocab=256";
            const auto result = tap(io::loadModel(source), source, m);
            QCOMPARE(result.stats.classes, std::size_t(1));
            evaluated[i++] = result.stats.plansEvaluated;
        }
        QCOMPARE(evaluated[0], evaluated[1]);
    }

    // The graph's inputs (token ids, labels) take a layout of their own:
    // exact stores them replicated while the layers run batch-split, and
    // tap must be able to as well.
    void equalsExactOnGpt2()
    {
        const std::string source = "zoo:gpt2?layers=2";
        const auto g = io::loadModel(source);
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        const auto m = mesh({8});
        search::SearchOptions options;
        options.timeLimitSeconds = 120;
        const auto fast = search::tapSearch(g, classes, source, m, options);
        const auto exact = search::exactSearch(g, coarse, source, m, options);
        QVERIFY(exact.stats.optimal);
        QVERIFY(fast.plan.cost.stepTime <= exact.plan.cost.stepTime * 1.001);
    }

    // The per-op search of a block's weights against enumerating every
    // choice, on a 2D mesh where a layer's attention half has 9^4 choices:
    // same fastest and least-communication costs, and every choice it keeps
    // costs what evaluate() says it costs.
    void perOpSearchEqualsEnumeration_data()
    {
        QTest::addColumn<int>("layout");
        QTest::newRow("replicated") << 0;
        QTest::newRow("batch x sequence") << 5;
        QTest::newRow("sequence x batch") << 7;
    }
    void perOpSearchEqualsEnumeration()
    {
        QFETCH(int, layout);
        const std::string source = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&vocab=256";
        const auto g = io::loadModel(source);
        const auto classes = passes::Prune().run(g, passes::Coarsen().run(g));
        QCOMPARE(classes.classes.size(), std::size_t(1));
        const auto &cls = classes.classes[0];
        const auto m = mesh({2, 2});
        const auto layouts = search::allLayouts(2);
        const auto &l = layouts[static_cast<std::size_t>(layout)];
        search::SegmentCoster coster(g, m, {});
        const auto blocks = search::splitAtResidualCuts(g, cls.instances[cls.representative].ops);
        QCOMPARE(blocks.size(), std::size_t(2));
        for (std::size_t b = 0; b < blocks.size(); ++b) {
            const auto segment = search::makeSegment(g, m, "block", 0, 2, blocks[b]);
            std::map<ir::TensorId, sharding::ShardingSpec> boundary;
            for (auto t : segment.inputs)
                boundary[t] = l.specFor(g.tensor(t), m);
            for (auto t : segment.outputs)
                boundary[t] = l.specFor(g.tensor(t), m);
            const std::int64_t capacity = std::numeric_limits<std::int64_t>::max();
            const auto kept = coster.searchWeights(segment, boundary, capacity).at(0);
            QVERIFY(!kept.empty());
            double bestTime = std::numeric_limits<double>::max(), bestComm = bestTime;
            for (const auto &k : kept) {
                std::vector<sharding::ShardingSpec> weights;
                for (std::int64_t r = k.combo; const auto &c : segment.choices) {
                    weights.push_back(c[static_cast<std::size_t>(r % static_cast<std::int64_t>(c.size()))]);
                    r /= static_cast<std::int64_t>(c.size());
                }
                const auto c = coster.evaluate(segment, boundary, weights);
                QVERIFY(qFuzzyCompare(1 + c.time, 1 + k.time));
                QVERIFY(qFuzzyCompare(1 + c.comm, 1 + k.comm));
                QCOMPARE(c.memory, k.memory);
                bestTime = std::min(bestTime, k.time);
                bestComm = std::min(bestComm, k.comm);
            }
            std::size_t combos = 1;
            for (const auto &c : segment.choices)
                combos *= c.size();
            QVERIFY(b > 0 || combos == 6561);
            double time = std::numeric_limits<double>::max(), comm = time;
            for (std::size_t n = 0; n < combos; ++n) {
                std::vector<sharding::ShardingSpec> weights;
                for (std::size_t w = 0, r = n; w < segment.choices.size(); r /= segment.choices[w].size(), ++w)
                    weights.push_back(segment.choices[w][r % segment.choices[w].size()]);
                const auto c = coster.evaluate(segment, boundary, weights);
                time = std::min(time, c.time);
                comm = std::min(comm, c.comm);
            }
            QCOMPARE(bestTime, time);
            QCOMPARE(bestComm, comm);
            if (b > 0)
                continue;
            // The attention half searched once for several layouts of the
            // residual stream after it: the same answer for this one.
            const ir::TensorId link = g.op(blocks[0].back()).outputs[0];
            auto open = boundary;
            open.erase(link);
            const auto perLink = coster.searchWeights(segment, open, capacity, link,
                                                      {layouts[0].specFor(g.tensor(link), m), boundary[link]});
            QCOMPARE(perLink.size(), std::size_t(2));
            double linkTime = std::numeric_limits<double>::max(), linkComm = linkTime;
            for (const auto &k : perLink[1]) {
                linkTime = std::min(linkTime, k.time);
                linkComm = std::min(linkComm, k.comm);
            }
            QCOMPARE(linkTime, time);
            QCOMPARE(linkComm, comm);
        }
    }
};

QTEST_GUILESS_MAIN(TestTapSearch)
#include "tst_tapsearch.moc"
