// Pins across class instances (analysis::pinAcrossClass), the pins of a
// plan (analysis::pinsOf, what the studio's Re-derive and the CLI's
// `plan --keep-pins` keep), and a collective's specs before and after it
// runs (analysis::collectiveTransition).
#include "analysis/collectivetransition.h"
#include "analysis/explain.h"
#include "analysis/pinpropagation.h"
#include "io/modelloader.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "plan/plan.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"

#include <QtTest>

using namespace tapestry;

namespace {

const std::string kGpt = "zoo:gpt2?layers=3&batch=4&seq=32&hidden=64&heads=4&vocab=256";

sharding::ShardingSpec spec(const QString &placements)
{
    // "S0", "S1", "R", "P" on a one-axis mesh.
    if (placements == QLatin1String("R"))
        return {{sharding::Placement::replicate()}};
    if (placements == QLatin1String("P"))
        return {{sharding::Placement::partial()}};
    return {{sharding::Placement::shard(placements.mid(1).toInt())}};
}

struct Model {
    ir::Graph graph;
    passes::SubgraphClasses classes;
    plan::Plan plan;  // Megatron's on four devices
    plan::Plan sequenceParallel;  // the same with norms on sequence shards: gathers and scatters
};

const Model &model()
{
    static const Model m = [] {
        Model built;
        built.graph = io::loadModel(kGpt);
        const auto coarse = passes::Coarsen().run(built.graph);
        built.classes = passes::Prune().run(built.graph, coarse);
        const auto mesh = sharding::findMeshProfile("dgx-h100").mesh({4}, sharding::defaultAxisNames(1));
        built.plan = search::referencePlan(built.graph, kGpt, mesh, search::ReferenceMethod::Megatron);
        search::ReferenceOptions options;
        options.sequenceParallel = true;
        built.sequenceParallel = search::referencePlan(built.graph, kGpt, mesh, search::ReferenceMethod::Megatron, options);
        return built;
    }();
    return m;
}

} // namespace

class TestPinPropagation : public QObject {
    Q_OBJECT

private slots:
    // A pin on one layer's weight goes to the same weight of every layer
    // (the class' instances matched op by op), marked override there too;
    // what the pin drags along (the node's bias, activations) is marked
    // search. Pinned to one instance only, the other layers keep their spec.
    void pinAcrossClass_data()
    {
        QTest::addColumn<QString>("layer");
        QTest::addColumn<QString>("weight");
        QTest::addColumn<QString>("placements");
        QTest::addColumn<bool>("wholeClass");
        QTest::newRow("c_fc rows, whole class") << "0" << "mlp.c_fc.weight" << "S0" << true;
        QTest::newRow("c_fc rows, one instance") << "0" << "mlp.c_fc.weight" << "S0" << false;
        QTest::newRow("c_proj columns from the last layer") << "2" << "mlp.c_proj.weight" << "S1" << true;
        QTest::newRow("c_proj replicated, one instance") << "1" << "mlp.c_proj.weight" << "R" << false;
    }
    void pinAcrossClass()
    {
        QFETCH(QString, layer);
        QFETCH(QString, weight);
        QFETCH(QString, placements);
        QFETCH(bool, wholeClass);
        const auto &m = model();
        const std::string tensor = "transformer.h." + layer.toStdString() + "." + weight.toStdString();
        const auto pinned = spec(placements);
        QVERIFY(m.plan.specs.at(tensor).spec != pinned);

        analysis::Explainer explainer(m.graph, m.plan, kGpt);
        const auto explanation = explainer.explainTensor(tensor);
        const analysis::Alternative *alt = nullptr;
        for (const auto &a : explanation.alternatives)
            if (a.spec == pinned)
                alt = &a;
        QVERIFY(alt);
        QVERIFY(alt->changes.count(tensor));

        plan::Plan edited = m.plan;
        analysis::pinAcrossClass(edited, m.graph, m.classes, tensor, pinned, alt->changes, wholeClass);
        for (int l = 0; l < 3; ++l) {
            const std::string name = "transformer.h." + std::to_string(l) + "." + weight.toStdString();
            const bool home = QString::number(l) == layer;
            const auto &tp = edited.specs.at(name);
            if (home || wholeClass) {
                QVERIFY2(tp.spec == pinned, name.c_str());
                QVERIFY2(tp.source == plan::SpecSource::Override, name.c_str());
            } else {
                QVERIFY2(tp == m.plan.specs.at(name), name.c_str());
            }
        }
        // Everything the pin drags along follows in the home layer, as search.
        for (const auto &[name, s] : alt->changes) {
            QVERIFY(edited.specs.at(name).spec == s);
            if (name != tensor)
                QVERIFY(edited.specs.at(name).source == plan::SpecSource::Search);
        }
        // The pins are exactly the pinned weights.
        const auto pins = analysis::pinsOf(edited);
        QCOMPARE(pins.size(), std::size_t(wholeClass ? 3 : 1));
        for (const auto &[name, s] : pins) {
            QVERIFY(QString::fromStdString(name).endsWith(weight));
            QVERIFY(s == pinned);
        }
    }

