// One cost engine: whole-plan costing (PlanCoster, evaluatePlan), its
// incremental re-costing, evaluateOps and its totals-only path, and the
// searches' segment coster charge a step by the same rules
// (cost/chargerules.h). Checked over every zoo preset and sample on 1D, 2D
// and 3D meshes, on random legal plans: the sum of a plan cut into segments
// against the whole-plan figure.

#include "cost/chargerules.h"
#include "cost/costmodel.h"
#include "cost/plancoster.h"
#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/zoo.h"
#include "plan/plan.h"
#include "search/segmentcost.h"
#include "sharding/legalspecs.h"
#include "sharding/meshprofile.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

using namespace tapestry;
using sharding::ShardingSpec;

namespace {

// The relative difference the sums may show: the same charges added in
// another order.
constexpr double kRelative = 1e-12;

bool close(double a, double b)
{
    return std::abs(a - b) <= kRelative * std::max({std::abs(a), std::abs(b), 1e-30});
}

sharding::Mesh mesh(const std::vector<int> &sizes)
{
    const auto names = sizes.size() == 3 ? std::vector<std::string>{"dp", "tp", "sp"}
                                         : sharding::defaultAxisNames(sizes.size());
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, names);
}

// A legal spec per tensor, drawn at random.
std::vector<ShardingSpec> randomPlan(const ir::Graph &g, const sharding::Mesh &m, std::mt19937 &rng)
{
    std::vector<ShardingSpec> specs;
    specs.reserve(g.tensorCount());
    for (const auto &t : g.tensors()) {
        const auto legal = sharding::legalSpecs(t.shape, m);
        specs.push_back(legal[std::uniform_int_distribution<std::size_t>(0, legal.size() - 1)(rng)]);
    }
    return specs;
}

// The graph's ops in topological order cut at its residual stream, with
// parts that read a tensor in common joined (a tensor's reshards and
// gradient sums are charged once among its readers, so they must be in one
// part for the parts to add up to the whole).
std::vector<std::vector<ir::OpId>> parts(const ir::Graph &g)
{
    const auto order = *g.topologicalOrder();
    auto blocks = search::splitAtResidualCuts(g, order);
    std::vector<std::size_t> partOf(g.opCount()), leader(blocks.size());
    std::iota(leader.begin(), leader.end(), 0);
    std::function<std::size_t(std::size_t)> find = [&](std::size_t b) {
        return leader[b] == b ? b : leader[b] = find(leader[b]);
    };
    for (std::size_t b = 0; b < blocks.size(); ++b)
        for (auto op : blocks[b])
            partOf[op.index()] = b;
    for (const auto &t : g.tensors())
        for (std::size_t c = 1; c < t.consumers.size(); ++c)
            leader[find(partOf[t.consumers[c].index()])] = find(partOf[t.consumers[0].index()]);
    std::map<std::size_t, std::vector<ir::OpId>> joined;
    for (auto op : order)
        joined[find(partOf[op.index()])].push_back(op);
    std::vector<std::vector<ir::OpId>> out;
    for (auto &[b, ops] : joined)
        out.push_back(std::move(ops));
    return out;
}

std::vector<sharding::OpStrategy> strategies(const ir::Graph &g, const sharding::Mesh &m,
                                             const std::vector<ShardingSpec> &specs, const std::vector<ir::OpId> &ops)
{
    std::vector<sharding::OpStrategy> out;
    std::vector<ShardingSpec> inputs;
    for (auto id : ops) {
        inputs.clear();
        for (auto t : g.op(id).inputs)
            inputs.push_back(specs[t.index()]);
        out.push_back(sharding::resolveStrategy(g, id, inputs, m));
    }
    return out;
}

std::string described(const cost::CollectiveCost &c)
{
    return c.op + " | " + c.tensor + " | " + std::string(sharding::toString(c.kind)) + " " + c.axis + " " +
           std::string(cost::toString(c.phase)) + " " + std::to_string(c.bytes) + " | " + c.reason;
}

cost::ParameterLoad parameterLoad(const ir::Graph &g, const sharding::Mesh &m, const std::vector<ShardingSpec> &specs)
{
    cost::ParameterLoad load;
    for (auto t : g.tensorsWithRole(ir::Role::Parameter))
        load += cost::parameterLoad(g.tensor(t), specs[t.index()], m, {});
    return load;
}

