// The studio's document without a window: load a model, derive a plan, pin
// a weight across its class, see the cost change and the signals fire, undo.
#include "plancolouring.h"
#include "plandocument.h"

#include "analysis/explain.h"
#include "analysis/pinpropagation.h"
#include "plan/planjson.h"

#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QUndoStack>
#include <QtTest>

using namespace tapestry;
using tapestry::views::PlanDocument;
using tapestry::views::PlanRequest;

namespace {

const QString kModel = QStringLiteral("zoo:gpt2?layers=2");

// Loads `source` and waits for the plan `request` derives.
bool loadAndDerive(PlanDocument &doc, const QString &source, const PlanRequest &request)
{
    QSignalSpy loaded(&doc, &PlanDocument::modelLoaded);
    QSignalSpy planned(&doc, &PlanDocument::planChanged);
    doc.setPlanRequest(request);
    doc.openModel(source);
    if (!loaded.wait(60000))
        return false;
    if (!doc.derivePlan())
        return false;
    return planned.wait(120000) && doc.planned().plan;
}

sharding::ShardingSpec oneAxis(sharding::Placement placement)
{
    return sharding::ShardingSpec{{placement}};
}

} // namespace

class TestPlanDocument : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QStandardPaths::setTestModeEnabled(true);  // the autosave and settings go to a test location
    }

    void cleanup()
    {
        PlanDocument().clearAutosave();
    }

    // Colour by sharding tells a column-parallel linear (output features
    // split, blue) from a row-parallel one (input features, green) by how
    // its op reads the weight: torch.nn.TransformerEncoder's out_proj is a
    // Gemm of a transposed [out, in] weight, whose dim 1 is its input.
    void shardingColoursFollowTheWeightsLayout()
    {
        PlanDocument doc;
        const QString source = QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/onnx/transformer-encoder.onnx");
        QVERIFY(loadAndDerive(doc, source, {QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}}));
        const auto &model = doc.model();
        auto colourOf = [&](const std::string &opName) {
            layout::ViewNode node;
            node.node = model.coarse->nodeOf(*model.graph->findOp(opName));
            return views::shardingColour(doc, node);
        };
        const QColor column(0x90caf9), row(0xa5d6a7);
        QCOMPARE(colourOf("/layers.0/self_attn/MatMul"), column);  // the stacked in_proj, by heads
        QCOMPARE(colourOf("/layers.0/self_attn/Gemm"), row);       // out_proj, [out, in] split by its dim 1
        QCOMPARE(colourOf("/layers.0/linear1/MatMul"), column);
        QCOMPARE(colourOf("/layers.0/linear2/MatMul"), row);
    }

    // A load, then a derivation: the signals in order, the plan and its cost
    // as the request asked.
    void derive_data()
    {
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("mesh");
        QTest::addColumn<std::vector<int>>("shape");
        QTest::newRow("tap on 4") << QStringLiteral("tap") << QStringLiteral("4") << std::vector<int>{4};
        QTest::newRow("megatron on 4") << QStringLiteral("megatron") << QStringLiteral("4") << std::vector<int>{4};
        QTest::newRow("dp on 2x2") << QStringLiteral("dp") << QStringLiteral("2x2") << std::vector<int>{2, 2};
    }
    void derive()
    {
        QFETCH(QString, method);
        QFETCH(QString, mesh);
        QFETCH(std::vector<int>, shape);
        PlanDocument doc;
        QSignalSpy started(&doc, &PlanDocument::planStarted);
        QSignalSpy finished(&doc, &PlanDocument::planFinished);
        QSignalSpy cost(&doc, &PlanDocument::costChanged);
        QSignalSpy changed(&doc, &PlanDocument::planChanged);
        QVERIFY(!doc.derivePlan());  // no model yet
        QVERIFY(loadAndDerive(doc, kModel, {method, mesh, QStringLiteral("dgx-h100"), {}, {}, {}}));
        QCOMPARE(doc.model().source, kModel);
        QVERIFY(doc.model().classes && !doc.model().classes->classes.empty());
        QCOMPARE(started.size(), 1);
        QCOMPARE(finished.size(), 1);
        QCOMPARE(cost.size(), 1);
        QCOMPARE(changed.size(), 1);
        QCOMPARE(changed.front().front().value<PlanDocument::PlanChange>(), PlanDocument::PlanChange::Derived);
        const auto &p = *doc.planned().plan;
        QCOMPARE(QString::fromStdString(p.method), method);
        QCOMPARE(p.mesh.shape(), shape);
        QVERIFY(cost.front().front().value<cost::PlanCost>() == p.cost);
        QVERIFY(p.cost.stepTime > 0);
        QVERIFY(analysis::pinsOf(p).empty());
        QVERIFY(!doc.hasUnsavedEdits());
    }

    // A request the search refuses: planFailed, and the document keeps the
    // plan it had, its request set back to that plan's.
    void failedDerivationKeepsPlan()
    {
        PlanDocument doc;
        QVERIFY(loadAndDerive(doc, kModel, {QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}}));
        const auto kept = doc.planned().plan;
        QSignalSpy failed(&doc, &PlanDocument::planFailed);
        QSignalSpy request(&doc, &PlanDocument::planRequestChanged);
        doc.setPlanRequest({QStringLiteral("megatron"), QStringLiteral("8"), QStringLiteral("dgx-h100"), {}, {}, {}});
        QVERIFY(doc.derivePlan());
        QVERIFY(failed.wait(60000));
        QVERIFY(failed.front().front().toString().contains(QStringLiteral("heads")));
        QCOMPARE(failed.front().at(1).toBool(), false);
        QCOMPARE(doc.planned().plan, kept);
        QCOMPARE(doc.planRequest().meshShape, QStringLiteral("4"));
        QCOMPARE(request.size(), 2);  // the request asked for, then the plan's
    }

    // Pinning a weight to another legal spec, across its class or on its
    // instance only: the cost changes (costChanged, then planChanged as an
    // edit), the pins are where they belong, and undo restores the derived
    // plan bit for bit.
    void pinAndUndo_data()
    {
        QTest::addColumn<QString>("tensor");
        QTest::addColumn<QString>("counterpart");
        QTest::addColumn<bool>("wholeClass");
        QTest::newRow("c_fc, whole class") << QStringLiteral("transformer.h.0.mlp.c_fc.weight")
                                            << QStringLiteral("transformer.h.1.mlp.c_fc.weight") << true;
        QTest::newRow("c_fc, one instance") << QStringLiteral("transformer.h.0.mlp.c_fc.weight")
                                             << QStringLiteral("transformer.h.1.mlp.c_fc.weight") << false;
        QTest::newRow("c_proj of layer 1, whole class") << QStringLiteral("transformer.h.1.mlp.c_proj.weight")
                                                        << QStringLiteral("transformer.h.0.mlp.c_proj.weight") << true;
    }
    void pinAndUndo()
    {
        QFETCH(QString, tensor);
        QFETCH(QString, counterpart);
        QFETCH(bool, wholeClass);
        PlanDocument doc;
        QVERIFY(loadAndDerive(doc, kModel, {QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}}));
        const auto derived = doc.planned().plan;
        const std::string derivedJson = plan::writePlanJson(*derived);
        const std::string name = tensor.toStdString(), other = counterpart.toStdString();

        // Megatron splits the MLP's weights one way; pin them the other.
        const auto &was = derived->specs.at(name).spec;
        const auto pinned = was.placements[0].isShard() && was.placements[0].dim == 1
                                ? oneAxis(sharding::Placement::shard(0))
                                : oneAxis(sharding::Placement::shard(1));
        QSignalSpy cost(&doc, &PlanDocument::costChanged);
        QSignalSpy changed(&doc, &PlanDocument::planChanged);
        QSignalSpy failed(&doc, &PlanDocument::failed);
        doc.setPinWholeClass(wholeClass);
        QVERIFY(doc.pinTensor(name, pinned, doc.pinWholeClass()));
        QVERIFY2(failed.isEmpty(), failed.isEmpty() ? "" : qPrintable(failed.front().front().toString()));
        QCOMPARE(cost.size(), 1);
        QCOMPARE(changed.size(), 1);
        QCOMPARE(changed.front().front().value<PlanDocument::PlanChange>(), PlanDocument::PlanChange::Edited);

        const auto &p = *doc.planned().plan;
        QVERIFY(doc.planned().plan != derived);
        QVERIFY(p.cost.stepTime != derived->cost.stepTime);
        QVERIFY(cost.front().front().value<cost::PlanCost>() == p.cost);
        QVERIFY(p.specs.at(name).spec == pinned);
        QVERIFY(p.specs.at(name).source == plan::SpecSource::Override);
        if (wholeClass) {
            QVERIFY(p.specs.at(other).spec == pinned);
            QVERIFY(p.specs.at(other).source == plan::SpecSource::Override);
        } else {
            QVERIFY(p.specs.at(other) == derived->specs.at(other));
        }
        QCOMPARE(analysis::pinsOf(p).size(), std::size_t(wholeClass ? 2 : 1));
        // The document's specs by tensor id follow the plan.
        const auto id = doc.model().graph->findTensor(name);
        QVERIFY(id && doc.planned().specs.at(id->index()) == pinned);
        QVERIFY(doc.hasUnsavedEdits());
        QCOMPARE(doc.autosavedPins(), static_cast<int>(analysis::pinsOf(p).size()));
        // The explainer follows the edit: the pinned spec is now the chosen one.
        const auto explanation = doc.explainer()->explainTensor(name);
        bool chosen = false;
        for (const auto &alt : explanation.alternatives)
            chosen = chosen || (alt.chosen && alt.spec == pinned);
        QVERIFY(chosen);

        const std::string pinnedJson = plan::writePlanJson(p);
        doc.undoStack()->undo();
        QCOMPARE(plan::writePlanJson(*doc.planned().plan), derivedJson);
        QCOMPARE(cost.size(), 2);
        QVERIFY(cost.back().front().value<cost::PlanCost>() == derived->cost);
        QCOMPARE(changed.back().front().value<PlanDocument::PlanChange>(), PlanDocument::PlanChange::Edited);
        QVERIFY(!doc.hasUnsavedEdits());
        doc.undoStack()->redo();
        QCOMPARE(plan::writePlanJson(*doc.planned().plan), pinnedJson);
    }

    // A spec that is not a legal choice: refused with one line naming the
    // tensor; the plan, the undo stack and the cost stay.
    void illegalPinIsRefused()
    {
        PlanDocument doc;
        QVERIFY(loadAndDerive(doc, kModel, {QStringLiteral("megatron"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}}));
        const auto derived = doc.planned().plan;
        QSignalSpy failed(&doc, &PlanDocument::failed);
        QSignalSpy cost(&doc, &PlanDocument::costChanged);
        QVERIFY(!doc.pinTensor("transformer.h.0.mlp.c_fc.weight", oneAxis(sharding::Placement::shard(5)), true));
        QCOMPARE(failed.size(), 1);
        QVERIFY(failed.front().front().toString().contains(QStringLiteral("transformer.h.0.mlp.c_fc.weight")));
        QVERIFY(!failed.front().front().toString().contains(QLatin1Char('\n')));
        QCOMPARE(cost.size(), 0);
        QCOMPARE(doc.planned().plan, derived);
        QCOMPARE(doc.undoStack()->count(), 0);
    }

    // Re-deriving around the pins keeps them, on the plan's mesh, as one
    // more undoable edit; saving marks the edits kept.
    void rederiveAroundPins()
    {
        PlanDocument doc;
        QVERIFY(loadAndDerive(doc, QStringLiteral("zoo:gpt2?layers=2&heads=4&hidden=256"),
                              {QStringLiteral("tap"), QStringLiteral("4"), QStringLiteral("dgx-h100"), {}, {}, {}}));
        const auto columns = oneAxis(sharding::Placement::shard(1));
        QVERIFY(doc.pinTensor("transformer.h.0.mlp.c_fc.weight", columns, true));
        const auto pins = analysis::pinsOf(*doc.planned().plan);
        QSignalSpy changed(&doc, &PlanDocument::planChanged);
        QVERIFY(doc.rederiveAroundPins());
        QVERIFY(changed.wait(120000));
        QCOMPARE(changed.front().front().value<PlanDocument::PlanChange>(), PlanDocument::PlanChange::Edited);
        QVERIFY(analysis::pinsOf(*doc.planned().plan) == pins);
        QCOMPARE(doc.undoStack()->index(), 2);
        QTemporaryDir dir;
        QVERIFY(doc.savePlan(dir.filePath(QStringLiteral("plan.json"))));
        QVERIFY(!doc.hasUnsavedEdits());
        QCOMPARE(doc.autosavedPins(), 0);
    }

    // Re-deriving where nothing around the pins beats the plan they are on
    // (a one-layer GPT-3 on 8 (tp), everything replicated, its tied
    // embedding pinned split): that plan is kept, the edit says so, and
    // the document tells the views; the next plan clears it.
    void rederiveKeepsThePinnedPlan()
    {
        PlanDocument doc;
        search::TechniqueChoices fixed;
        fixed.flashAttention = false;
        fixed.recompute = cost::Recompute::None;
        fixed.zeroStage = 0;
        fixed.microBatches = 1;
        fixed.offloadOptimizer = false;
        QVERIFY(loadAndDerive(
            doc, QStringLiteral("zoo:gpt3-6.7b?batch=2&ffn=288&heads=12&hidden=96&layers=1&positions=32&seq=16&vocab=256"),
            {QStringLiteral("tap"), QStringLiteral("8 (tp)"), QStringLiteral("dgx-h100"), {}, {}, fixed}));
        QVERIFY(doc.pinTensor("transformer.wte.weight", oneAxis(sharding::Placement::shard(1)), true));
        const auto pinned = doc.planned().plan;
        QSignalSpy changed(&doc, &PlanDocument::planChanged);
        QVERIFY(doc.rederiveAroundPins());
        QVERIFY(changed.wait(120000));
        QVERIFY(doc.pinnedPlanKept());
        QVERIFY(doc.planned().plan->specs == pinned->specs);
        QVERIFY(doc.undoStack()->undoText().contains(QStringLiteral("nothing better found")));
        doc.undoStack()->undo();
        QVERIFY(!doc.pinnedPlanKept());
    }

    // The selection is the document's: setting it tells whoever follows.
    void selection()
    {
        PlanDocument doc;
        QSignalSpy selected(&doc, &PlanDocument::selectionChanged);
        doc.setSelection(0, passes::NodeId(3));
        QCOMPARE(selected.size(), 1);
        QCOMPARE(doc.selectedClass(), 0);
        QCOMPARE(doc.selectedNode(), passes::NodeId(3));
        doc.setSelection(-1, {});
        QCOMPARE(selected.size(), 2);
        QVERIFY(!doc.selectedNode().valid());
    }

    // A model that does not load: loadFailed with the input named; nothing
    // open, so there is nothing to derive.
    void loadFailure()
    {
        PlanDocument doc;
        QSignalSpy failed(&doc, &PlanDocument::loadFailed);
        doc.openModel(QStringLiteral("zoo:no-such-model"));
        QVERIFY(failed.wait(30000));
        QVERIFY(failed.front().front().toString().contains(QStringLiteral("no-such-model")));
        QCOMPARE(failed.front().at(1).toBool(), false);
        QVERIFY(!doc.model().graph);
        QVERIFY(!doc.derivePlan());
    }
};

QTEST_GUILESS_MAIN(TestPlanDocument)
#include "tst_plandocument.moc"
