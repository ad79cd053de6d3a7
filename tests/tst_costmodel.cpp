#include "cost/activationmemory.h"
#include "cost/collectivetime.h"
#include "cost/costmodel.h"
#include "cost/plancoster.h"
#include "io/modelloader.h"
#include "plan/plan.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"
#include "sharding/propagation.h"

#include <QtTest>

#include <random>

using namespace tapestry;
using sharding::Placement;
using sharding::ShardingSpec;

namespace {

sharding::Mesh mesh(int n, const char *profile = "dgx-h100")
{
    return sharding::findMeshProfile(profile).mesh({n}, {"model"});
}

// zoo:mlp with fc1 split by columns and fc2 by rows (Megatron, LESSONS.md case 2).
std::vector<ShardingSpec> megatronMlp(const ir::Graph &g, const sharding::Mesh &m)
{
    return sharding::propagateSpecs(g, m,
                                    {{*g.findTensor("mlp.fc1.weight"), {{Placement::shard(1)}}},
                                     {*g.findTensor("mlp.fc2.weight"), {{Placement::shard(0)}}}});
}

} // namespace

class TestCostModel : public QObject {
    Q_OBJECT

private slots:
    // α-β ring model with nccl-tests bus factors.
    void collectiveTime_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<int>("n");
        QTest::addColumn<double>("factor");
        QTest::addColumn<int>("steps");
        QTest::newRow("all-reduce 8") << "all-reduce" << 8 << 2.0 * 7 / 8 << 14;
        QTest::newRow("all-gather 8") << "all-gather" << 8 << 7.0 / 8 << 7;
        QTest::newRow("reduce-scatter 4") << "reduce-scatter" << 4 << 3.0 / 4 << 3;
        QTest::newRow("all-to-all 2") << "all-to-all" << 2 << 1.0 / 2 << 1;
        QTest::newRow("one device") << "all-reduce" << 1 << 0.0 << 0;
    }
    void collectiveTime()
    {
        QFETCH(QString, kind);
        QFETCH(int, n);
        QFETCH(double, factor);
        QFETCH(int, steps);
        const auto k = *sharding::collectiveKindFromString(kind.toStdString());
        QCOMPARE(cost::busFactor(k, n), factor);
        QCOMPARE(cost::ringSteps(k, n), steps);
        sharding::MeshAxis axis{"model", n, {"link", 100e9, 5e-6}};
        const std::int64_t bytes = 1 << 20;
        QCOMPARE(cost::collectiveTime(k, bytes, axis), 5e-6 * steps + bytes * factor / 100e9);
        QCOMPARE(cost::wireBytes(k, bytes, n), std::llround(bytes * factor));
    }

    // Column then row: one all-reduce forward, none in between, and (x being
    // data) no input gradient to reduce.
    void mlpMegatronOneAllReduce()
    {
        const auto g = io::loadModel("zoo:mlp?batch=8&hidden=4&ffn=8");
        const auto m = mesh(4);
        const auto c = cost::evaluatePlan(g, m, megatronMlp(g, m));
        QCOMPARE(c.collectives.size(), std::size_t{1});
        QCOMPARE(c.collectives[0].op, std::string("mlp/fc2/MatMul"));
        QVERIFY(c.collectives[0].kind == sharding::CollectiveKind::AllReduce);
        QVERIFY(c.collectives[0].phase == cost::Phase::Forward);
        QCOMPARE(c.collectives[0].bytes, std::int64_t{8 * 4 * 4});  // b·h1 float32
        QCOMPARE(c.commBytes, cost::wireBytes(sharding::CollectiveKind::AllReduce, 128, 4));
        QCOMPARE(c.byCollective.at("all-reduce").collectives, 1);
        QCOMPARE(c.comm, c.collectives[0].time);
        QCOMPARE(c.stepTime, c.compute + c.comm);
    }

    // A profile without memory bandwidth or kernel launch charges FLOPs alone.
    void computeIsLocalFlopsOverAchievablePeak()
    {
        const auto g = io::loadModel("zoo:mlp?batch=64&hidden=256&ffn=1024");
        auto m = mesh(4);
        m.device.memoryBandwidth = 0;
        m.device.kernelLaunch = 0;
        const auto c = cost::evaluatePlan(g, m, megatronMlp(g, m));
        const double fc1 = 2.0 * 64 * 256 * 1024 / 4;  // column shard
        const double peak = 67e12 * 0.5;             // float32 on dgx-h100
        QCOMPARE(c.byOp.at("mlp/fc1/MatMul").flops, fc1 * 3);  // forward + 2x backward
        QCOMPARE(c.byOp.at("mlp/fc1/MatMul").compute, fc1 * 3 / peak);
        QVERIFY(c.byPhase.at("backward").compute > c.byPhase.at("forward").compute);
    }

    // A GEMM runs at the device's efficiency for its calls' size: fc1's
    // one call of 2 x 64 x 256 x 1,024 / 4 FLOPs on 4 devices (its columns
    // split), the attention-like batched product per call, its batch dims
    // apart; ops other than GEMMs keep the achievable fraction.
    void gemmComputeBySize()
    {
        const auto g = io::loadModel("zoo:mlp?batch=64&hidden=256&ffn=1024");
        auto m = mesh(4);
        m.device.memoryBandwidth = 0;
        m.device.kernelLaunch = 0;
        const auto specs = megatronMlp(g, m);
        const double fc1 = 2.0 * 64 * 256 * 1024 / 4;
        ir::OpId matmul;
        for (std::size_t k = 0; k < g.opCount(); ++k)
            if (g.ops()[k].name == "mlp/fc1/MatMul")
                matmul = ir::OpId(static_cast<std::int32_t>(k));
        QVERIFY(matmul.valid());
        std::vector<ShardingSpec> inputs;
        for (ir::TensorId t : g.op(matmul).inputs)
            inputs.push_back(specs[t.index()]);
        QCOMPARE(sharding::resolveStrategy(g, matmul, inputs, m).gemmCallFlops, fc1);
        // Half the peak at that size (a table from 1/64 of it to 64 times).
        m.device.gemmEfficiency = {{fc1 / 64, 0.2}, {fc1, 0.25}, {fc1 * 64, 0.9}};
        const auto c = cost::evaluatePlan(g, m, specs);
        QCOMPARE(c.byOp.at("mlp/fc1/MatMul").compute, fc1 * 3 / (67e12 * 0.25));
        auto flat = m;
        flat.device.gemmEfficiency.clear();
        QCOMPARE(c.byOp.at("mlp/act/Relu").compute, cost::evaluatePlan(g, flat, specs).byOp.at("mlp/act/Relu").compute);
        QVERIFY(c.byOp.at("mlp/act/Relu").compute > 0);

        // q·kᵀ of a GPT layer on 2 devices split by heads: per call (one
        // head of one sequence) 2 x s x s x d.
        const auto gpt = io::loadModel("zoo:gpt2?layers=1&hidden=64&heads=4&seq=32&batch=2&vocab=128");
        const auto m2 = mesh(2);
        const auto megatron = plan::planSpecs(search::referencePlan(gpt, "gpt", m2, search::ReferenceMethod::Megatron),
                                              gpt, "gpt");
        bool found = false;
        for (std::size_t k = 0; k < gpt.opCount(); ++k) {
            const ir::Op &op = gpt.ops()[k];
            if (op.type != "MatMul" || gpt.tensor(op.inputs[1]).role == ir::Role::Parameter)
                continue;
            std::vector<ShardingSpec> in;
            for (ir::TensorId t : op.inputs)
                in.push_back(megatron[t.index()]);
            const auto s = sharding::resolveStrategy(gpt, ir::OpId(static_cast<std::int32_t>(k)), in, m2);
            QCOMPARE(s.gemmCallFlops, 2.0 * 32 * 32 * 16);
            QCOMPARE(s.forwardFlops, 2.0 * 2 * 4 * 32 * 32 * 16 / 2);
            found = true;
            break;
        }
        QVERIFY(found);
    }

    // With the profile's memory bandwidth and kernel launch, each op costs
    // the larger of its FLOPs' and its bytes' time, plus a launch per kernel
    // (one forward, two backward): the column-split matmul is bound by its
    // FLOPs, the Relu on its output by the bytes it reads and writes, and
    // both take a quarter of the unsplit op's time on 4 devices.
    void computeIsTheRooflineOfFlopsAndBytes()
    {
        const auto g = io::loadModel("zoo:mlp?batch=64&hidden=256&ffn=1024");
        const auto m = mesh(4);
        QCOMPARE(m.device.memoryBandwidth, 3.35e12);
        QCOMPARE(m.device.kernelLaunch, 3e-6);
        const auto c = cost::evaluatePlan(g, m, megatronMlp(g, m));
        const double peak = 67e12 * 0.5, bandwidth = 3.35e12, launch = 3e-6;
        const double fc1Flops = 2.0 * 64 * 256 * 1024 / 4;
        const double fc1Bytes = (64.0 * 256 + 256.0 * 256 + 64.0 * 256) * 4;  // x, the weight's columns, y
        QVERIFY(fc1Flops / peak > fc1Bytes / bandwidth);
        QCOMPARE(c.byOp.at("mlp/fc1/MatMul").compute, fc1Flops / peak + launch + 2 * fc1Flops / peak + 2 * launch);
        const double reluBytes = 2.0 * 64 * 256 * 4;  // its input and output shards
        const double reluFlops = 64.0 * 256;
        QVERIFY(reluBytes / bandwidth > reluFlops / peak);
        QCOMPARE(c.byOp.at("mlp/act/Relu").compute, reluBytes / bandwidth + launch + 2 * reluBytes / bandwidth + 2 * launch);
        // Unsplit (replicated on every device), the bytes and the FLOPs are four times as many.
        const std::vector<sharding::ShardingSpec> whole(g.tensorCount(), sharding::ShardingSpec::replicated(1));
        const auto one = cost::evaluatePlan(g, mesh(1), whole);
        QCOMPARE(one.byOp.at("mlp/act/Relu").compute - 3 * launch, 4 * (c.byOp.at("mlp/act/Relu").compute - 3 * launch));
        // An activation measured at a quarter of the memory bandwidth takes
        // four times as long; the matmul is unchanged.
        auto measured = m;
        measured.device.kernelBandwidth["activation"] = bandwidth / 4;
        const auto slow = cost::evaluatePlan(g, measured, megatronMlp(g, measured));
        QCOMPARE(slow.byOp.at("mlp/act/Relu").compute - 3 * launch, 4 * (c.byOp.at("mlp/act/Relu").compute - 3 * launch));
        QCOMPARE(slow.byOp.at("mlp/fc1/MatMul").compute, c.byOp.at("mlp/fc1/MatMul").compute);
    }

    // Model states: 16 bytes per local parameter (mixed-precision Adam), configurable.
    void modelStateMemory_data()
    {
        QTest::addColumn<int>("devices");
        QTest::addColumn<double>("optimizerBytes");
        QTest::newRow("replicated adam") << 1 << 12.0;
        QTest::newRow("split over 4") << 4 << 12.0;
        QTest::newRow("sgd, no optimizer state") << 4 << 0.0;
    }
    void modelStateMemory()
    {
        QFETCH(int, devices);
        QFETCH(double, optimizerBytes);
        const auto g = io::loadModel("zoo:mlp?batch=8&hidden=64&ffn=128");
        const auto m = mesh(devices);
        cost::CostOptions o;
        o.optimizerBytes = optimizerBytes;
        const auto c = cost::evaluatePlan(g, m, megatronMlp(g, m), o);
        const std::int64_t local = 2 * 64 * 128 / devices;
        QCOMPARE(c.memory.parameters + c.memory.gradients + c.memory.optimizer,
                 std::llround(local * (4 + optimizerBytes)));
        QCOMPARE(c.memory.activationModel, std::string("saved-tensors"));
        // x [8, 64] whole, fc1 output [8, 128/devices] for relu, relu output for fc2.
        QCOMPARE(c.memory.activations, std::int64_t{(8 * 64 + 2 * 8 * 128 / devices) * 4});
        QVERIFY(c.fitsMemory);
    }

    void doesNotFitIsCostedAndFlagged()
    {
        const auto g = io::loadModel("zoo:mlp?batch=8&hidden=8192&ffn=32768");
        const auto m = mesh(1, "cpu-loopback");
        const auto c = cost::evaluatePlan(g, m, std::vector<ShardingSpec>(g.tensorCount(), ShardingSpec::replicated(1)));
        QVERIFY(!c.fitsMemory);
        QVERIFY(c.memory.total() > c.memoryCapacity);
        QVERIFY(c.stepTime > 0);
    }

    // Data parallel: each weight's gradient all-reduced once, its full size.
    void dataParallelGradientAllReduce()
    {
        const auto g = io::loadModel("zoo:mlp?batch=8&hidden=64&ffn=128");
        const auto m = mesh(8);
        const auto specs = sharding::propagateSpecs(g, m, {{*g.findTensor("x"), {{Placement::shard(0)}}}});
        const auto c = cost::evaluatePlan(g, m, specs);
        std::int64_t gradientBytes = 0;
        for (const auto &col : c.collectives) {
            QVERIFY(col.kind == sharding::CollectiveKind::AllReduce);
            QVERIFY(col.phase == cost::Phase::Backward);
            gradientBytes += col.bytes;
        }
        QCOMPARE(gradientBytes, g.parameterBytes());
    }

    void overlapHidesBackwardCommunication()
    {
        const auto g = io::loadModel("zoo:mlp?batch=64&hidden=1024&ffn=4096");
        const auto m = mesh(8);
        const auto specs = sharding::propagateSpecs(g, m, {{*g.findTensor("x"), {{Placement::shard(0)}}}});
        cost::CostOptions overlap;
        overlap.overlap = true;
        const auto serial = cost::evaluatePlan(g, m, specs), hidden = cost::evaluatePlan(g, m, specs, overlap);
        const auto &b = serial.byPhase.at("backward");
        QCOMPARE(hidden.stepTime, serial.stepTime - b.compute - b.comm + std::max(b.compute, b.comm));
        QVERIFY(hidden.stepTime < serial.stepTime);
    }

    // Korthikanti et al.'s activation bytes per transformer layer.
    void korthikanti_data()
    {
        QTest::addColumn<int>("t");
        QTest::addColumn<bool>("sp");
        QTest::addColumn<double>("bytes");
        const double s = 2048, b = 4, h = 4096, a = 32;
        QTest::newRow("unsharded") << 1 << false << 34 * s * b * h + 5 * a * s * s * b;
        QTest::newRow("tensor parallel 8") << 8 << false << 10 * s * b * h + (24 * s * b * h + 5 * a * s * s * b) / 8;
        QTest::newRow("sequence parallel 8") << 8 << true << (34 * s * b * h + 5 * a * s * s * b) / 8;
    }
    void korthikanti()
    {
        QFETCH(int, t);
        QFETCH(bool, sp);
        QFETCH(double, bytes);
        cost::TransformerLayerShape l;
        l.s = 2048;
        l.b = 4;
        l.h = 4096;
        l.a = 32;
        l.t = t;
        l.sequenceParallel = sp;
        QCOMPARE(cost::korthikantiBytes(l), std::llround(bytes));
    }

    // The layer's widths the paper fixes (an MLP of 4h, keys and values of
    // h), found by structure for each attention layer of the zoo's and an
    // exported model's, and what they change in the layer's bytes.
    void layerWidths_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<qint64>("ffn");
        QTest::addColumn<bool>("gated");
        QTest::addColumn<qint64>("kv");
        QTest::newRow("llama: SwiGLU, 2 of 4 kv heads")
            << "zoo:llama3-8b?layers=2&hidden=256&heads=4&kv_heads=2&ffn=768&seq=64&batch=4&vocab=1024" << qint64{768}
            << true << qint64{128};
        QTest::newRow("llama: every head its keys")
            << "zoo:llama3-8b?layers=2&hidden=256&heads=4&kv_heads=4&ffn=640&seq=64&batch=4&vocab=1024" << qint64{640}
            << true << qint64{0};
        QTest::newRow("gpt2: GELU over 4h") << "zoo:gpt2?layers=2&hidden=256&heads=4&seq=64&vocab=1024" << qint64{1024}
                                            << false << qint64{0};
        QTest::newRow("bert: post-LN") << "zoo:bert-base?layers=2&hidden=256&heads=4&seq=64&vocab=1024"
                                       << qint64{1024} << false << qint64{0};
        // Hugging Face's GPT2LMHeadModel exported by torch: the mask's Where
        // reads the scores second, the norms and the GELU spelt out.
        QTest::newRow("onnx gpt-2") << QFINDTESTDATA("../samples/onnx/gpt-tiny.onnx") << qint64{256} << false
                                    << qint64{0};
        QTest::newRow("t5: encoder ReLU, decoder self-attention before a cross-attention")
            << "zoo:t5-base?layers=2&decoder_layers=2&hidden=64&heads=4&head_dim=16&ffn=192&seq=32&target_seq=16&vocab=64"
            << qint64{-1} << false << qint64{0};
    }
    void layerWidths()
    {
        QFETCH(QString, model);
        QFETCH(qint64, ffn);
        QFETCH(bool, gated);
        QFETCH(qint64, kv);
        const auto g = io::loadModel(model.toStdString());
        int layers = 0;
        for (std::size_t o = 0; o < g.opCount(); ++o) {
            const ir::OpId id(static_cast<std::int32_t>(o));
            if (g.op(id).type != "Softmax")
                continue;
            const auto w = cost::layerWidths(g, id);
            // Every one an attention layer the activation model sizes.
            const auto mesh = sharding::findMeshProfile("dgx-h100").mesh({1}, {"data"});
            QVERIFY2(cost::transformerLayer(g, mesh,
                                            std::vector<ShardingSpec>(g.tensorCount(), ShardingSpec::replicated(1)),
                                            id, false),
                     g.op(id).name.c_str());
            if (ffn < 0) {
                // T5: the encoder's layers and the decoder's cross-attention
                // have the MLP of 192 after them; the decoder's
                // self-attention a cross-attention, and the paper's widths.
                const bool self = g.op(id).name.find("decoder") != std::string::npos &&
                                  g.op(id).name.find("layer.0/") != std::string::npos;
                QCOMPARE(w.ffn, std::int64_t{self ? 0 : 192});
            } else {
                QCOMPARE(w.ffn, std::int64_t{ffn});
            }
            QCOMPARE(w.gated, gated);
            QCOMPARE(w.kv, std::int64_t{kv});
            ++layers;
        }
        QVERIFY(layers >= 2);
    }
    void gatedGroupedLayerBytes()
    {
        // LLaMA 3 8B's layer: h 4096, 32 heads, 8 kv heads (kv 1024), SwiGLU of 14336.
        const double s = 2048, b = 1, h = 4096, a = 32, kv = 1024, f = 14336, t = 8;
        cost::TransformerLayerShape l;
        l.s = 2048;
        l.b = 1;
        l.h = 4096;
        l.a = 32;
        l.ffn = 14336;
        l.gated = true;
        l.kv = 1024;
        const double split = 4 * s * b * h + 4 * s * b * kv + 8 * s * b * f;
        QCOMPARE(cost::korthikantiBytes(l), std::llround(10 * s * b * h + split + 5 * a * s * s * b));
        l.t = 8;
        QCOMPARE(cost::korthikantiBytes(l), std::llround(10 * s * b * h + (split + 5 * a * s * s * b) / t));
        l.sequenceParallel = true;
        QCOMPARE(cost::korthikantiBytes(l), std::llround((10 * s * b * h + split + 5 * a * s * s * b) / t));
        // More than the paper's layer of the same h: 8·3.5 s·b·h in the
        // MLP, where the paper's 4h MLP holds 16.
        cost::TransformerLayerShape paper = l;
        paper.ffn = 0;
        paper.gated = false;
        paper.kv = 0;
        QVERIFY(cost::korthikantiBytes(l) > cost::korthikantiBytes(paper));
        // The backward pass' largest gradient in flight: both halves of the gated MLP.
        cost::CostOptions o;
        o.techniques.flashAttention = true;
        QCOMPARE(cost::backwardWorkingBytes(l, o, 1.0),
                 std::llround((3 * s * b * h / t + 2 * s * b * f / t) * o.activationBytes));
    }

    // Coarse nodes and subgraph classes are sums of the per-op breakdown.
    void aggregateByGroup()
    {
        std::map<std::string, cost::CostTotals> byOp;
        byOp["h.0/fc/MatMul"] = {10, 1, 2, 100, 1};
        byOp["h.1/fc/MatMul"] = {10, 1, 2, 100, 1};
        byOp["h.0/act/Relu"] = {1, 0.5, 0, 0, 0};
        byOp["loss"] = {1, 0.25, 0, 0, 0};
        const auto groups = cost::aggregate(byOp, {{"h.0/fc/MatMul", "layer"}, {"h.1/fc/MatMul", "layer"},
                                                   {"h.0/act/Relu", "layer"}});
        QCOMPARE(groups.size(), std::size_t{2});
        QCOMPARE(groups.at("layer").compute, 2.5);
        QCOMPARE(groups.at("layer").commBytes, std::int64_t{200});
        QCOMPARE(groups.at("(other)").compute, 0.25);
        QCOMPARE(cost::aggregate(byOp, {}, "").size(), std::size_t{0});
    }

    // The studio re-costs its plan on every edit with one PlanCoster: what
    // it returns after any sequence of edits is exactly evaluatePlan's, and
    // an edit in every instance of a class resolves the ops around the
    // edited tensors, not the graph.
    void incrementalCostEqualsAFreshOne()
    {
        const auto g = io::loadModel("zoo:gpt2?layers=4");
        const auto m = sharding::findMeshProfile("dgx-h100").mesh({2, 2}, {"data", "model"});
        const auto plan = search::referencePlan(g, "gpt2", m, search::ReferenceMethod::Megatron);
        const auto original = plan::planSpecs(plan, g, "gpt2");
        cost::PlanCoster coster(g, m);
        const auto first = coster.cost(original);
        QCOMPARE(coster.resolvedOps(), g.opCount());
        QVERIFY(first == cost::evaluatePlan(g, m, original));

        // A class edit: every MLP weight replicated.
        auto edited = original;
        int pinned = 0;
        for (auto t : g.tensorsWithRole(ir::Role::Parameter))
            if (g.tensor(t).name.find(".mlp.") != std::string::npos && g.tensor(t).shape.size() == 2) {
                edited[t.index()] = ShardingSpec::replicated(2);
                ++pinned;
            }
        QCOMPARE(pinned, 8);
        const auto after = coster.cost(edited);
        QVERIFY(after == cost::evaluatePlan(g, m, edited));
        QVERIFY(after.stepTime != first.stepTime);
        QVERIFY2(coster.resolvedOps() > 0 && coster.resolvedOps() <= 16,
                 qPrintable(QString::number(coster.resolvedOps())));
        QVERIFY(coster.cost(original) == first);  // undo

        // Edits of any tensor, activations included, in a fixed random order.
        std::mt19937 random(11);
        auto specs = original;
        for (int e = 0; e < 40; ++e) {
            const auto t = random() % g.tensorCount();
            auto spec = random() % 2 ? specs[random() % g.tensorCount()] : ShardingSpec::replicated(2);
            const auto &tensor = g.tensors()[t];
            if (!spec.holds(tensor.shape, m) || (spec.hasPartial() && tensor.role != ir::Role::Activation))
                continue;
            specs[t] = spec;
            QVERIFY2(coster.cost(specs) == cost::evaluatePlan(g, m, specs), qPrintable(QString::number(e)));
        }
    }
};

QTEST_APPLESS_MAIN(TestCostModel)
#include "tst_costmodel.moc"