// The segment coster over the parts of a plan, each given its boundary and
// weights from `specs`: the parts' summed costs, and the specs it
// propagates inside them (the plan it makes, to cost whole).
struct SegmentSums {
    double time = 0, comm = 0, backwardComm = 0;
    std::int64_t memory = 0;
    std::vector<ShardingSpec> propagated;
};
SegmentSums costSegments(const ir::Graph &g, const sharding::Mesh &m, const std::vector<std::vector<ir::OpId>> &cut,
                         const std::vector<ShardingSpec> &specs, search::SegmentCoster &segments)
{
    SegmentSums sums;
    sums.propagated = specs;
    for (std::size_t p = 0; p < cut.size(); ++p) {
        const auto seg = search::makeSegment(g, m, "part " + std::to_string(p), -1, 1, cut[p]);
        std::map<ir::TensorId, ShardingSpec> boundary;
        for (const auto *list : {&seg.inputs, &seg.outputs})
            for (auto b : *list)
                boundary[b] = specs[b.index()];
        std::vector<ShardingSpec> weights;
        for (auto w : seg.weights)
            weights.push_back(specs[w.index()]);
        const search::SegmentCost c = segments.evaluate(seg, boundary, weights);
        sums.time += c.time;
        sums.comm += c.comm;
        sums.backwardComm += c.backwardComm;
        sums.memory += c.memory;
        for (auto id : seg.ops)
            for (const auto *list : {&g.op(id).inputs, &g.op(id).outputs})
                for (auto x : *list)
                    if (!boundary.count(x))
                        sums.propagated[x.index()] = segments.spec(x);
    }
    return sums;
}

// "zoo:NAME?layers=4&seq=64" for presets that take those knobs.
QString smallPreset(const io::zoo::Preset &p)
{
    QStringList knobs;
    for (const char *k : {"layers", "decoder_layers", "encoder_layers"})
        if (p.defaults.count(k))
            knobs << QString::fromLatin1(k) + QStringLiteral("=4");
    if (p.defaults.count("seq") && p.defaults.at("seq") > 64)
        knobs << QStringLiteral("seq=64");
    return QStringLiteral("zoo:") + QString::fromStdString(p.name) +
           (knobs.isEmpty() ? QString() : QStringLiteral("?") + knobs.join(QLatin1Char('&')));
}

} // namespace

