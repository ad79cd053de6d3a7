#include "io/modelloader.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/axisroles.h"
#include "plan/planjson.h"
#include "search/axisconstraint.h"
#include "search/exactsearch.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "sharding/meshprofile.h"

#include <nlohmann/json.hpp>

#include <QtTest>

#include <set>

using namespace tapestry;

namespace {

// TinyLlama's layer (hidden 2048, 32 heads over 4 key/value heads, MLP
// 5632, vocabulary 32000), two layers of it.
const char *kTinyLlama =
    "zoo:llama3-8b?layers=2&hidden=2048&heads=32&kv_heads=4&ffn=5632&vocab=32000&batch=8&seq=2048";
const char *kLlama = "zoo:llama3-8b?layers=2&batch=8&seq=64&hidden=256&heads=8&kv_heads=8&ffn=512&vocab=1024";

sharding::Mesh mesh(const std::string &shape)
{
    const auto sizes = sharding::parseMeshShape(shape);
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
}

std::vector<std::string> carriesOf(const plan::Plan &p)
{
    std::vector<std::string> out;
    for (const auto &c : p.axisCarries)
        out.push_back(c.toString());
    return out;
}

// The mesh axes any parameter of `p` is split on.
std::set<std::size_t> weightAxes(const ir::Graph &g, const plan::Plan &p)
{
    std::set<std::size_t> axes;
    for (const auto &t : g.tensors())
        if (t.role == ir::Role::Parameter) {
            const auto &placements = p.specs.at(t.name).spec.placements;
            for (std::size_t a = 0; a < placements.size(); ++a)
                if (placements[a].isShard())
                    axes.insert(a);
        }
    return axes;
}

search::SearchResult tap(const ir::Graph &g, const std::string &source, const sharding::Mesh &m,
                         const search::SearchOptions &options = {})
{
    const auto coarse = passes::Coarsen().run(g);
    return search::tapSearch(g, passes::Prune().run(g, coarse), source, m, options);
}

} // namespace

