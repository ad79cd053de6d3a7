// The memory techniques in the plan space (core/cost/README.md): activation
// memory pinned to Korthikanti et al.'s table, row by row; ZeRO's model
// states pinned to Rajbhandari et al.'s per stage, to the byte; what
// recomputation, flash attention, ZeRO and micro-batches add to a step;
// plans that choose them fit the flagship models where nothing fitted; the
// search holds its own against exact with them.

#include "cost/activationmemory.h"
#include "cost/chargerules.h"
#include "cost/costmodel.h"
#include "sharding/strategy.h"
#include "cost/objective.h"
#include "io/modelloader.h"
#include "passes/coarsen.h"
#include "plan/planjson.h"
#include "passes/prune.h"
#include "search/exactsearch.h"
#include "search/referenceplan.h"
#include "search/tapsearch.h"
#include "search/techniquesearch.h"
#include "sharding/meshprofile.h"

#include <QtTest>

#include <algorithm>

#include <cmath>
#include <set>
#include <tuple>

using namespace tapestry;

namespace {

// GPT-2 shaped (4h MLP, as Korthikanti's table assumes): s 512, b 8, h 1024, a 16.
const char *kGpt = "zoo:gpt2?layers=2&batch=8&seq=512&hidden=1024&heads=16&vocab=1024";
constexpr double kS = 512, kB = 8, kH = 1024, kA = 16, kLayers = 2;

sharding::Mesh mesh(std::vector<int> sizes)
{
    return sharding::findMeshProfile("dgx-h100").mesh(sizes, sharding::defaultAxisNames(sizes.size()));
}

cost::PlanCost costWith(const ir::Graph &g, const plan::Plan &p, const cost::Techniques &t)
{
    cost::CostOptions o = p.costOptions;
    o.techniques = t;
    return cost::evaluatePlan(g, p.mesh, plan::planSpecs(p, g, "plan"), o);
}

plan::Plan reference(const ir::Graph &g, const sharding::Mesh &m, search::ReferenceMethod method, bool sp = false)
{
    search::ReferenceOptions o;
    o.sequenceParallel = sp;
    return search::referencePlan(g, kGpt, m, method, o);
}

// The backward pass' working set, once per plan (16-bit): the gradients of a
// layer's output, input and residual branch (s·b·h each, over t with
// sequence parallelism) and its largest intermediate gradient (the MLP's
// 4·s·b·h/t, or the probabilities' a·s²·b/t without flash attention).
double workingSet(double t, bool sequenceParallel, bool flash)
{
    const double sbh = kS * kB * kH;
    return 2 * (3 * (sequenceParallel ? sbh / t : sbh) + std::max(4 * sbh / t, flash ? 0.0 : kA * kS * kS * kB / t));
}

double parameterCount(const ir::Graph &g)
{
    double n = 0;
    for (auto t : g.tensorsWithRole(ir::Role::Parameter))
        n += static_cast<double>(g.tensor(t).elementCount());
    return n;
}

} // namespace

