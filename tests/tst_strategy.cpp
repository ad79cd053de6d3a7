#include "io/zoo/graphbuilder.h"
#include "ir/einsum.h"
#include "io/modelloader.h"
#include "sharding/meshprofile.h"
#include "sharding/opkinds.h"
#include "sharding/oprule.h"
#include "sharding/strategy.h"

#include <QtTest>

using namespace tapestry;
using sharding::Placement;
using sharding::ShardingSpec;

namespace {

sharding::Mesh mesh1d(int n = 4)
{
    return sharding::findMeshProfile("dgx-h100").mesh({n}, {"model"});
}

ShardingSpec s1(const char *p)
{
    return {{*Placement::fromString(p)}};
}

// One op on fresh inputs: "x" and, when given, "w" (a parameter).
struct OneOp {
    ir::Graph graph;
    ir::OpId op{0};
};

OneOp single(const std::string &type, ir::Shape x, std::optional<ir::Shape> w, ir::Shape y,
             ir::Attributes attributes = {}, ir::DType xType = ir::DType::F32)
{
    io::zoo::GraphBuilder g("t");
    std::vector<ir::TensorId> inputs{g.input("x", std::move(x), xType)};
    if (w)
        inputs.push_back(g.parameter("w", *w));
    g.op(type, inputs, std::move(y), std::move(attributes));
    return {g.take(), ir::OpId(0)};
}

QString kinds(const std::vector<sharding::Collective> &cs)
{
    QStringList out;
    for (const auto &c : cs)
        out << QString::fromLatin1(sharding::toString(c.kind).data()) + QLatin1Char(':') + QString::number(c.bytes);
    return out.join(QLatin1Char(' '));
}

QString specs(const std::vector<ShardingSpec> &ss)
{
    QStringList out;
    for (const auto &s : ss)
        out << QString::fromStdString(s.toPlacements());
    return out.join(QLatin1Char(' '));
}

} // namespace

class TestStrategy : public QObject {
    Q_OBJECT

private slots:
    // GSPMD's dot rules on Y[b, n] = X[b, k] · W[k, n], float32, 4 devices.
    void matmul_data()
    {
        QTest::addColumn<QString>("x");
        QTest::addColumn<QString>("w");
        QTest::addColumn<QString>("out");
        QTest::addColumn<QString>("forward");
        QTest::addColumn<QString>("backward");
        QTest::addColumn<QString>("choice");
        // X [8, 16] = 512 B, W [16, 32] = 2048 B, Y [8, 32] = 1024 B.
        QTest::newRow("column parallel") << "Replicate()" << "Shard(1)" << "[Shard(1)]" << ""
                                         << "" << "model: splits loop c";
        QTest::newRow("row parallel: partial output")
            << "Shard(1)" << "Shard(0)" << "[Partial()]" << "" << "" << "model: splits loop a";
        QTest::newRow("batch split: weight gradient all-reduced (data parallel)")
            << "Shard(0)" << "Replicate()" << "[Shard(0)]" << "" << "all-reduce:2048" << "model: splits loop b";
        QTest::newRow("column split input, column split weight: gather the input")
            << "Shard(1)" << "Shard(1)" << "[Shard(1)]" << "all-gather:512" << ""
            << "model: splits loop c";
        QTest::newRow("replicated") << "Replicate()" << "Replicate()" << "[Replicate()]" << "" << ""
                                    << "model: whole";
        QTest::newRow("partial input passes through") << "Partial()" << "Replicate()" << "[Partial()]" << ""
                                                      << "" << "model: partial sum passed through";
    }
    void matmul()
    {
        QFETCH(QString, x);
        QFETCH(QString, w);
        QFETCH(QString, out);
        QFETCH(QString, forward);
        QFETCH(QString, backward);
        QFETCH(QString, choice);
        const auto t = single("MatMul", {8, 16}, ir::Shape{16, 32}, {8, 32});
        // x is a model input, so only the weight's gradient is reduced.
        // Loops: a = k (contracted), b = rows, c = columns.
        const auto s = sharding::resolveStrategy(t.graph, t.op, {s1(x.toUtf8()), s1(w.toUtf8())}, mesh1d());
        QVERIFY(s.hasRule);
        QCOMPARE(specs(s.outputs), out);
        QCOMPARE(kinds(s.forward), forward);
        QCOMPARE(kinds(s.backward), backward);
        QCOMPARE(QString::fromStdString(s.choice(mesh1d())), choice);
        QVERIFY(s.warnings.empty());
    }