class TestAxisRoles : public QObject {
    Q_OBJECT

private slots:
    void names_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QString>("role");
        QTest::newRow("data") << "data" << "data";
        QTest::newRow("dp") << "DP" << "data";
        QTest::newRow("model") << "model" << "tensor";
        QTest::newRow("tp") << "tp" << "tensor";
        QTest::newRow("seq") << "seq" << "sequence";
        QTest::newRow("sp") << "sp" << "sequence";
        QTest::newRow("free") << "x" << "";
        QTest::newRow("pipeline") << "pp" << "";
    }
    void names()
    {
        QFETCH(QString, name);
        QFETCH(QString, role);
        const auto r = plan::axisRoleFromName(name.toStdString());
        QCOMPARE(r ? QString::fromUtf8(plan::toString(*r).data()) : QString(), role);
    }

    void carriesText()
    {
        for (const char *text : {"data", "tensor", "sequence", "tensor+sequence", "data+tensor", "replicated"}) {
            const auto c = plan::AxisCarries::fromString(text);
            QVERIFY(c);
            QCOMPARE(c->toString(), std::string(text));
        }
        QVERIFY(!plan::AxisCarries::fromString("expert"));
        QVERIFY(!plan::AxisCarries::fromString("tensor+"));
    }

    // What the reference plans do with each axis, read back from their specs.
    void referencePlans_data()
    {
        QTest::addColumn<QString>("shape");
        QTest::addColumn<QString>("method");
        QTest::addColumn<QStringList>("carries");
        QTest::newRow("megatron 2x4") << "2x4" << "megatron" << QStringList{"data", "tensor"};
        QTest::newRow("megatron-sp 2x4") << "2x4" << "megatron-sp" << QStringList{"data", "tensor+sequence"};
        QTest::newRow("megatron 8") << "8" << "megatron" << QStringList{"tensor"};
        QTest::newRow("dp 2x4") << "2x4" << "dp" << QStringList{"data", "data"};
        QTest::newRow("replicate 2x4") << "2x4" << "replicate" << QStringList{"replicated", "replicated"};
    }
    void referencePlans()
    {
        QFETCH(QString, shape);
        QFETCH(QString, method);
        QFETCH(QStringList, carries);
        const auto g = io::loadModel(kLlama);
        search::ReferenceOptions options;
        options.sequenceParallel = method == QStringLiteral("megatron-sp");
        const auto m = method == QStringLiteral("dp")          ? search::ReferenceMethod::DataParallel
                       : method == QStringLiteral("replicate") ? search::ReferenceMethod::Replicate
                                                               : search::ReferenceMethod::Megatron;
        const auto p = search::referencePlan(g, kLlama, mesh(shape.toStdString()), m, options);
        QStringList got;
        for (const auto &c : carriesOf(p))
            got << QString::fromStdString(c);
        QCOMPARE(got, carries);
        QVERIFY(!p.axesConstrained);
    }

    // Free, tap puts tensor parallelism where it pays, whatever the axis is
    // called, and the plan says so; given names, it keeps to them.
    void tinyLlamaOn2x4()
    {
        const auto g = io::loadModel(kTinyLlama);
        const auto m = mesh("2x4");
        const auto free = tap(g, kTinyLlama, m).plan;
        QVERIFY(!free.axesConstrained);
        const auto split = weightAxes(g, free);
        for (std::size_t a = 0; a < 2; ++a) {
            const auto &c = free.axisCarries[a];
            QCOMPARE(c.tensor, c.weightShare >= plan::kCarriesThreshold);
            if (split.count(a) && c.weightShare >= plan::kCarriesThreshold)
                QVERIFY(c.tensor);
        }
        QVERIFY2(free.axisCarries[0].tensor, free.axisCarries[0].toString().c_str());  // the case

        search::SearchOptions named;
        named.axisRoles = search::axisRolesFromNames({"data", "model"}, "--axes");
        const auto result = tap(g, kTinyLlama, m, named);
        for (const auto *p : {&result.plan, &result.leastCommunication}) {
            QVERIFY(p->axesConstrained);
            QVERIFY(!weightAxes(g, *p).count(0));
            QVERIFY2(plan::carriesMatchName(p->axisCarries[0], "data"), p->axisCarries[0].toString().c_str());
            QVERIFY2(plan::carriesMatchName(p->axisCarries[1], "model"), p->axisCarries[1].toString().c_str());
        }
        // The model axis may also carry the sequence (activations stored
        // split over it between matmuls, as Megatron's sequence
        // parallelism does), never the batch.
        const auto carries = carriesOf(result.plan);
        QCOMPARE(carries.size(), std::size_t(2));
        QCOMPARE(carries[0], std::string("data"));
        QVERIFY2(carries[1] == "tensor" || carries[1] == "tensor+sequence", carries[1].c_str());
        QCOMPARE(q_proj(result.plan), std::string("[Replicate(), Shard(1)]"));

        // Named the other way round, the roles follow the names.
        sharding::Mesh swapped = m;
        swapped.axes[0].name = "model";
        swapped.axes[1].name = "data";
        named.axisRoles = search::axisRolesFromNames({"model", "data"}, "--axes");
        const auto other = tap(g, kTinyLlama, swapped, named).plan;
        QVERIFY(!weightAxes(g, other).count(1));
        QVERIFY(plan::carriesMatchName(other.axisCarries[1], "data"));
    }

    // A sequence axis splits no weight, nor does a data axis: with both,
    // every weight is whole.
    void sequenceAxis()
    {
        const auto g = io::loadModel(kLlama);
        search::SearchOptions named;
        named.axisRoles = search::axisRolesFromNames({"data", "sequence"}, "--axes");
        const auto p = tap(g, kLlama, mesh("2x4"), named).plan;
        QVERIFY(weightAxes(g, p).empty());
        QVERIFY(!p.axisCarries[1].data && !p.axisCarries[1].tensor);
    }

    void exactKeepsToRoles()
    {
        const std::string source = "zoo:mlp?batch=8";
        const auto g = io::loadModel(source);
        auto m = mesh("2x2");
        m.device.memoryBytes = 500;  // tight: free, exact splits weights on both axes
        search::SearchOptions options;
        options.timeLimitSeconds = 30;
        const auto free = search::exactSearch(g, passes::Coarsen().run(g), source, m, options).plan;
        QCOMPARE(weightAxes(g, free), (std::set<std::size_t>{0, 1}));
        options.axisRoles = search::axisRolesFromNames({"data", "model"}, "--axes");
        const auto named = search::exactSearch(g, passes::Coarsen().run(g), source, m, options).plan;
        QVERIFY(named.axesConstrained);
        QVERIFY(!weightAxes(g, named).count(0));
    }

    void refusals()
    {
        try {
            search::axisRolesFromNames({"data", "expert"}, "--axes");
            QFAIL("no error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("--axes: axis 'expert'")), e.what());
        }
        const auto g = io::loadModel(kLlama);
        search::SearchOptions options;
        options.axisRoles = search::axisRolesFromNames({"data", "model"}, "--axes");
        const std::string weight = "model.layers.0.self_attn.q_proj.weight";
        options.pinned[weight] = sharding::ShardingSpec{{sharding::Placement::shard(1), sharding::Placement::replicate()}};
        try {
            tap(g, kLlama, mesh("2x4"), options);
            QFAIL("no error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("splits it over axis data, named for data")),
                     e.what());
        }
    }

    // Plans say what each axis carries in their file; files from before
    // they did still load, and say it once costed again.
    void planFile()
    {
        const auto g = io::loadModel(kLlama);
        auto p = search::referencePlan(g, kLlama, mesh("2x4"), search::ReferenceMethod::Megatron);
        p.axesConstrained = true;
        const std::string text = plan::writePlanJson(p);
        auto doc = nlohmann::json::parse(text);
        QCOMPARE(doc["mesh"]["axes"][1]["carries"].get<std::string>(), std::string("tensor"));
        const auto back = plan::readPlanJson(text, "p.json");
        QCOMPARE(carriesOf(back), carriesOf(p));
        QVERIFY(back.axesConstrained);

        for (auto &axis : doc["mesh"]["axes"])
            axis.erase("carries");
        doc["mesh"].erase("axes_constrained");
        auto old = plan::readPlanJson(doc.dump(), "old.json");
        QVERIFY(old.axisCarries.empty());
        QVERIFY(!old.axesConstrained);
        plan::recostPlan(old, g, "old.json");
        QCOMPARE(carriesOf(old), carriesOf(p));

        doc["mesh"]["axes"][0]["carries"] = "expert";
        try {
            plan::readPlanJson(doc.dump(), "bad.json");
            QFAIL("no error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromStdString(e.what()).contains(QStringLiteral("$.mesh.axes[0].carries")), e.what());
        }
    }

private:
    static std::string q_proj(const plan::Plan &p)
    {
        return p.specs.at("model.layers.0.self_attn.q_proj.weight").spec.toPlacements();
    }
};

QTEST_GUILESS_MAIN(TestAxisRoles)
#include "tst_axisroles.moc"