class TestTechniques : public QObject {
    Q_OBJECT

private slots:
    // Korthikanti et al., Table 2 (activation bytes per layer, 16-bit):
    // each row against the plan's activations, ±1%.
    void korthikantiRows_data()
    {
        QTest::addColumn<QString>("plan");
        QTest::addColumn<QString>("recompute");
        QTest::addColumn<double>("perLayer");
        const double sbh = kS * kB * kH, as_h = kA * kS / kH, t = 8;
        QTest::newRow("no parallelism") << "replicate" << "none" << sbh * (34 + 5 * as_h);
        QTest::newRow("tensor parallel") << "megatron" << "none" << sbh * (10 + 24 / t + 5 * as_h / t);
        QTest::newRow("tensor + sequence parallel") << "megatron-sp" << "none" << sbh / t * (34 + 5 * as_h);
        QTest::newRow("no parallelism, selective") << "replicate" << "selective" << sbh * 34;
        QTest::newRow("tensor parallel, selective") << "megatron" << "selective" << sbh * (10 + 24 / t);
        QTest::newRow("tensor + sequence parallel, selective") << "megatron-sp" << "selective" << sbh * 34 / t;
        QTest::newRow("full recomputation") << "replicate" << "full" << sbh * 2;
        QTest::newRow("full recomputation, sequence parallel") << "megatron-sp" << "full" << sbh * 2 / t;
    }
    void korthikantiRows()
    {
        QFETCH(QString, plan);
        QFETCH(QString, recompute);
        QFETCH(double, perLayer);
        const auto g = io::loadModel(kGpt);
        const auto m = mesh({8});
        const auto p = plan == "replicate" ? reference(g, m, search::ReferenceMethod::Replicate)
                                           : reference(g, m, search::ReferenceMethod::Megatron, plan == "megatron-sp");
        cost::Techniques t;
        t.recompute = *cost::recomputeFromString(recompute.toStdString());
        const cost::PlanCost c = costWith(g, p, t);
        QCOMPARE(c.memory.activationModel, std::string("korthikanti"));
        const double tp = plan == "replicate" ? 1 : 8;
        const bool sp = plan == "megatron-sp";
        // The rows, and once per plan the backward pass' working set.
        double expected = perLayer * kLayers + workingSet(tp, sp, false);
        // Full recomputation also holds the one layer it recomputes, whole,
        // during that layer's backward pass (once per plan): the row
        // without recomputation.
        if (t.recompute == cost::Recompute::Full) {
            const double sbh = kS * kB * kH, as_h = kA * kS / kH;
            expected += sp ? sbh / tp * (34 + 5 * as_h) : sbh * (34 + 5 * as_h);
        }
        QVERIFY2(std::abs(static_cast<double>(c.memory.activations) - expected) <= 0.01 * expected,
                 qPrintable(QStringLiteral("%1 B, the table says %2 B").arg(c.memory.activations).arg(expected)));
    }