    // A weight outside every class (the token embedding) pins alone.
    void pinOutsideClasses()
    {
        const auto &m = model();
        const std::string tensor = "transformer.wte.weight";
        QVERIFY(m.graph.findTensor(tensor));
        plan::Plan edited = m.plan;
        const auto pinned = spec(QStringLiteral("R"));
        analysis::pinAcrossClass(edited, m.graph, m.classes, tensor, pinned, {{tensor, pinned}}, true);
        QCOMPARE(analysis::pinsOf(edited).size(), std::size_t(1));
        QVERIFY(edited.specs.at(tensor).spec == pinned);
    }

    void pinsOfAPlanWithout()
    {
        QVERIFY(analysis::pinsOf(model().plan).empty());
    }

    // Each collective of Megatron's sequence-parallel plan moves its tensor as its kind says:
    // all-reduce from partial sums to whole, all-gather from split to whole,
    // reduce-scatter from partial sums to split; only its own axis changes.
    void collectiveTransition_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("before");
        QTest::addColumn<QString>("after");
        QTest::newRow("all-reduce") << "all-reduce" << "P" << "R";
        QTest::newRow("all-gather") << "all-gather" << "S" << "R";
        QTest::newRow("reduce-scatter") << "reduce-scatter" << "P" << "S";
    }
    void collectiveTransition()
    {
        QFETCH(QString, kind);
        QFETCH(QString, before);
        QFETCH(QString, after);
        const auto &m = model();
        const auto &p = m.sequenceParallel;
        const auto specs = plan::planSpecs(p, m.graph, kGpt);
        int seen = 0;
        for (const auto &c : p.cost.collectives) {
            if (QString::fromLatin1(sharding::toString(c.kind).data()) != kind)
                continue;
            const auto t = analysis::collectiveTransition(m.graph, p.mesh, specs, c);
            QVERIFY2(t, c.tensor.c_str());
            ++seen;
            QCOMPARE(t->axis, *p.mesh.axisIndex(c.axis));
            QCOMPARE(m.graph.tensor(t->tensor).name, c.tensor);
            auto letter = [](const sharding::Placement &p) {
                return p.isShard() ? QStringLiteral("S") : p.kind == sharding::Placement::Kind::Partial ? QStringLiteral("P")
                                                                                                       : QStringLiteral("R");
            };
            const auto a = static_cast<std::size_t>(t->axis);
            QCOMPARE(letter(t->before.placements[a]), before);
            QCOMPARE(letter(t->after.placements[a]), after);
        }
        QVERIFY(seen > 0);
    }

    void collectiveOnAnotherMesh()
    {
        const auto &m = model();
        const auto specs = plan::planSpecs(m.plan, m.graph, kGpt);
        QVERIFY(!m.plan.cost.collectives.empty());
        auto c = m.plan.cost.collectives.front();
        c.axis = "no-such-axis";
        QVERIFY(!analysis::collectiveTransition(m.graph, m.plan.mesh, specs, c));
        c = m.plan.cost.collectives.front();
        c.tensor = "no.such.tensor";
        QVERIFY(!analysis::collectiveTransition(m.graph, m.plan.mesh, specs, c));
    }
};

QTEST_GUILESS_MAIN(TestPinPropagation)
#include "tst_pinpropagation.moc"