    void matmulFlopsAreLocal()
    {
        const auto t = single("MatMul", {8, 16}, ir::Shape{16, 32}, {8, 32});
        const auto whole = sharding::resolveStrategy(t.graph, t.op, {s1("Replicate()"), s1("Replicate()")}, mesh1d());
        const auto split = sharding::resolveStrategy(t.graph, t.op, {s1("Replicate()"), s1("Shard(1)")}, mesh1d());
        QCOMPARE(whole.forwardFlops, 2.0 * 8 * 16 * 32);
        QCOMPARE(split.forwardFlops, whole.forwardFlops / 4);
        QCOMPARE(split.backwardFlops, 2 * split.forwardFlops);
    }

    // Einsum's equation is the rule: MaxViT's attention scores ("B G H I D,
    // B G H J D -> B G H I J", spaces and capitals as torch exports them)
    // split by heads with no collective, and a split of the summed label
    // leaves a partial sum; the ellipsis and the implicit output resolve as
    // numpy's; a diagonal has no rule.
    void einsumRule_data()
    {
        QTest::addColumn<QString>("equation");
        QTest::addColumn<QString>("x");
        QTest::addColumn<QString>("w");
        QTest::addColumn<QString>("notation");
        QTest::addColumn<QString>("out");
        QTest::addColumn<QString>("forward");
        QTest::newRow("scores by heads") << "B G H I D, B G H J D -> B G H I J" << "Shard(2)" << "Shard(2)"
                                         << "abcde,abcfe->abcdf" << "[Shard(2)]" << "";
        QTest::newRow("scores, head dim split") << "B G H I D, B G H J D -> B G H I J" << "Shard(4)" << "Shard(4)"
                                                << "abcde,abcfe->abcdf" << "[Partial()]" << "";
        QTest::newRow("ellipsis") << "...ID,...JD->...IJ" << "Shard(1)" << "Shard(1)" << "abcde,abcfe->abcdf"
                                  << "[Shard(1)]" << "";
    }
    void einsumRule()
    {
        QFETCH(QString, equation);
        QFETCH(QString, x);
        QFETCH(QString, w);
        QFETCH(QString, notation);
        QFETCH(QString, out);
        QFETCH(QString, forward);
        const auto t = single("Einsum", {2, 4, 8, 49, 32}, ir::Shape{2, 4, 8, 49, 32}, {2, 4, 8, 49, 49},
                              {{"equation", equation.toStdString()}});
        const auto rule = sharding::opRule(t.graph, t.graph.op(t.op));
        QVERIFY(rule);
        QCOMPARE(QString::fromStdString(rule->toString()), notation);
        QCOMPARE(rule->forwardFlops, 2.0 * 2 * 4 * 8 * 49 * 49 * 32);
        const auto s = sharding::resolveStrategy(t.graph, t.op, {s1(x.toUtf8()), s1(w.toUtf8())}, mesh1d());
        QVERIFY(s.hasRule);
        QCOMPARE(specs(s.outputs), out);
        QCOMPARE(kinds(s.forward), forward);
        QCOMPARE(s.forwardFlops, rule->forwardFlops / 4);
    }
    void einsumEquations()
    {
        const auto diagonal = single("Einsum", {8, 8}, std::nullopt, {8}, {{"equation", std::string("ii->i")}});
        QVERIFY(!sharding::opRule(diagonal.graph, diagonal.graph.op(diagonal.op)));
        // Implicit: the letters seen once, alphabetically ("ij,jk" is "ij,jk->ik").
        const auto implicit = ir::parseEinsum("ij,jk", {{2, 3}, {3, 4}});
        QVERIFY(implicit && implicit->output.size() == 2);
        QCOMPARE(implicit->sizes[static_cast<std::size_t>(implicit->output[0])], std::int64_t(2));
        QCOMPARE(implicit->sizes[static_cast<std::size_t>(implicit->output[1])], std::int64_t(4));
        QVERIFY(implicit->contracted(implicit->inputs[0][1]));
        // A size 1 broadcasts; two sizes neither 1 do not fit.
        const auto broadcast = ir::parseEinsum("...d,...d->...", {{4, 1, 8}, {3, 8}});
        QVERIFY(broadcast);
        QCOMPARE(broadcast->output.size(), std::size_t(2));
        QCOMPARE(broadcast->sizes[static_cast<std::size_t>(broadcast->output[1])], std::int64_t(3));
        QVERIFY(!ir::parseEinsum("ij,jk->ik", {{2, 3}, {4, 5}}));
        QVERIFY(!ir::parseEinsum("ij->ik", {{2, 3}}));
        QVERIFY(!ir::parseEinsum("i.j->ij", {{2, 3}}));
    }