    // Flash attention keeps no s x s tensor: the selective row plus the
    // softmax statistics (4 bytes per row of scores); micro-batches divide
    // the batch the activations are kept for, rounded up to whole samples.
    void flashAttentionAndMicroBatches()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = reference(g, mesh({8}), search::ReferenceMethod::Megatron, true);
        const double t = 8, sbh = kS * kB * kH;
        cost::Techniques flash;
        flash.flashAttention = true;
        QCOMPARE(static_cast<double>(costWith(g, p, flash).memory.activations),
                 kLayers * (34 * sbh / t + 4 * kA * kS * kB / t) + workingSet(t, true, true));
        const std::int64_t whole = costWith(g, p, {}).memory.activations;
        for (int m : {2, 4}) {
            cost::Techniques micro;
            micro.microBatches = m;
            QCOMPARE(costWith(g, p, micro).memory.activations, whole / m);
        }
        cost::Techniques sixteen;
        sixteen.microBatches = 16;  // batch 8: one sample per micro-batch at least
        QCOMPARE(costWith(g, p, sixteen).memory.activations, whole / 8);
        // The saved-tensor model (no attention layer) divides dim 0 too.
        const auto mlp = io::loadModel("zoo:mlp?batch=8");
        const auto dp = search::referencePlan(mlp, "zoo:mlp?batch=8", mesh({2}), search::ReferenceMethod::DataParallel);
        cost::Techniques two;
        two.microBatches = 2;
        QCOMPARE(costWith(mlp, dp, {}).memory.activationModel, std::string("saved-tensors"));
        QCOMPARE(costWith(mlp, dp, two).memory.activations * 2, costWith(mlp, dp, {}).memory.activations);
    }

    // Rajbhandari et al.: 2Ψ + 2Ψ + 12Ψ for mixed-precision Adam, stage 1
    // dividing the optimizer state by the data-parallel degree, stage 2 the
    // gradients too, stage 3 the parameters too. Data parallel on 8: every
    // parameter replicated, so Ψ/8 each; to the byte.
    void zeroStagesToTheByte()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = reference(g, mesh({8}), search::ReferenceMethod::DataParallel);
        const double psi = parameterCount(g);
        struct Row {
            int stage;
            double parameters, gradients, optimizer;
        };
        // ZeRO-3 also holds one layer's parameters gathered whole while the
        // layer computes: 7/8 of them beyond the layer's shards.
        double layer = 0;
        for (auto t : g.tensorsWithRole(ir::Role::Parameter))
            if (g.tensor(t).name.starts_with("transformer.h.0."))
                layer += static_cast<double>(g.tensor(t).elementCount());
        for (const Row &r : {Row{0, 2 * psi, 2 * psi, 12 * psi}, Row{1, 2 * psi, 2 * psi, 12 * psi / 8},
                             Row{2, 2 * psi, 2 * psi / 8, 12 * psi / 8},
                             Row{3, 2 * psi / 8 + 2 * layer * 7 / 8, 2 * psi / 8, 12 * psi / 8}}) {
            cost::Techniques t;
            t.zeroStage = r.stage;
            const cost::PlanCost c = costWith(g, p, t);
            QCOMPARE(c.memory.parameters, std::llround(r.parameters));
            QCOMPARE(c.memory.gradients, std::llround(r.gradients));
            QCOMPARE(c.memory.optimizer, std::llround(r.optimizer));
        }
    }

    // ZeRO's time: stages 1 and 2 reduce-scatter and gather where stage 0
    // all-reduces (the same ring time), so one micro-batch adds no
    // collective; stage 3 gathers each parameter before every micro-batch's
    // forward and backward pass, and stages 2 and 3 reduce-scatter every
    // micro-batch's gradient: 2m - 1 gathers and m - 1 reduce-scatters more.
    // Stage 3 lists the last gradient's all-reduce as its two halves.
    void zeroCollectivesPerMicroBatch()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = reference(g, mesh({8}), search::ReferenceMethod::DataParallel);
        const cost::PlanCost base = costWith(g, p, {});
        const auto parameters = static_cast<int>(g.tensorsWithRole(ir::Role::Parameter).size());
        auto zeroCount = [](const cost::PlanCost &c, sharding::CollectiveKind kind) {
            int n = 0;
            for (const auto &x : c.collectives)
                n += x.kind == kind && x.reason.starts_with("ZeRO") ? 1 : 0;
            return n;
        };
        // Stages 1 and 2 list each weight gradient's all-reduce as its halves,
        // the reduce-scatter in the backward pass and the gather of the
        // updated parameter in the forward pass, at its time.
        auto weightGradients = [](const cost::PlanCost &x, sharding::CollectiveKind kind, cost::Phase phase) {
            int n = 0;
            double time = 0;
            for (const auto &y : x.collectives)
                if (y.kind == kind && y.reason.starts_with("weight gradient") && y.phase == phase) {
                    ++n;
                    time += y.time;
                }
            return std::pair{n, time};
        };
        const auto [baseReductions, baseReductionTime] =
            weightGradients(base, sharding::CollectiveKind::AllReduce, cost::Phase::Backward);
        QVERIFY(baseReductions > 0);
        for (int stage : {1, 2}) {
            cost::Techniques t;
            t.zeroStage = stage;
            const cost::PlanCost c = costWith(g, p, t);
            QCOMPARE(c.collectives.size(), base.collectives.size() + static_cast<std::size_t>(baseReductions));
            QVERIFY(std::abs(c.comm - base.comm) <= 1e-12 * base.comm);
            QVERIFY(c.byPhase.at("optimizer").compute < base.byPhase.at("optimizer").compute);
            QCOMPARE(weightGradients(c, sharding::CollectiveKind::AllReduce, cost::Phase::Backward).first, 0);
            const auto [scatters, scatterTime] =
                weightGradients(c, sharding::CollectiveKind::ReduceScatter, cost::Phase::Backward);
            const auto [gathers, gatherTime] = weightGradients(c, sharding::CollectiveKind::AllGather, cost::Phase::Forward);
            QCOMPARE(scatters, baseReductions);
            QCOMPARE(gathers, baseReductions);
            QVERIFY(std::abs(scatterTime + gatherTime - baseReductionTime) <= 1e-12 * baseReductionTime);
            QVERIFY(std::abs(c.byPhase.at("forward").comm - base.byPhase.at("forward").comm - gatherTime) <=
                    1e-9 * gatherTime);
            // Overlap hides the backward pass' communication: the gathers are not in it.
            QVERIFY(std::abs(base.byPhase.at("backward").comm - c.byPhase.at("backward").comm - gatherTime) <=
                    1e-9 * gatherTime);
        }
        for (int m : {1, 2, 4}) {
            cost::Techniques t;
            t.zeroStage = 3;
            t.microBatches = m;
            const cost::PlanCost c = costWith(g, p, t);
            QCOMPARE(zeroCount(c, sharding::CollectiveKind::AllGather), (2 * m - 1) * parameters);
            QCOMPARE(zeroCount(c, sharding::CollectiveKind::ReduceScatter), (m - 1) * parameters);
            QVERIFY(c.comm > base.comm);
            // Each weight gradient's all-reduce is listed as FSDP runs it: a
            // reduce-scatter of the gradient and the backward pass' gather
            // of the parameter, in the backward pass, at its time and bytes.
            auto gradientSync = [](const cost::PlanCost &x, sharding::CollectiveKind kind) {
                int n = 0;
                double time = 0;
                std::int64_t wire = 0;
                for (const auto &y : x.collectives)
                    if (y.kind == kind && y.reason.starts_with("weight gradient") && y.phase == cost::Phase::Backward) {
                        ++n;
                        time += y.time;
                        wire += y.wireBytes;
                    }
                return std::tuple{n, time, wire};
            };
            const auto [reductions, reductionTime, reductionWire] = gradientSync(base, sharding::CollectiveKind::AllReduce);
            QVERIFY(reductions > 0);
            QCOMPARE(std::get<0>(gradientSync(c, sharding::CollectiveKind::AllReduce)), 0);
            const auto [scatters, scatterTime, scatterWire] = gradientSync(c, sharding::CollectiveKind::ReduceScatter);
            const auto [gathers, gatherTime, gatherWire] = gradientSync(c, sharding::CollectiveKind::AllGather);
            QCOMPARE(scatters, reductions);
            QCOMPARE(gathers, reductions);
            QVERIFY(std::abs(scatterTime + gatherTime - reductionTime) <= 1e-12 * reductionTime);
            QCOMPARE(scatterWire + gatherWire, reductionWire);
            // The breakdown of ops the explainer and the segments read lists them alike.
            const auto planned = plan::planSpecs(p, g, "plan");
            std::vector<ir::OpId> ops;
            std::vector<sharding::OpStrategy> strategies;
            const auto order = g.topologicalOrder();
            QVERIFY(order);
            for (auto id : *order) {
                ops.push_back(id);
                std::vector<sharding::ShardingSpec> inputs;
                for (auto x : g.op(id).inputs)
                    inputs.push_back(planned[x.index()]);
                strategies.push_back(sharding::resolveStrategy(g, id, inputs, p.mesh));
            }
            const cost::PlanCost byOps =
                cost::evaluateOps(g, p.mesh, planned, ops, strategies, cost::gradientFlow(g), {}, &t);
            QCOMPARE(std::get<0>(gradientSync(byOps, sharding::CollectiveKind::AllReduce)), 0);
            QCOMPARE(std::get<0>(gradientSync(byOps, sharding::CollectiveKind::ReduceScatter)), reductions);
            QCOMPARE(std::get<0>(gradientSync(byOps, sharding::CollectiveKind::AllGather)), reductions);
            // The search charges the same seconds per parameter.
            cost::CostOptions o;
            o.techniques = t;
            const auto specs = plan::planSpecs(p, g, "plan");
            cost::ParameterLoad load;
            for (auto w : g.tensorsWithRole(ir::Role::Parameter))
                load += cost::parameterLoad(g.tensor(w), specs[w.index()], p.mesh, o);
            double zero = 0;
            for (const auto &x : c.collectives)
                zero += x.reason.starts_with("ZeRO") ? x.time : 0;
            QVERIFY(std::abs(cost::chargeParameters(load, p.mesh, o).zero.comm - zero) <= 1e-12 * zero);
        }
    }

    // Axes named by role: ZeRO shards over the data axis only, as FSDP on
    // the data mesh and Megatron's distributed optimizer do, so a norm's
    // weight, replicated on the tensor axis too, is not cut there; the plan
    // file keeps the axes.
    void zeroOverTheDataAxes()
    {
        const auto g = io::loadModel(kGpt);
        const auto m = sharding::findMeshProfile("dgx-h100").mesh({2, 4}, {"data", "model"});
        const auto p = reference(g, m, search::ReferenceMethod::Megatron);
        cost::Techniques every, data;
        every.zeroStage = data.zeroStage = 3;
        data.zeroAxes = std::vector<std::string>{"data"};
        auto zeroAxes = [](const cost::PlanCost &c) {
            std::set<std::string> axes;
            for (const auto &x : c.collectives)
                if (x.reason.starts_with("ZeRO"))
                    axes.insert(x.axis);
            return axes;
        };
        const cost::PlanCost overEvery = costWith(g, p, every), overData = costWith(g, p, data);
        QCOMPARE(zeroAxes(overEvery), (std::set<std::string>{"data", "model"}));
        QCOMPARE(zeroAxes(overData), (std::set<std::string>{"data"}));
        QVERIFY(overData.memory.total() > overEvery.memory.total());
        const auto specs = plan::planSpecs(p, g, "plan");
        for (auto w : g.tensorsWithRole(ir::Role::Parameter))
            if (g.tensor(w).shape.size() == 1 && specs[w.index()].isReplicated()) {
                QCOMPARE(cost::zeroDegree(specs[w.index()], m, every), std::int64_t{8});
                QCOMPARE(cost::zeroDegree(specs[w.index()], m, data), std::int64_t{2});
            }
        plan::Plan q = p;
        q.costOptions.techniques = data;
        const QString file = QDir::temp().filePath(QStringLiteral("tst_techniques_zero_axes.json"));
        plan::writePlanFile(file.toStdString(), q);
        QCOMPARE(plan::readPlanFile(file.toStdString()).costOptions.techniques.zeroAxes, data.zeroAxes);
        QFile::remove(file);
    }

    // Recomputation runs the forward pass again in the backward pass: full
    // recomputation every op of the layers, with their forward collectives
    // (Megatron's two all-reduces per layer again); selective the attention
    // core's compute; flash attention the scores' compute.
    void recomputationChargesTheForwardAgain()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = reference(g, mesh({8}), search::ReferenceMethod::Megatron);
        const cost::PlanCost base = costWith(g, p, {});
        const auto roles = cost::recomputeRoles(g);
        for (std::size_t o = 0; o < g.opCount(); ++o) {
            const std::string &name = g.op(ir::OpId(static_cast<std::int32_t>(o))).name;
            QVERIFY2(((roles[o] & cost::kLayer) != 0) == (name.find("/h.") != std::string::npos), name.c_str());
        }
        int scoreOps = 0, contextOps = 0;
        for (auto r : roles) {
            scoreOps += (r & cost::kScore) ? 1 : 0;
            contextOps += (r & cost::kContext) ? 1 : 0;
        }
        QVERIFY(scoreOps >= 2 * 3);  // q·kᵀ, scale, softmax per layer at least
        QCOMPARE(contextOps, 2);     // the probabilities times v, per layer

        cost::Techniques full;
        full.recompute = cost::Recompute::Full;
        const cost::PlanCost f = costWith(g, p, full);
        const auto &fb = f.byPhase.at("backward"), &bb = base.byPhase.at("backward"), &ff = base.byPhase.at("forward");
        // Every layer op's forward compute again: nearly all of the forward.
        QVERIFY(fb.compute > bb.compute + 0.9 * ff.compute && fb.compute < bb.compute + ff.compute * (1 + 1e-9));
        int recomputed = 0;
        for (const auto &c : f.collectives)
            recomputed += c.reason.starts_with("recomputed: ") ? 1 : 0;
        QCOMPARE(recomputed, 2 * static_cast<int>(kLayers));
        QCOMPARE(f.collectives.size(), base.collectives.size() + static_cast<std::size_t>(recomputed));
        QCOMPARE(f.byPhase.at("forward"), base.byPhase.at("forward"));

        cost::Techniques selective, flash;
        selective.recompute = cost::Recompute::Selective;
        flash.flashAttention = true;
        const double sel = costWith(g, p, selective).byPhase.at("backward").compute - bb.compute;
        const double fl = costWith(g, p, flash).byPhase.at("backward").compute - bb.compute;
        QVERIFY(sel > 0 && fl > 0 && fl < sel);
        QCOMPARE(costWith(g, p, selective).collectives.size(), base.collectives.size());
    }

    // Recomputation by kind of layer (TAP's class): a T5's decoder layers
    // recomputed in full, its encoder's kept. Memory and time fall between
    // none and full everywhere; the search offers it on models with two
    // kinds of layer, orders it between the two, and plan files keep it.
    void recomputationByKindOfLayer()
    {
        const std::string source = "zoo:t5-base?layers=2&decoder_layers=2&batch=8&seq=256&target_seq=256&heads=8";
        const auto g = io::loadModel(source);
        const auto kinds = cost::attentionLayerKinds(g);
        QCOMPARE(kinds, (std::vector<std::string>{"decoder/block.*/", "encoder/block.*/"}));
        const auto p = search::referencePlan(g, source, mesh({8}), search::ReferenceMethod::Megatron);
        cost::Techniques none, decoder, full;
        decoder.recomputeLayers["decoder/block.*/"] = cost::Recompute::Full;
        full.recompute = cost::Recompute::Full;
        const auto a = costWith(g, p, none), b = costWith(g, p, decoder), c = costWith(g, p, full);
        QVERIFY(a.memory.activations > b.memory.activations && b.memory.activations > c.memory.activations);
        const double ab = a.byPhase.at("backward").compute, bb = b.byPhase.at("backward").compute,
                     cb = c.byPhase.at("backward").compute;
        QVERIFY(ab < bb && bb < cb);
        // Only the decoder's ops run their forward again.
        const auto modes = cost::recomputeModes(g, decoder);
        for (std::size_t o = 0; o < g.opCount(); ++o) {
            const std::string &name = g.op(ir::OpId(static_cast<std::int32_t>(o))).name;
            QCOMPARE(modes[o] == cost::Recompute::Full, name.starts_with("decoder/block."));
        }
        QCOMPARE(cost::describe(decoder), std::string("full recomputation of decoder/block.*/"));
        QVERIFY(search::noFasterThan(none, decoder) && search::noFasterThan(decoder, full));
        QVERIFY(!search::noFasterThan(full, decoder) && !search::noFasterThan(decoder, none));
        const auto candidates = search::techniqueCandidates({}, true, 8, kinds);
        QVERIFY(std::find_if(candidates.begin(), candidates.end(), [&](const cost::Techniques &t) {
                    return t.recomputeLayers == decoder.recomputeLayers && t.recompute == cost::Recompute::None;
                }) != candidates.end());
        QVERIFY(candidates.back().recompute == cost::Recompute::Full);  // the least memory last
        // Written and read with the plan, costed the same.
        auto withKinds = p;
        withKinds.costOptions.techniques = decoder;
        plan::recostPlan(withKinds, g, "plan");
        const auto read = plan::readPlanJson(plan::writePlanJson(withKinds), "plan.json");
        QVERIFY(read.costOptions.techniques == decoder);
        QVERIFY(read.cost == withKinds.cost);
        QVERIFY(withKinds.cost == b);
    }

    // The flagship presets fit their meshes once the search chooses the
    // memory techniques (they needed 96 to 369 GiB per device without).
    void flagshipsFit_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::newRow("llama3-8b on 8") << "zoo:llama3-8b" << "8";
        QTest::newRow("llama3-8b on 2x4") << "zoo:llama3-8b" << "2x4";
        QTest::newRow("llama3-70b on 8x8") << "zoo:llama3-70b" << "8x8";
        QTest::newRow("gpt3-175b on 8x8") << "zoo:gpt3-175b" << "8x8";
        // Fits only in 8 micro-batches of its batch of 8, with the
        // optimizer on the host: a plan splitting the batch over the 8
        // devices fits in less, but no micro-batch of 1 splits 8 ways.
        QTest::newRow("llama3-70b on 8") << "zoo:llama3-70b" << "8";
    }
    void flagshipsFit()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        const auto m = mesh(sharding::parseMeshShape(shape.toStdString()));
        auto run = [&](const sharding::Mesh &mm, const search::SearchOptions &o) {
            return search::tapSearch(g, coarse, classes, source, mm, o);
        };
        const auto r = search::searchTechniques(run, g, source, m, {}, {});
        QVERIFY2(r.plan.cost.fitsMemory, qPrintable(QStringLiteral("%1 GiB").arg(r.plan.cost.memory.total() / 1073741824.0)));
        QVERIFY(r.plan.costOptions.techniques.flashAttention);
        // The plan runs: its micro-batches split as its specs do.
        const auto problem = search::microBatchProblem(g, plan::planSpecs(r.plan, g, source), m,
                                                       r.plan.costOptions.techniques.microBatches);
        QVERIFY2(!problem, problem ? problem->c_str() : "");
        // No reference plan that fits, with its techniques chosen, is faster.
        for (const auto &ref : search::applicableReferencePlans(g, source, m)) {
            const auto best = search::chooseTechniques(ref.plan, g, {});
            QVERIFY2(!(cost::Objective::of(best.cost) < cost::Objective::of(r.plan.cost)),
                     qPrintable(QString::fromStdString(ref.name + ": " + std::to_string(best.cost.stepTime) + " s vs tap " +
                                                       std::to_string(r.plan.cost.stepTime))));
        }
    }

    // The techniques chosen for a reference plan are a setting it runs
    // with: Megatron on "2x4" splits LLaMA 3 8B's batch of 8 over the data
    // axis, so 8 micro-batches (of one sample, which the memory would
    // otherwise ask for) cannot be, and `plan --search megatron` refused
    // the plan it had chosen them for.
    void referencePlansChooseMicroBatchesTheyCanSplit_data()
    {
        QTest::addColumn<QString>("model");
        QTest::newRow("llama3-8b") << "zoo:llama3-8b";
        QTest::newRow("gpt3-175b") << "zoo:gpt3-175b";
    }
    void referencePlansChooseMicroBatchesTheyCanSplit()
    {
        QFETCH(QString, model);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto m = mesh({2, 4});
        for (const auto &ref : search::applicableReferencePlans(g, source, m)) {
            const auto chosen = search::chooseTechniques(ref.plan, g, {});
            const auto problem = search::microBatchProblem(g, plan::planSpecs(chosen, g, source), m,
                                                           chosen.costOptions.techniques.microBatches);
            QVERIFY2(!problem, qPrintable(QString::fromStdString(ref.name + ": " + problem.value_or(""))));
        }
    }

    // Mixtral 8x7B (46.7B parameters) on 8 x 80 GB: its mixed-precision
    // Adam states alone, sharded 8 ways, are 16 x 46.7e9 / 8 bytes = 87 GiB,
    // so only the optimizer offloaded to the host (ZeRO-Offload) fits it,
    // at the host's pace; the report names it. Fixed off, the plan is the
    // one that needs the least memory, and says it does not fit.
    void mixtralFitsWithTheOptimizerOffloaded()
    {
        const std::string source = "zoo:mixtral-8x7b";
        const auto g = io::loadModel(source);
        const auto m = mesh({8});
        const double states = 16 * parameterCount(g) / 8;
        QVERIFY(states > static_cast<double>(m.device.memoryBytes));
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        auto run = [&](const sharding::Mesh &mm, const search::SearchOptions &o) {
            return search::tapSearch(g, coarse, classes, source, mm, o);
        };
        const auto fits = search::searchTechniques(run, g, source, m, {}, {});
        QVERIFY(fits.plan.cost.fitsMemory);
        QVERIFY(fits.plan.costOptions.techniques.offloadOptimizer);
        QCOMPARE(fits.plan.cost.memory.optimizer, std::int64_t{0});
        search::TechniqueChoices off;
        off.offloadOptimizer = false;
        const auto r = search::searchTechniques(run, g, source, m, {}, off);
        QVERIFY(!r.plan.cost.fitsMemory);
        QVERIFY(static_cast<double>(r.plan.cost.memory.total()) >= states * (1 - 1e-6));
        QVERIFY(static_cast<double>(r.plan.cost.memory.total()) <= states * 1.05);
        QVERIFY(r.plan.searchWarnings.back().find("model states") != std::string::npos);
        QVERIFY(fits.plan.cost.stepTime > r.plan.cost.stepTime);  // the host's pace
    }

    // Where the first setting's fastest plan does not fit, but fits under
    // another setting in the same step time (ZeRO-2 shards its gradients
    // at no cost in one micro-batch), that plan is the best of every
    // setting: the search of that setting is the only one run after the
    // first's, and no setting searched on its own finds better.
    void aPlanAtTheFirstSettingsBoundEndsTheSearch()
    {
        const std::string source = "zoo:gpt2?layers=2&batch=8&seq=512&hidden=1024&heads=16&vocab=1024";
        const auto g = io::loadModel(source);
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        auto run = [&](const sharding::Mesh &mm, const search::SearchOptions &o) {
            return search::tapSearch(g, coarse, classes, source, mm, o);
        };
        auto m = mesh({4});
        const auto candidates = search::techniqueCandidates({}, search::hasAttentionCore(g), search::modelBatch(g),
                                                            cost::attentionLayerKinds(g));
        search::SearchOptions first;
        first.cost.techniques = candidates.front();
        const auto free = run(m, first);
        m.device.memoryBytes = free.plan.cost.memory.total() * 9 / 10;
        const auto r = search::searchTechniques(run, g, source, m, {}, {});
        QVERIFY(r.plan.cost.fitsMemory);
        QCOMPARE(r.plan.cost.stepTime, free.plan.cost.stepTime);
        QCOMPARE(r.stats.techniquesTried, std::size_t{2});
        for (const auto &t : candidates) {
            search::SearchOptions o;
            o.cost.techniques = t;
            const auto alone = run(m, o);
            QVERIFY2(!(cost::Objective::of(alone.plan.cost) < cost::Objective::of(r.plan.cost)),
                     qPrintable(QString::fromStdString(cost::describe(t) + ": " +
                                                       std::to_string(alone.plan.cost.stepTime))));
        }
    }

    // ZeRO-Offload's charges: no optimizer state on the device; the update
    // at the host's rate on the parameters the device keeps the state of,
    // with their gradient sent to the host and the parameter back.
    void offloadChargesTheHost()
    {
        const auto g = io::loadModel(kGpt);
        const auto p = reference(g, mesh({8}), search::ReferenceMethod::DataParallel);
        const double psi = parameterCount(g);
        cost::Techniques t;
        t.zeroStage = 1;
        t.offloadOptimizer = true;
        const cost::PlanCost c = costWith(g, p, t);
        const cost::CostOptions o;
        QCOMPARE(c.memory.optimizer, std::int64_t{0});
        QCOMPARE(c.memory.parameters, std::llround(2 * psi));
        const double expected = psi / 8 / o.hostOptimizerParametersPerSecond + psi / 8 * 4 / o.hostBandwidth;
        QVERIFY(std::abs(c.byPhase.at("optimizer").compute - expected) <= 1e-9 * expected);
    }

    // With the techniques fixed, tap and exact search the same space: tap
    // within 1% of exact under a memory limit that makes them matter.
    void tapMatchesExactWithTechniques_data()
    {
        QTest::addColumn<int>("stage");
        QTest::addColumn<QString>("recompute");
        QTest::addColumn<int>("micro");
        QTest::newRow("none") << 0 << "none" << 1;
        QTest::newRow("zero 3, 2 micro-batches") << 3 << "none" << 2;
        QTest::newRow("full recomputation, zero 1") << 1 << "full" << 1;
        QTest::newRow("selective, zero 2, 4 micro-batches") << 2 << "selective" << 4;
    }
    void tapMatchesExactWithTechniques()
    {
        QFETCH(int, stage);
        QFETCH(QString, recompute);
        QFETCH(int, micro);
        const std::string source = "zoo:gpt2?layers=2&batch=4&seq=128&hidden=256&heads=4&vocab=512";
        const auto g = io::loadModel(source);
        const auto coarse = passes::Coarsen().run(g);
        const auto classes = passes::Prune().run(g, coarse);
        auto m = mesh({4});
        search::SearchOptions o;
        o.cost.techniques = {false, *cost::recomputeFromString(recompute.toStdString()), stage, micro};
        // Halfway between what the fastest plan and the least-memory plan
        // need: memory decides.
        const auto free = search::tapSearch(g, coarse, classes, source, m, o);
        m.device.memoryBytes = 1;
        const auto least = search::tapSearch(g, coarse, classes, source, m, o);
        m.device.memoryBytes = (free.plan.cost.memory.total() + least.plan.cost.memory.total()) / 2;
        const auto tap = search::tapSearch(g, coarse, classes, source, m, o);
        const auto exact = search::exactSearch(g, coarse, source, m, o);
        QVERIFY(exact.stats.optimal);
        QVERIFY(tap.plan.cost.fitsMemory);
        QVERIFY(tap.plan.cost.stepTime < free.plan.cost.stepTime * 2);
        // Under the one objective (exact's memory per coarse node is
        // coarser than the whole plan's, so it may miss a plan that fits).
        QVERIFY2(noWorse(cost::Objective::of(tap.plan.cost), cost::Objective::of(exact.plan.cost), 0.01),
                 qPrintable(QStringLiteral("tap %1 s, exact %2 s (fits: %3)")
                                .arg(tap.plan.cost.stepTime)
                                .arg(exact.plan.cost.stepTime)
                                .arg(exact.plan.cost.fitsMemory)));
    }
};

QTEST_APPLESS_MAIN(TestTechniques)
#include "tst_techniques.moc"