class TestCostEngine : public QObject {
    Q_OBJECT

private slots:
    void segmentsSumToTheWhole_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        const QString samples = QStringLiteral(TAPESTRY_SOURCE_DIR "/samples/");
        QStringList models;
        for (const auto &p : io::zoo::presets())
            models << smallPreset(p);
        for (const char *f : {"onnx/gpt-tiny.onnx", "onnx/gpt2-external.onnx", "onnx/resnet18-shapes.onnx",
                              "onnx/transformer-encoder.onnx", "models/mlp.json", "models/abc.json",
                              "configs/gpt2.json", "configs/bert-base-uncased.json", "configs/llama3-8b.json",
                              "configs/mixtral-8x7b.json", "configs/t5-small.json"})
            models << samples + QString::fromLatin1(f);
        for (const auto &model : models)
            for (const char *shape : {"8", "4x2", "2x2x2"})
                QTest::newRow(qPrintable(model.section(QLatin1Char('/'), -1) + QLatin1Char(' ') +
                                         QString::fromLatin1(shape)))
                    << model << QString::fromLatin1(shape);
    }
    // Per model and mesh, four random legal plans:
    // - the whole plan re-costed incrementally (from the plan before) is
    //   the whole plan costed afresh, to the last bit;
    // - cut into parts, evaluateOps of the parts plus the optimizer add up
    //   to the whole plan's step, compute and communication (1e-12
    //   relative), with the same wire bytes and collectives to the byte;
    // - evaluateOpsTotals is evaluateOps' totals;
    // - the segment coster, given each part's boundary and weights from the
    //   plan, costs the parts at what the whole plan it propagated costs.
    void segmentsSumToTheWhole()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        io::LoadOptions load;
        load.batch = 4;
        if (!model.contains(QLatin1String("resnet")))  // images have no sequence
            load.seq = 64;
        const auto g = io::loadModel(model.toStdString(), model.startsWith(QLatin1String("zoo:")) ? io::LoadOptions{}
                                                                                                  : load);
        const auto m = mesh(sharding::parseMeshShape(shape.toStdString()));
        const auto cut = parts(g);
        const auto flow = cost::gradientFlow(g);
        std::mt19937 rng(20261124u + static_cast<unsigned>(g.tensorCount()));
        cost::PlanCoster incremental(g, m);
        search::SegmentCoster segments(g, m, {});
        for (int round = 0; round < 4; ++round) {
            const auto specs = randomPlan(g, m, rng);
            const cost::PlanCost whole = cost::evaluatePlan(g, m, specs);
            QVERIFY(incremental.cost(specs) == whole);

            double compute = cost::chargeParameters(parameterLoad(g, m, specs), m, {}).seconds(), comm = 0;
            std::int64_t wire = 0;
            std::size_t collectives = 0;
            std::vector<std::string> charged;  // each collective of the parts, by op and tensor
            for (const auto &ops : cut) {
                const auto s = strategies(g, m, specs, ops);
                const cost::PlanCost part = cost::evaluateOps(g, m, specs, ops, s, flow);
                const cost::OpsTotals totals = cost::evaluateOpsTotals(g, m, specs, ops, s, flow);
                QVERIFY2(close(totals.compute, part.compute) && close(totals.comm, part.comm),
                         qPrintable(QStringLiteral("totals %1/%2, breakdown %3/%4")
                                        .arg(totals.compute)
                                        .arg(totals.comm)
                                        .arg(part.compute)
                                        .arg(part.comm)));
                compute += part.compute;
                comm += part.comm;
                wire += part.commBytes;
                collectives += part.collectives.size();
                for (const auto &c : part.collectives)
                    charged.push_back(described(c));
            }
            QVERIFY2(close(compute, whole.compute),
                     qPrintable(QStringLiteral("compute %1 against %2").arg(compute, 0, 'g', 17).arg(whole.compute, 0, 'g', 17)));
            QVERIFY2(close(comm, whole.comm),
                     qPrintable(QStringLiteral("comm %1 against %2").arg(comm, 0, 'g', 17).arg(whole.comm, 0, 'g', 17)));
            QVERIFY(close(compute + comm, whole.stepTime));
            QCOMPARE(wire, whole.commBytes);
            QCOMPARE(collectives, whole.collectives.size());
            // The whole plan's collectives are the parts', each charged to
            // its own op and naming its own tensor (PlanCoster resolves the
            // ops of one kind once).
            std::vector<std::string> wholeCharged;
            for (const auto &c : whole.collectives)
                wholeCharged.push_back(described(c));
            std::sort(charged.begin(), charged.end());
            std::sort(wholeCharged.begin(), wholeCharged.end());
            QVERIFY(charged == wholeCharged);

            // The segment coster propagates each part from its boundary and
            // weights; the plan it makes is costed whole.
            const SegmentSums sums = costSegments(g, m, cut, specs, segments);
            const double segmentTime = sums.time, segmentComm = sums.comm;
            const cost::PlanCost again = cost::evaluatePlan(g, m, sums.propagated);
            QVERIFY2(close(segmentTime, again.stepTime),
                     qPrintable(QStringLiteral("segments %1 s against the whole %2 s")
                                    .arg(segmentTime, 0, 'g', 17)
                                    .arg(again.stepTime, 0, 'g', 17)));
            QVERIFY(close(segmentComm, again.comm));
        }
    }

    // The memory techniques charge through the same rules on every path:
    // recomputed forward compute and collectives, ZeRO's collectives and
    // sharded states, micro-batched activations. The parts (evaluateOps
    // with the recomputation, plus the parameters' charges) and the
    // segment coster's costs sum to the whole plan's step.
    void techniquesSumToTheWhole_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::addColumn<int>("setting");
        for (const char *model : {"zoo:gpt2?layers=2&seq=64", "zoo:llama3-8b?layers=2&seq=64",
                                  "zoo:t5-base?layers=2&decoder_layers=2&seq=64", "zoo:mlp?batch=8"})
            for (const char *shape : {"8", "4x2"})
                for (int setting : {0, 1, 2})
                    QTest::newRow(qPrintable(QString::fromLatin1(model) + QLatin1Char(' ') + QString::fromLatin1(shape) +
                                             QStringLiteral(" setting ") + QString::number(setting)))
                        << QString::fromLatin1(model) << QString::fromLatin1(shape) << setting;
    }
    void techniquesSumToTheWhole()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        QFETCH(int, setting);
        const auto g = io::loadModel(model.toStdString());
        const auto m = mesh(sharding::parseMeshShape(shape.toStdString()));
        cost::CostOptions options;
        options.techniques = setting == 0   ? cost::Techniques{true, cost::Recompute::Full, 3, 2}
                             : setting == 1 ? cost::Techniques{false, cost::Recompute::Selective, 2, 4}
                                            : cost::Techniques{true, cost::Recompute::None, 1, 1};
        const auto roles = cost::recomputeRoles(g);
        const auto modes = cost::recomputeModes(g, options.techniques);
        const auto cut = parts(g);
        const auto flow = cost::gradientFlow(g);
        std::mt19937 rng(20261125u + static_cast<unsigned>(g.tensorCount()));
        search::SegmentCoster segments(g, m, options);
        for (int round = 0; round < 3; ++round) {
            const auto specs = randomPlan(g, m, rng);
            const cost::PlanCost whole = cost::evaluatePlan(g, m, specs, options);
            // (ZeRO-1 alone saves nothing where the plan replicates no weight.)
            if (setting < 2)
                QVERIFY(whole.memory.total() < cost::evaluatePlan(g, m, specs).memory.total());
            else
                QVERIFY(whole.memory.total() <= cost::evaluatePlan(g, m, specs).memory.total());
            cost::ParameterLoad load;
            const auto shares = cost::parameterShares(g);
            for (auto t : g.tensorsWithRole(ir::Role::Parameter))
                load += cost::parameterLoad(g.tensor(t), specs[t.index()], m, options, shares[t.index()]);
            const cost::ParameterCharge charge = cost::chargeParameters(load, m, options);
            QCOMPARE(charge.memory.parameters + charge.memory.gradients + charge.memory.optimizer,
                     whole.memory.parameters + whole.memory.gradients + whole.memory.optimizer);
            double compute = charge.optimizer.compute, comm = charge.zero.comm;
            for (const auto &ops : cut) {
                const cost::PlanCost part =
                    cost::evaluateOps(g, m, specs, ops, strategies(g, m, specs, ops), flow, {&roles, &modes, options.techniques.flashAttention});
                compute += part.compute;
                comm += part.comm;
            }
            QVERIFY2(close(compute, whole.compute), qPrintable(QStringLiteral("compute %1 against %2").arg(compute).arg(whole.compute)));
            QVERIFY2(close(comm, whole.comm), qPrintable(QStringLiteral("comm %1 against %2").arg(comm).arg(whole.comm)));

            // The segment coster, each part given its boundary and weights.
            const SegmentSums sums = costSegments(g, m, cut, specs, segments);
            const double segmentTime = sums.time;
            const std::int64_t segmentMemory = sums.memory;
            const auto &propagated = sums.propagated;
            const cost::PlanCost again = cost::evaluatePlan(g, m, propagated, options);
            QVERIFY2(close(segmentTime, again.stepTime),
                     qPrintable(QStringLiteral("segments %1 s against the whole %2 s").arg(segmentTime, 0, 'g', 17).arg(again.stepTime, 0, 'g', 17)));
            // The backward pass' communication too, which overlap hides:
            // ZeRO's gathers of updated parameters are the forward pass'.
            const double backwardComm = again.byPhase.count("backward") ? again.byPhase.at("backward").comm : 0;
            QVERIFY2(close(sums.backwardComm, backwardComm),
                     qPrintable(QStringLiteral("segments' backward communication %1 s against the whole %2 s")
                                    .arg(sums.backwardComm, 0, 'g', 17)
                                    .arg(backwardComm, 0, 'g', 17)));
            // Memory too, the working set of full recomputation included
            // (each layer carries its share); Korthikanti's rows follow
            // sequence parallelism plan-wide, the parts each their own.
            bool sequenceParallel = false;
            for (const auto &l : cost::transformerLayers(g, m, propagated))
                sequenceParallel = sequenceParallel || l.sequenceParallel;
            if (again.memory.activationModel == "saved-tensors" || !sequenceParallel)
                QVERIFY2(std::abs(static_cast<double>(segmentMemory - again.memory.total())) <= 8,
                         qPrintable(QStringLiteral("segments %1 B against the whole %2 B")
                                        .arg(segmentMemory)
                                        .arg(again.memory.total())));
        }
    }

    // One coster summing its charges again under other options (setOptions)
    // and without the breakdowns (totals) gives evaluatePlan's figures to
    // the bit; a ranked plan made whole (plan::completePlan) is makePlan's.
    void totalsAndOptionsMatchTheWhole_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        for (const char *model : {"zoo:gpt2?layers=2&seq=64", "zoo:llama3-8b?layers=2&seq=64", "zoo:mlp?batch=8"})
            for (const char *shape : {"8", "4x2"})
                QTest::newRow(qPrintable(QString::fromLatin1(model) + QLatin1Char(' ') + QString::fromLatin1(shape)))
                    << QString::fromLatin1(model) << QString::fromLatin1(shape);
    }
    void totalsAndOptionsMatchTheWhole()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        const auto g = io::loadModel(model.toStdString());
        const auto m = mesh(sharding::parseMeshShape(shape.toStdString()));
        std::vector<cost::CostOptions> settings(4);
        settings[1].techniques = cost::Techniques{true, cost::Recompute::Full, 3, 2};
        settings[2].techniques = cost::Techniques{false, cost::Recompute::Selective, 2, 4};
        settings[3].techniques.offloadOptimizer = true;
        settings[3].overlap = true;
        std::mt19937 rng(20261126u + static_cast<unsigned>(g.tensorCount()));
        cost::PlanCoster coster(g, m);
        for (int round = 0; round < 3; ++round) {
            const auto specs = randomPlan(g, m, rng);
            for (const auto &options : settings) {
                const cost::PlanCost whole = cost::evaluatePlan(g, m, specs, options);
                coster.setOptions(options);
                const cost::PlanCost totals = coster.totals(specs);
                QCOMPARE(totals.stepTime, whole.stepTime);
                QCOMPARE(totals.compute, whole.compute);
                QCOMPARE(totals.comm, whole.comm);
                QCOMPARE(totals.commBytes, whole.commBytes);
                QVERIFY(totals.memory == whole.memory);
                QCOMPARE(totals.memoryCapacity, whole.memoryCapacity);
                QCOMPARE(totals.fitsMemory, whole.fitsMemory);
                QVERIFY(totals.byPhase == whole.byPhase);
                QVERIFY(totals.warnings == whole.warnings);
                QVERIFY(totals.collectives.empty() && totals.byOp.empty() && totals.byCollective.empty());
                QVERIFY(coster.cost(specs) == whole);
            }
            const auto made = plan::makePlan(g, model.toStdString(), m, specs, plan::SpecSource::Search, "tap",
                                             settings[round]);
            cost::PlanCoster ranking(g, m, settings[round]);
            auto ranked = plan::rankedPlan(g, model.toStdString(), specs, "tap", ranking);
            QVERIFY(ranked.specs.empty() && ranked.model.fingerprint.empty());
            QCOMPARE(ranked.cost.stepTime, made.cost.stepTime);
            plan::completePlan(ranked, g, specs, plan::SpecSource::Search, coster);
            QVERIFY(ranked.model == made.model);
            QVERIFY(ranked.specs == made.specs);
            QVERIFY(ranked.cost == made.cost);
            QVERIFY(ranked.axisCarries == made.axisCarries);
            QVERIFY(ranked.costOptions == made.costOptions);
        }
    }

    // Two losses alike (OpKinds) on their own logits, the vocabulary split:
    // the collectives inside each name that loss and its own logits,
    // though one strategy serves both.
    void alikeOpsChargeTheirOwnTensors()
    {
        io::zoo::GraphBuilder b("two heads");
        auto labels = b.input("labels", {2, 6}, ir::DType::I64);
        for (const char *head : {"first", "second"}) {
            b.push(head);
            auto logits = b.input(std::string(head) + "_logits", {2, 6, 64}, ir::DType::F32);
            b.op("SoftmaxCrossEntropyLoss", {logits, labels}, {}, {{"reduction", std::string("mean")}});
            b.pop();
        }
        const auto g = b.take();
        const auto m = mesh({4});
        std::vector<ShardingSpec> specs(g.tensorCount(), ShardingSpec::replicated(1));
        specs[g.findTensor("first_logits")->index()] = {{sharding::Placement::shard(2)}};
        specs[g.findTensor("second_logits")->index()] = {{sharding::Placement::shard(2)}};
        const auto cost = cost::PlanCoster(g, m).cost(specs);
        std::map<std::string, std::string> tensorOf;
        for (const auto &c : cost.collectives)
            if (c.reason.find("reduces across") != std::string::npos)
                QVERIFY2(tensorOf.emplace(c.op, c.tensor).first->second == c.tensor, c.op.c_str());
        QCOMPARE(tensorOf.size(), std::size_t{2});
        QCOMPARE(tensorOf["first/SoftmaxCrossEntropyLoss"], std::string("first_logits"));
        QCOMPARE(tensorOf["second/SoftmaxCrossEntropyLoss"], std::string("second_logits"));
    }
};

QTEST_GUILESS_MAIN(TestCostEngine)
#include "tst_costengine.moc"