    // A convolution stack's other ops: BatchNormalization splits its
    // channels freely and, training, a split batch all-reduces each
    // channel's two sums forward and two backward (SyncBatchNorm's
    // exchange); with its running statistics the batch splits freely. Pools
    // keep their windows whole; the global average leaves partial sums of a
    // split map; Pad splits the dims it does not pad; an instance norm
    // splits batch and channels, its map whole.
    void convolutionStackOps_data()
    {
        QTest::addColumn<QString>("type");
        QTest::addColumn<bool>("training");
        QTest::addColumn<QString>("x");
        QTest::addColumn<QString>("out");
        QTest::addColumn<QString>("forward");
        QTest::addColumn<QString>("backward");
        // The scale and bias given replicated: their gradients reduced
        // (batch split) or gathered (channels split) in the backward pass.
        QTest::newRow("batch norm, batch split") << "BatchNormalization" << true << "Shard(0)" << "[Shard(0)]"
                                                 << "all-reduce:512"
                                                 << "all-reduce:256 all-reduce:256 all-reduce:512";
        QTest::newRow("batch norm, channels split") << "BatchNormalization" << true << "Shard(1)" << "[Shard(1)]"
                                                    << "" << "all-gather:256 all-gather:256";
        QTest::newRow("batch norm inference, batch split") << "BatchNormalization" << false << "Shard(0)"
                                                           << "[Shard(0)]" << "" << "all-reduce:256 all-reduce:256";
        QTest::newRow("batch norm, map split: gathered") << "BatchNormalization" << true << "Shard(2)"
                                                         << "[Replicate()]" << "all-gather:3145728" << "";
        QTest::newRow("max pool, channels split") << "MaxPool" << false << "Shard(1)" << "[Shard(1)]" << "" << "";
        QTest::newRow("global average, map split: partial") << "GlobalAveragePool" << false << "Shard(2)"
                                                            << "[Partial()]" << "" << "";
        QTest::newRow("pad, batch split") << "Pad" << false << "Shard(0)" << "[Shard(0)]" << "" << "";
        QTest::newRow("instance norm, channels split") << "InstanceNormalization" << false << "Shard(1)"
                                                       << "[Shard(1)]" << "" << "all-gather:256 all-gather:256";
        QTest::newRow("instance norm, map split: gathered") << "InstanceNormalization" << false << "Shard(3)"
                                                            << "[Replicate()]" << "all-gather:3145728"
                                                            << "";
    }
    void convolutionStackOps()
    {
        QFETCH(QString, type);
        QFETCH(bool, training);
        QFETCH(QString, x);
        QFETCH(QString, out);
        QFETCH(QString, forward);
        QFETCH(QString, backward);
        io::zoo::GraphBuilder g("t");
        const std::int64_t channels = 64;
        const auto in = g.input("x", {8, channels, 32, 48}, ir::DType::F32);
        if (type == "BatchNormalization") {
            std::vector<ir::TensorId> inputs{in, g.parameter("scale", {channels}), g.parameter("bias", {channels}),
                                             g.input("mean", {channels}, ir::DType::F32),
                                             g.input("var", {channels}, ir::DType::F32)};
            g.op(type.toStdString(), inputs, {8, channels, 32, 48}, {{"training_mode", std::int64_t(training)}});
        } else if (type == "InstanceNormalization") {
            g.op(type.toStdString(), {in, g.parameter("scale", {channels}), g.parameter("bias", {channels})},
                 {8, channels, 32, 48});
        } else if (type == "MaxPool") {
            g.op("MaxPool", {in}, {8, channels, 16, 24}, {{"kernel_shape", std::vector<std::int64_t>{2, 2}}});
        } else if (type == "GlobalAveragePool") {
            g.op("GlobalAveragePool", {in}, {8, channels, 1, 1});
        } else {
            g.op("Pad", {in}, {8, channels, 34, 50});
        }
        const ir::Graph graph = g.take();
        std::vector<ShardingSpec> inputSpecs{s1(x.toUtf8())};
        for (std::size_t i = 1; i < graph.op(ir::OpId(0)).inputs.size(); ++i)
            inputSpecs.push_back(s1("Replicate()"));
        const auto s = sharding::resolveStrategy(graph, ir::OpId(0), inputSpecs, mesh1d());
        QVERIFY(s.hasRule);
        QCOMPARE(specs(s.outputs), out);
        QCOMPARE(kinds(s.forward), forward);
        QCOMPARE(kinds(s.backward), backward);
    }

    // Every op of the real exports in samples/onnx has a rule, so that no
    // plan of them computes anything gathered: vision (ResNet trained with
    // its batch norms, ConvNeXt, Swin), audio (a Conformer) and text (an
    // nn.TransformerEncoder), Swin's ScatterND (its shifted windows'
    // attention mask written from constants) included.
    void samplesOpsHaveRules()
    {
        QStringList missing;
        const std::pair<const char *, bool> files[] = {{"resnet18-train-shapes.onnx", true},
                                                       {"convnext-tiny-shapes.onnx", true},
                                                       {"swin-t-shapes.onnx", false},
                                                       {"conformer-shapes.onnx", false},
                                                       {"transformer-encoder.onnx", false}};
        for (const auto &[file, symbolicBatch] : files) {
            io::LoadOptions options;
            if (symbolicBatch)
                options.batch = 8;
            const auto g = io::loadModel(std::string(TAPESTRY_SOURCE_DIR "/samples/onnx/") + file, options);
            for (const auto &op : g.ops())
                if (!sharding::opRule(g, op) && !missing.contains(QString::fromStdString(op.type)))
                    missing << QString::fromStdString(op.type);
        }
        QCOMPARE(missing, QStringList());
    }

    // ScatterND splits the slices it writes whole, not the dims it indexes.
    void scatterNDRule_data()
    {
        QTest::addColumn<QString>("x");
        QTest::addColumn<QString>("out");
        QTest::addColumn<QString>("forward");
        QTest::newRow("written slices split") << "Shard(2)" << "[Shard(2)]" << "";
        QTest::newRow("indexed dim split: gathered") << "Shard(0)" << "[Replicate()]" << "all-gather:16384";
    }
    void scatterNDRule()
    {
        QFETCH(QString, x);
        QFETCH(QString, out);
        QFETCH(QString, forward);
        io::zoo::GraphBuilder g("t");
        const auto data = g.input("data", {8, 16, 32}, ir::DType::F32);
        const auto indices = g.input("indices", {4, 1}, ir::DType::I64);
        const auto updates = g.input("updates", {4, 16, 32}, ir::DType::F32);
        g.op("ScatterND", {data, indices, updates}, {8, 16, 32});
        const ir::Graph graph = g.take();
        const auto rule = sharding::opRule(graph, graph.op(ir::OpId(0)));
        QVERIFY(rule);
        const auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1(x.toUtf8()), s1("Replicate()"), s1(x.toUtf8())},
                                                 mesh1d());
        QCOMPARE(specs(s.outputs), out);
        QCOMPARE(kinds(s.forward).section(QLatin1Char(' '), 0, 0), forward);
    }

    void dimMapNotation_data()
    {
        QTest::addColumn<QString>("type");
        QTest::addColumn<QString>("notation");
        QTest::newRow("matmul") << "MatMul" << "ba,ac->bc";
        QTest::newRow("softmax") << "Softmax" << "aB->aB";
        QTest::newRow("relu") << "Relu" << "ab->ab";
    }
    void dimMapNotation()
    {
        QFETCH(QString, type);
        QFETCH(QString, notation);
        const bool mm = type == QLatin1String("MatMul");
        const auto t = single(type.toStdString(), {8, 16}, mm ? std::optional<ir::Shape>(ir::Shape{16, 32}) : std::nullopt,
                              mm ? ir::Shape{8, 32} : ir::Shape{8, 16}, {{"axis", std::int64_t{-1}}});
        const auto rule = sharding::opRule(t.graph, t.graph.op(t.op));
        QVERIFY(rule);
        QCOMPARE(QString::fromStdString(rule->toString()), notation);
    }

    // Elementwise ops keep specs; a broadcast bias is replicated; softmax
    // and norms gather their normalised axis.
    void unaryAndNorm_data()
    {
        QTest::addColumn<QString>("type");
        QTest::addColumn<QString>("x");
        QTest::addColumn<QString>("out");
        QTest::addColumn<QString>("forward");
        QTest::newRow("gelu keeps") << "Gelu" << "Shard(1)" << "[Shard(1)]" << "";
        QTest::newRow("softmax other axis") << "Softmax" << "Shard(0)" << "[Shard(0)]" << "";
        QTest::newRow("softmax axis split: gather") << "Softmax" << "Shard(1)" << "[Replicate()]"
                                                    << "all-gather:512";
        QTest::newRow("layernorm normalised dim: gather") << "LayerNormalization" << "Shard(1)" << "[Replicate()]"
                                                          << "all-gather:512";
        QTest::newRow("layernorm batch") << "LayerNormalization" << "Shard(0)" << "[Shard(0)]" << "";
        QTest::newRow("relu of partial: reduce first") << "Relu" << "Partial()" << "[Replicate()]"
                                                       << "all-reduce:512";
        QTest::newRow("neg of partial passes") << "Neg" << "Partial()" << "[Partial()]" << "";
    }
    void unaryAndNorm()
    {
        QFETCH(QString, type);
        QFETCH(QString, x);
        QFETCH(QString, out);
        QFETCH(QString, forward);
        const auto t = single(type.toStdString(), {8, 16}, std::nullopt, {8, 16}, {{"axis", std::int64_t{-1}}});
        const auto s = sharding::resolveStrategy(t.graph, t.op, {s1(x.toUtf8())}, mesh1d());
        QCOMPARE(specs(s.outputs), out);
        QCOMPARE(kinds(s.forward), forward);
    }

    void addWithBroadcastBias()
    {
        io::zoo::GraphBuilder g("t");
        auto x = g.input("x", {8, 16}, ir::DType::F32);
        auto b = g.parameter("bias", {16});
        g.op("Add", {x, b}, {8, 16});
        const auto graph = g.take();
        // Column split x with a column split bias: stays split.
        auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(1)"), s1("Shard(0)")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(1)]"));
        QCOMPARE(kinds(s.forward), QString());
        // Batch split x, replicated bias: the bias gradient sums over the batch.
        s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(0)"), s1("Replicate()")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(0)]"));
        QCOMPARE(specs(s.inputGradients), QStringLiteral("[Shard(0)] [Partial()]"));
        QCOMPARE(kinds(s.backward), QStringLiteral("all-reduce:64"));
    }

    // A reshape keeps a split where the dim survives or is the major factor.
    void reshape_data()
    {
        QTest::addColumn<QString>("from");
        QTest::addColumn<QString>("to");
        QTest::addColumn<QString>("in");
        QTest::addColumn<QString>("out");
        QTest::newRow("split heads keeps h as heads") << "2,6,32" << "2,6,8,4" << "Shard(2)" << "[Shard(2)]";
        QTest::newRow("merge heads keeps heads as h") << "2,6,8,4" << "2,6,32" << "Shard(2)" << "[Shard(2)]";
        QTest::newRow("minor factor split is gathered") << "2,6,8,4" << "2,6,32" << "Shard(3)" << "[Replicate()]";
        QTest::newRow("heads the axis does not divide") << "2,6,32" << "2,6,2,16" << "Shard(2)"
                                                        << "[Replicate()]";
        QTest::newRow("flatten tokens keeps batch") << "8,6,32" << "48,32" << "Shard(0)" << "[Shard(0)]";
        QTest::newRow("flatten tokens loses sequence") << "8,6,32" << "48,32" << "Shard(1)" << "[Replicate()]";
    }
    void reshape()
    {
        QFETCH(QString, from);
        QFETCH(QString, to);
        QFETCH(QString, in);
        QFETCH(QString, out);
        auto parse = [](const QString &s) {
            ir::Shape shape;
            for (const auto &d : s.split(QLatin1Char(',')))
                shape.push_back(d.toLongLong());
            return shape;
        };
        const auto t = single("Reshape", parse(from), std::nullopt, parse(to));
        const auto s = sharding::resolveStrategy(t.graph, t.op, {s1(in.toUtf8())}, mesh1d());
        QCOMPARE(specs(s.outputs), out);
    }

    void transposeMapsDims()
    {
        const auto t = single("Transpose", {2, 6, 8, 4}, std::nullopt, {2, 8, 6, 4},
                              {{"perm", std::vector<std::int64_t>{0, 2, 1, 3}}});
        const auto s = sharding::resolveStrategy(t.graph, t.op, {s1("Shard(2)")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(1)]"));
    }

    // Vocabulary-parallel embedding: rows split, lookups a partial sum.
    void gatherVocabularyParallel()
    {
        io::zoo::GraphBuilder g("t");
        auto ids = g.input("ids", {2, 6}, ir::DType::I64);
        auto table = g.parameter("wte", {64, 16});
        g.op("Gather", {table, ids}, {2, 6, 16}, {{"axis", std::int64_t{0}}});
        const auto graph = g.take();
        const auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(0)"), s1("Replicate()")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Partial()]"));
        QCOMPARE(specs(s.inputGradients).section(QLatin1Char(' '), 0, 0), QStringLiteral("[Shard(0)]"));
    }

    // Vocabulary-parallel cross-entropy reduces three values per token.
    void lossVocabularyParallel()
    {
        io::zoo::GraphBuilder g("t");
        auto logits = g.input("logits", {2, 6, 64}, ir::DType::F32);
        auto labels = g.input("labels", {2, 6}, ir::DType::I64);
        g.op("SoftmaxCrossEntropyLoss", {logits, labels}, {}, {{"reduction", std::string("mean")}});
        const auto graph = g.take();
        const auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(2)"), s1("Replicate()")}, mesh1d());
        QCOMPARE(kinds(s.internalForward), QStringLiteral("all-reduce:48 all-reduce:48 all-reduce:48"));
        QCOMPARE(specs(s.outputs), QStringLiteral("[Replicate()]"));
        const auto batch = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(0)"), s1("Shard(0)")}, mesh1d(2));
        QCOMPARE(specs(batch.outputs), QStringLiteral("[Partial()]"));
        QVERIFY(batch.internalForward.empty());
    }

    void concatAxisIsGathered()
    {
        io::zoo::GraphBuilder g("t");
        auto a = g.input("a", {8, 8}, ir::DType::F32);
        auto b = g.input("b", {8, 8}, ir::DType::F32);
        g.op("Concat", {a, b}, {8, 16}, {{"axis", std::int64_t{1}}});
        const auto graph = g.take();
        auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(0)"), s1("Shard(0)")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(0)]"));
        s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(1)"), s1("Replicate()")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Replicate()]"));
        QCOMPARE(kinds(s.forward), QStringLiteral("all-gather:256"));
    }

    // Slice keeps the dims it does not slice (BERT's pooler takes token 0 of
    // [b, s, h]: a batch-split input stays split); a sliced dim is whole.
    void sliceKeepsTheDimsItDoesNotSlice()
    {
        io::zoo::GraphBuilder g("t");
        auto x = g.input("x", {8, 16, 4}, ir::DType::F32);
        g.op("Slice", {x}, {8, 1, 4},
             {{"starts", std::vector<std::int64_t>{0}}, {"ends", std::vector<std::int64_t>{1}},
              {"axes", std::vector<std::int64_t>{1}}});
        const auto graph = g.take();
        auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(0)")}, mesh1d());
        QVERIFY(s.hasRule);
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(0)]"));
        QVERIFY(s.forward.empty());
        s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(2)")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(2)]"));
        s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(1)")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Replicate()]"));
        QVERIFY(!s.forward.empty());
    }

    void moeDispatchMapsTokensToCapacity()
    {
        io::zoo::GraphBuilder g("t");
        auto x = g.input("x", {16, 8}, ir::DType::F32);
        auto idx = g.input("idx", {16, 2}, ir::DType::I64);
        g.opMulti("MoEDispatch", {x, idx}, {{8, 8}, {8, 8}, {8, 8}, {8, 8}});
        const auto graph = g.take();
        const auto s = sharding::resolveStrategy(graph, ir::OpId(0), {s1("Shard(0)"), s1("Shard(0)")}, mesh1d());
        QCOMPARE(specs(s.outputs), QStringLiteral("[Shard(0)] [Shard(0)] [Shard(0)] [Shard(0)]"));
        QVERIFY(s.forward.empty());
    }

    // Never a crash: an op without a rule is computed replicated and warned about.
    void unknownOpIsReplicatedWithWarning()
    {
        const auto t = single("FancyAttention", {8, 16}, std::nullopt, {8, 16});
        const auto s = sharding::resolveStrategy(t.graph, t.op, {s1("Shard(0)")}, mesh1d());
        QVERIFY(!s.hasRule);
        QCOMPARE(specs(s.outputs), QStringLiteral("[Replicate()]"));
        QCOMPARE(kinds(s.forward), QStringLiteral("all-gather:512"));
        QCOMPARE(s.warnings.size(), std::size_t{1});
        QVERIFY(s.warnings[0].find("FancyAttention") != std::string::npos);
    }

    // Ops of one kind: the copies of a layer are of the first copy's kinds;
    // an attribute, a shape, a role or a tensor read twice sets ops apart.
    void opKinds()
    {
        const auto gpt = io::loadModel("zoo:gpt2?layers=3&hidden=64&heads=4&ffn=256&seq=32&vocab=128&positions=32");
        const sharding::OpKinds kinds(gpt);
        QVERIFY(kinds.count() < gpt.opCount() / 2);
        std::size_t copies = 0;
        for (std::size_t i = 0; i < gpt.opCount(); ++i) {
            const ir::OpId id(static_cast<std::int32_t>(i));
            const std::string &name = gpt.op(id).name;
            if (name.rfind("transformer/h.2/", 0) != 0)
                continue;
            const auto first = gpt.findOp("transformer/h.0/" + name.substr(std::string("transformer/h.2/").size()));
            QVERIFY2(first.has_value(), name.c_str());
            QCOMPARE(kinds.of(id), kinds.of(*first));
            QVERIFY(kinds.first(kinds.of(id)).index() <= first->index());
            ++copies;
        }
        QVERIFY(copies > 10);

        io::zoo::GraphBuilder g("t");
        auto x = g.input("x", {8, 16}, ir::DType::F32);
        auto y = g.input("y", {8, 16}, ir::DType::F32);
        auto w = g.parameter("w", {8, 16});
        g.op("Softmax", {x}, {8, 16}, {{"axis", std::int64_t{-1}}});  // 0
        g.op("Softmax", {y}, {8, 16}, {{"axis", std::int64_t{-1}}});  // 1: as 0
        g.op("Softmax", {x}, {8, 16}, {{"axis", std::int64_t{0}}});   // 2: another axis
        g.op("Softmax", {w}, {8, 16}, {{"axis", std::int64_t{-1}}});  // 3: reads a parameter
        g.op("Add", {x, y}, {8, 16});                                 // 4
        g.op("Add", {y, x}, {8, 16});                                 // 5: as 4
        g.op("Add", {x, x}, {8, 16});                                 // 6: one tensor twice
        g.op("Add", {x, y}, {16, 8});                                 // 7: another output shape
        const auto graph = g.take();
        const sharding::OpKinds k(graph);
        auto kind = [&](int op) { return k.of(ir::OpId(op)); };
        QCOMPARE(kind(1), kind(0));
        QCOMPARE(kind(5), kind(4));
        for (int op : {2, 3})
            QVERIFY(kind(op) != kind(0));
        for (int op : {6, 7})
            QVERIFY(kind(op) != kind(4));
        QCOMPARE(k.count(), std::size_t{6});
    }

    void everyZooOpTypeHasARule_data()
    {
        QTest::addColumn<QString>("type");
        for (const char *t : {"MatMul", "Gemm", "Add", "Mul", "Sub", "Div", "Gelu", "Relu", "Silu", "Tanh", "Neg",
                              "Dropout", "Softmax", "LayerNormalization", "RMSNorm", "Reshape", "Transpose", "Expand", "Slice"})
            QTest::newRow(t) << t;
    }
    void everyZooOpTypeHasARule()
    {
        QFETCH(QString, type);
        const bool two = type == QLatin1String("MatMul") || type == QLatin1String("Gemm");
        const auto t = single(type.toStdString(), {8, 16}, two ? std::optional<ir::Shape>(ir::Shape{16, 16}) : std::nullopt,
                              {8, 16}, {{"axis", std::int64_t{-1}}, {"starts", std::vector<std::int64_t>{0}},
                                        {"ends", std::vector<std::int64_t>{16}}, {"axes", std::vector<std::int64_t>{1}}});
        QVERIFY(sharding::opRule(t.graph, t.graph.op(t.op)).has_value());
    }
};

QTEST_APPLESS_MAIN(TestStrategy)
#include "tst_strategy.moc"
