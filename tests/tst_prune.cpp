#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/zoo.h"
#include "passes/coarsen.h"
#include "passes/prune.h"
#include "repeatcases.h"

#include <QtTest>

#include <functional>

using namespace tapestry;
using io::zoo::GraphBuilder;

namespace {

using Builder = std::function<ir::Graph()>;

struct GptOptions {
    int layers = 2;
    bool crossAttention = false;  // decoder layers reading an encoder memory
    bool lastWithoutCross = false;
    int experts = 0;              // Mixtral-style experts nested in each layer
};

ir::TensorId linear(GraphBuilder &g, const std::string &module, ir::TensorId x, std::int64_t out)
{
    return g.linear(module, x, out, true);
}

ir::TensorId attention(GraphBuilder &g, const std::string &module, ir::TensorId x, ir::TensorId memory,
                       ir::TensorId mask)
{
    const ir::Shape s = g.shape(x);
    const std::int64_t b = s[0], n = s[1], h = s[2], heads = 2, d = h / heads;
    g.push(module);
    auto heads4 = [&](ir::TensorId t, std::vector<std::int64_t> perm) {
        return g.transpose(g.reshape(t, {b, n, heads, d}), perm);
    };
    auto q = heads4(linear(g, "q", x, h), {0, 2, 1, 3});
    auto k = heads4(linear(g, "k", memory, h), {0, 2, 3, 1});
    auto v = heads4(linear(g, "v", memory, h), {0, 2, 1, 3});
    auto scores = g.op("MatMul", {q, k}, {b, heads, n, n});
    scores = g.op("Add", {scores, mask}, {b, heads, n, n});
    auto probs = g.op("Softmax", {scores}, {b, heads, n, n}, {{"axis", std::int64_t{-1}}});
    auto context = g.op("MatMul", {probs, v}, {b, heads, n, d});
    auto o = linear(g, "o", g.reshape(g.transpose(context, {0, 2, 1, 3}), {b, n, h}), h);
    g.pop();
    return o;
}

ir::TensorId norm(GraphBuilder &g, const std::string &module, ir::TensorId x)
{
    g.push(module);
    auto y = g.op("LayerNormalization", {x, g.parameter("weight", {g.shape(x).back()})}, g.shape(x));
    g.pop();
    return y;
}

// A decoder-only transformer under transformer/h.N, optionally with cross
// attention and with experts nested in each layer's MLP.
ir::Graph gptLike(const GptOptions &o)
{
    const std::int64_t b = 2, s = 8, h = 16, vocab = 40;
    GraphBuilder g("gpt-like");
    auto ids = g.input("input_ids", {b, s}, ir::DType::I64);
    auto mask = g.input("attention_mask", {1, 1, s, s}, ir::DType::F32);
    auto memory = g.input("memory", {b, s, h}, ir::DType::F32);
    g.push("transformer");
    g.push("wte");
    auto wte = g.parameter("weight", {vocab, h});
    auto x = g.op("Gather", {wte, ids}, {b, s, h});
    g.pop();
    for (int i = 0; i < o.layers; ++i) {
        g.push("h." + std::to_string(i));
        auto a = norm(g, "ln_1", x);
        x = g.op("Add", {x, attention(g, "attn", a, a, mask)}, {b, s, h});
        if (o.crossAttention && !(o.lastWithoutCross && i == o.layers - 1))
            x = g.op("Add", {x, attention(g, "cross", norm(g, "ln_x", x), memory, mask)}, {b, s, h});
        auto m = norm(g, "ln_2", x);
        g.push("mlp");
        ir::TensorId y;
        if (o.experts > 0) {
            auto gate = g.op("Softmax", {linear(g, "gate", m, o.experts)}, {b, s, o.experts});
            for (int e = 0; e < o.experts; ++e) {
                g.push("experts." + std::to_string(e));
                auto u = g.op("Silu", {linear(g, "w1", m, 2 * h)}, {b, s, 2 * h});
                auto out = linear(g, "w2", g.op("Mul", {u, linear(g, "w3", m, 2 * h)}, {b, s, 2 * h}), h);
                y = e == 0 ? out : g.op("Add", {y, out}, {b, s, h});
                g.pop();
            }
            y = g.op("Mul", {y, g.op("ReduceSum", {gate}, {b, s, 1})}, {b, s, h});
        } else {
            y = linear(g, "c_proj", g.op("Gelu", {linear(g, "c_fc", m, 4 * h)}, {b, s, 4 * h}), h);
        }
        g.pop();
        x = g.op("Add", {x, y}, {b, s, h});
        g.pop();
    }
    x = norm(g, "ln_f", x);
    g.pop();
    g.push("lm_head");
    g.markOutput(g.matmul(x, g.transpose(wte, {1, 0})));
    g.pop();
    return g.take();
}

// A ResNet stage layout: layerN.0 downsamples (stride 2, 1x1 shortcut conv)
// except in the first stage, the other blocks keep the shape.
ir::Graph resnetLike(std::vector<int> blocks)
{
    GraphBuilder g("resnet-like");
    std::int64_t c = 8, hw = 16;
    auto x = g.input("x", {1, c, hw, hw}, ir::DType::F32);
    g.push("conv1");
    x = g.op("Conv", {x, g.parameter("weight", {c, c, 3, 3})}, {1, c, hw, hw});
    g.pop();
    for (std::size_t stage = 0; stage < blocks.size(); ++stage) {
        const std::string layer = "layer" + std::to_string(stage + 1);
        g.push(layer);
        for (int i = 0; i < blocks[stage]; ++i) {
            const bool down = stage > 0 && i == 0;
            const std::int64_t out = down ? 2 * c : c, ohw = down ? hw / 2 : hw;
            g.push(layer + "." + std::to_string(i));
            auto conv = [&](const std::string &m, ir::TensorId in, std::int64_t ci, std::int64_t k) {
                g.push(m);
                auto y = g.op("Conv", {in, g.parameter("weight", {out, ci, k, k})}, {1, out, ohw, ohw});
                g.pop();
                return y;
            };
            auto y = g.op("Relu", {conv("conv1", x, c, 3)}, {1, out, ohw, ohw});
            y = conv("conv2", y, out, 3);
            auto shortcut = x;
            if (down) {
                g.push("downsample");
                g.push("0");
                shortcut = g.op("Conv", {x, g.parameter("weight", {out, c, 1, 1})}, {1, out, ohw, ohw},
                                {{"strides", std::vector<std::int64_t>{2, 2}}});
                g.pop();
                g.pop();
            }
            x = g.op("Relu", {g.op("Add", {y, shortcut}, {1, out, ohw, ohw})}, {1, out, ohw, ohw});
            g.pop();
            c = out;
            hw = ohw;
        }
        g.pop();
    }
    g.markOutput(x);
    return g.take();
}

const std::string kSamples = std::string(TAPESTRY_SOURCE_DIR) + "/samples/onnx/";

ir::Graph loadSample(const std::string &file)
{
    return io::loadModel(kSamples + file);
}

void renameOpaque(ir::Graph &graph)
{
    for (std::size_t i = 0; i < graph.opCount(); ++i)
        graph.renameOp(ir::OpId(static_cast<std::int32_t>(i)), "node_" + std::to_string(i));
}

passes::SubgraphClasses prune(const ir::Graph &graph, int minDuplicate = 2)
{
    return passes::Prune(minDuplicate).run(graph, passes::Coarsen().run(graph));
}

// "12x41 1x7": instances x ops per instance of each class, in class order.
QString classSummary(const passes::SubgraphClasses &result)
{
    QStringList parts;
    for (const auto &c : result.classes)
        parts << QString::number(c.instances.size()) + QLatin1Char('x') + QString::number(c.opsPerInstance);
    return parts.join(QLatin1Char(' '));
}

QString instanceScopes(const passes::SubgraphClass &c)
{
    QStringList scopes;
    for (const auto &i : c.instances)
        scopes << QString::fromStdString(i.scope);
    return scopes.join(QLatin1Char(' '));
}

// "h.0 h.1 | h.2": the instance scopes of every class, classes apart.
QString allScopes(const passes::SubgraphClasses &result)
{
    QStringList classes;
    for (const auto &c : result.classes)
        classes << instanceScopes(c);
    return classes.join(QStringLiteral(" | "));
}

// What makes two blocks the same, written out without hashing: the op types
// in order and the shapes of the parameters they read.
QString structureOf(const ir::Graph &graph, const passes::SubgraphInstance &instance)
{
    QStringList parts;
    for (auto op : instance.ops)
        parts << QString::fromStdString(graph.op(op).type);
    for (auto t : instance.parameters) {
        QStringList dims;
        for (auto d : graph.tensor(t).shape)
            dims << QString::number(d);
        parts << QLatin1Char('[') + dims.join(QLatin1Char(',')) + QLatin1Char(']');
    }
    return parts.join(QLatin1Char(' '));
}

} // namespace

Q_DECLARE_METATYPE(Builder)

class TestPrune : public QObject {
    Q_OBJECT

private slots:
    void teaching_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("classes");
        QTest::newRow("mlp: fc1 and fc2 differ") << QStringLiteral("mlp") << QString();
        QTest::newRow("abc: two different matmuls") << QStringLiteral("abc") << QString();
        QTest::newRow("mlp, square: fc1 and fc2 match") << QStringLiteral("mlp?hidden=8&ffn=8") << QStringLiteral("2x1");
        QTest::newRow("abc, square: a chain of two") << QStringLiteral("abc?hidden=8&ffn=8") << QStringLiteral("2x1");
    }

    void teaching()
    {
        QFETCH(QString, spec);
        QFETCH(QString, classes);
        QCOMPARE(classSummary(prune(io::zoo::build(spec.toStdString()))), classes);
    }

    void classes_data()
    {
        QTest::addColumn<Builder>("build");
        QTest::addColumn<int>("minDuplicate");
        QTest::addColumn<QString>("classes");
        QTest::addColumn<QString>("firstScopes");
        QTest::newRow("decoder, 3 layers") << Builder([] { return gptLike({3}); }) << 2
                                           << QStringLiteral("3x29")
                                           << QStringLiteral("transformer/h.0 transformer/h.1 transformer/h.2");
        QTest::newRow("decoder, 12 layers") << Builder([] { return gptLike({12}); }) << 2
                                            << QStringLiteral("12x29") << QString();
        QTest::newRow("experts nested in each layer")
            << Builder([] { return gptLike({4, false, false, 3}); }) << 2 << QStringLiteral("4x55")
            << QStringLiteral("transformer/h.0 transformer/h.1 transformer/h.2 transformer/h.3");
        QTest::newRow("last layer without cross attention")
            << Builder([] { return gptLike({4, true, true, 0}); }) << 2 << QStringLiteral("3x51 1x29")
            << QStringLiteral("transformer/h.0 transformer/h.1 transformer/h.2");
        QTest::newRow("fewer layers than min-duplicate")
            << Builder([] { return gptLike({3}); }) << 4 << QString() << QString();
        QTest::newRow("resnet stages: first blocks apart")
            << Builder([] { return resnetLike({2, 3, 3}); }) << 2 << QStringLiteral("2x5 1x6 2x5 1x6 2x5")
            << QStringLiteral("layer1/layer1.0 layer1/layer1.1");
    }

    void classes()
    {
        QFETCH(Builder, build);
        QFETCH(int, minDuplicate);
        QFETCH(QString, classes);
        QFETCH(QString, firstScopes);
        const auto result = prune(build(), minDuplicate);
        QCOMPARE(classSummary(result), classes);
        if (!firstScopes.isEmpty())
            QCOMPARE(instanceScopes(result.classes.front()), firstScopes);
        QVERIFY(result.fromScopes || result.classes.empty());
    }

    void zoo_data()
    {
        QTest::addColumn<QString>("spec");
        QTest::addColumn<QString>("instances");
        QTest::addColumn<QString>("representatives");
        const QString gpt = QStringLiteral("transformer/h.0"), bert = QStringLiteral("bert/encoder/layer.0"),
                      llama = QStringLiteral("model/layers.0");
        QTest::newRow("gpt2, 3 small layers") << QStringLiteral("gpt2?layers=3&hidden=64&heads=4&vocab=100&seq=16&positions=16")
                                              << QStringLiteral("3") << gpt;
        QTest::newRow("gpt2") << QStringLiteral("gpt2") << QStringLiteral("12") << gpt;
        QTest::newRow("gpt2-xl") << QStringLiteral("gpt2-xl") << QStringLiteral("48") << gpt;
        QTest::newRow("gpt3-175b") << QStringLiteral("gpt3-175b") << QStringLiteral("96") << gpt;
        QTest::newRow("bert, 2 small layers") << QStringLiteral("bert-base?layers=2&hidden=64&heads=4&vocab=100&seq=16")
                                              << QStringLiteral("2") << bert;
        QTest::newRow("bert-large") << QStringLiteral("bert-large") << QStringLiteral("24") << bert;
        QTest::newRow("llama, 3 small layers")
            << QStringLiteral("llama3-8b?layers=3&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=100&seq=16")
            << QStringLiteral("3") << llama;
        QTest::newRow("llama2-70b") << QStringLiteral("llama2-70b") << QStringLiteral("80") << llama;
        QTest::newRow("mixtral, 2 small layers")
            << QStringLiteral("mixtral-8x7b?layers=2&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=100&seq=16")
            << QStringLiteral("2") << llama;
        QTest::newRow("mixtral-8x7b") << QStringLiteral("mixtral-8x7b") << QStringLiteral("32") << llama;
        QTest::newRow("t5, 3 encoder and 2 decoder layers")
            << QStringLiteral("t5-base?layers=3&decoder_layers=2&hidden=64&heads=4&ffn=128&vocab=100&seq=16&target_seq=8")
            << QStringLiteral("3 2") << QStringLiteral("encoder/block.0 decoder/block.0");
        QTest::newRow("t5-large") << QStringLiteral("t5-large") << QStringLiteral("24 24")
                                  << QStringLiteral("encoder/block.0 decoder/block.0");
    }

    // Every zoo transformer is one class per stack, one instance per layer.
    void zoo()
    {
        QFETCH(QString, spec);
        QFETCH(QString, instances);
        QFETCH(QString, representatives);
        const auto graph = io::zoo::build(spec.toStdString());
        const auto result = prune(graph);
        QStringList counts, reps;
        for (const auto &c : result.classes) {
            counts << QString::number(c.instances.size());
            reps << QString::fromStdString(c.instances[c.representative].scope);
            for (const auto &i : c.instances)
                QCOMPARE(i.ops.size(), c.opsPerInstance);
        }
        QCOMPARE(counts.join(QLatin1Char(' ')), instances);
        QCOMPARE(reps.join(QLatin1Char(' ')), representatives);
        QVERIFY(result.coverage > 0.5);
    }

    void onnx_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("classes");
        QTest::addColumn<QString>("scopes");
        auto numbered = [](const QString &prefix, int n) {
            QStringList scopes;
            for (int i = 0; i < n; ++i)
                scopes << prefix + QString::number(i);
            return scopes.join(QLatin1Char(' '));
        };
        // Ops per layer as loaded: GPT-2's c_attn and torch's in_proj held
        // by their parts stacked (io/onnx/fusedprojections.h) add the
        // input's reshape, the split and a reshape per part, less the
        // export's split (4) or three slices (2).
        QTest::newRow("gpt-tiny: 4 decoder layers") << QStringLiteral("gpt-tiny.onnx") << QStringLiteral("4x55")
                                                    << numbered(QStringLiteral("h."), 4);
        QTest::newRow("nn.TransformerEncoder: 4 layers")
            << QStringLiteral("transformer-encoder.onnx") << QStringLiteral("4x32")
            << numbered(QStringLiteral("layers."), 4);
        QTest::newRow("gpt2-external: 12 layers") << QStringLiteral("gpt2-external.onnx") << QStringLiteral("12x55")
                                                  << numbered(QStringLiteral("h."), 12);
        // The decoder's first layer also holds the transposition of the
        // encoder's memory that every decoder layer reads (exported once),
        // so it is a class of its own.
        QTest::newRow("nn.Transformer: 2 encoder, 3 decoder layers")
            << QStringLiteral("transformer-2x3.onnx") << QStringLiteral("2x39 1x73 2x72")
            << QStringLiteral("t/encoder/layers.0 t/encoder/layers.1 | t/decoder/layers.0 | "
                              "t/decoder/layers.1 t/decoder/layers.2");
        // resnet18 has two BasicBlocks per stage. Stage 1 keeps 64 channels,
        // so its blocks match; every later stage opens with a strided block
        // with a 1x1 downsample conv (6 ops) and follows with a block of its
        // own width (5 ops), unlike any other stage's.
        QTest::newRow("torchvision resnet18: first blocks of stages apart")
            << QStringLiteral("resnet18-shapes.onnx") << QStringLiteral("2x5 1x6 1x5 1x6 1x5 1x6 1x5")
            << QStringLiteral("layer1/layer1.0 layer1/layer1.1 | layer2/layer2.0 | layer2/layer2.1 | "
                              "layer3/layer3.0 | layer3/layer3.1 | layer4/layer4.0 | layer4/layer4.1");
    }

    // torchvision's ConvNeXt-T as torch 2.x exports it (export_vision.py):
    // features.0..7 are numbered but unlike (stem, stages, downsamplers);
    // the like blocks are inside the stages, 3, 3, 9 and 3 of them
    // (CNBlockConfig(96, 192, 3), (192, 384, 3), (384, 768, 9), (768,
    // None, 3) in torchvision's convnext_tiny), found from the names, each
    // stage's blocks one class, the last block of a stage included.
    void convnextStagesAreClasses()
    {
        const auto graph = loadSample("convnext-tiny-shapes.onnx");
        QCOMPARE(graph.parameterCount(), std::int64_t(28'589'128));  // torch's trainable parameters
        const auto result = prune(graph);
        QVERIFY(result.fromScopes);
        QStringList stages;
        for (const auto &c : result.classes)
            if (c.instances.size() >= 2 && c.opsPerInstance > 3)
                stages << instanceScopes(c);
        QStringList expected;
        const std::pair<int, int> blocks[] = {{1, 3}, {3, 3}, {5, 9}, {7, 3}};
        for (const auto &[stage, count] : blocks) {
            QStringList scopes;
            for (int b = 0; b < count; ++b)
                scopes << QString("features/features.%1/features.%1.%2").arg(stage).arg(b);
            expected << scopes.join(QLatin1Char(' '));
        }
        QCOMPARE(stages, expected);
    }

    // torchvision's Swin-T as torch 1.13 exports it (export_swin.py): the
    // stages hold 2, 2, 6 and 2 blocks alternating window and shifted-window
    // attention (torchvision's swin_t depths), so the like blocks of the
    // third stage are its even and its odd ones, 3 of each; the last
    // stage's 7x7 map is one window, its shift dropped, so its 2 blocks are
    // alike. The first two stages hold one block of each kind.
    void swinStagesAlternate()
    {
        const auto graph = loadSample("swin-t-shapes.onnx");
        // torch's 28,288,354 trainable parameters less the relative position
        // bias tables (23,322) constant folding gathered into constants.
        QCOMPARE(graph.parameterCount(), std::int64_t(28'265'032));
        const auto result = prune(graph);
        QVERIFY(result.fromScopes);
        QStringList stages;
        for (const auto &c : result.classes)
            if (c.instances.size() >= 2 && c.opsPerInstance > 3)
                stages << instanceScopes(c);
        auto blocks = [](int stage, std::initializer_list<int> numbers) {
            QStringList scopes;
            for (int b : numbers)
                scopes << QString("features/features.%1/features.%1.%2").arg(stage).arg(b);
            return scopes.join(QLatin1Char(' '));
        };
        QCOMPARE(stages, QStringList({blocks(5, {0, 2, 4}), blocks(5, {1, 3, 5}), blocks(7, {0, 1})}));
    }

    // torchaudio's Conformer as torch 1.13 exports it (export_audio.py):
    // its four conformer layers one class, the padding mask computed from
    // the lengths outside it.
    void conformerLayersAreOneClass()
    {
        const auto graph = loadSample("conformer-shapes.onnx");
        // torch's 525,888 trainable parameters less the four batch norms
        // (2 x 80 each) constant folding merged into their convolutions.
        QCOMPARE(graph.parameterCount(), std::int64_t(525'888 - 4 * 160));
        const auto result = prune(graph);
        QVERIFY(result.fromScopes);
        QStringList stages;
        for (const auto &c : result.classes)
            if (c.instances.size() >= 2)
                stages << instanceScopes(c);
        QCOMPARE(stages, QStringList({"conformer_layers.0 conformer_layers.1 conformer_layers.2 conformer_layers.3"}));
    }

    // PyTorch exports: the classes their module structure implies, checked
    // against the blocks written out (op types, parameter shapes): instances
    // of a class match, and no two classes do.
    void onnx()
    {
        QFETCH(QString, file);
        QFETCH(QString, classes);
        QFETCH(QString, scopes);
        const auto graph = loadSample(file.toStdString());
        const auto result = prune(graph);
        QVERIFY(result.fromScopes);
        QCOMPARE(classSummary(result), classes);
        QCOMPARE(allScopes(result), scopes);
        QStringList structures;
        for (const auto &c : result.classes) {
            const QString representative = structureOf(graph, c.instances[c.representative]);
            for (const auto &i : c.instances)
                QCOMPARE(structureOf(graph, i), representative);
            QVERIFY2(!structures.contains(representative), qPrintable(instanceScopes(c)));
            structures << representative;
        }
    }

    void opaqueNames_data()
    {
        QTest::addColumn<Builder>("build");
        QTest::newRow("zoo gpt2, 4 layers") << Builder([] {
            return io::zoo::build("gpt2?layers=4&hidden=64&heads=4&vocab=100&seq=16&positions=16");
        });
        QTest::newRow("zoo gpt3-175b") << Builder([] { return io::zoo::build("gpt3-175b"); });
        QTest::newRow("zoo bert, 3 layers")
            << Builder([] { return io::zoo::build("bert-base?layers=3&hidden=64&heads=4&vocab=100&seq=16"); });
        QTest::newRow("zoo llama, 3 layers") << Builder([] {
            return io::zoo::build("llama3-8b?layers=3&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=100&seq=16");
        });
        QTest::newRow("zoo mixtral, 3 layers") << Builder([] {
            return io::zoo::build("mixtral-8x7b?layers=3&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=100&seq=16");
        });
        QTest::newRow("decoder, 3 layers") << Builder([] { return gptLike({3}); });
        QTest::newRow("decoder, 12 layers") << Builder([] { return gptLike({12}); });
        QTest::newRow("experts nested in each layer") << Builder([] { return gptLike({4, false, false, 3}); });
        for (const char *file : {"gpt-tiny.onnx", "transformer-encoder.onnx", "gpt2-external.onnx"})
            QTest::newRow(file) << Builder([file] { return loadSample(file); });
    }

    // Renaming every op to node_N leaves the structure: the same classes come
    // back from structure alone, each layer's ops in one instance.
    void opaqueNames()
    {
        QFETCH(Builder, build);
        auto graph = build();
        const auto named = prune(graph);
        renameOpaque(graph);
        const auto opaque = prune(graph);
        QVERIFY(named.fromScopes);
        QVERIFY(!opaque.fromScopes);
        QCOMPARE(classSummary(opaque), classSummary(named));
        QCOMPARE(opaque.coverage, named.coverage);
        const auto &a = named.classes.front(), &b = opaque.classes.front();
        for (std::size_t i = 0; i < a.instances.size(); ++i)
            QCOMPARE(b.instances[i].ops, a.instances[i].ops);
    }

    // Pruning a stamped coarse graph prunes its reduced graph and stamps the
    // classes: the same classes, instances, boundary tensors and coverage as
    // pruning every op, at any minimum count (above the seven copies a
    // reduced graph keeps, it walks).
    void stampedMatchesWalk_data()
    {
        QTest::addColumn<Builder>("build");
        QTest::addColumn<int>("minDuplicate");
        QTest::addColumn<int>("minCopies");
        QTest::addColumn<bool>("stamps");
        for (const auto &c : testing::repeatCases())
            for (int minDuplicate : {2, 8})
                QTest::newRow((c.name + ", at least " + std::to_string(minDuplicate)).c_str())
                    << Builder(c.build) << minDuplicate << c.minCopies
                    << (c.stamps && c.scoped && minDuplicate <= passes::ReducedGraph::kKept);
    }

    void stampedMatchesWalk()
    {
        QFETCH(Builder, build);
        QFETCH(int, minDuplicate);
        QFETCH(int, minCopies);
        QFETCH(bool, stamps);
        const auto graph = build();
        const auto walked = passes::Prune(minDuplicate, passes::Repeats::Walk)
                                .run(graph, passes::Coarsen(passes::Repeats::Walk).run(graph));
        const auto stamped =
            passes::Prune(minDuplicate).run(graph, passes::Coarsen(passes::Repeats::Stamp, minCopies).run(graph));
        QVERIFY(!walked.classes.empty());
        QCOMPARE(walked.stampedInstances, std::size_t(0));
        QCOMPARE(stamped.stampedInstances > 0, stamps);
        QCOMPARE(stamped.classes.size(), walked.classes.size());
        QCOMPARE(stamped.coverage, walked.coverage);
        QCOMPARE(stamped.fromScopes, walked.fromScopes);
        QCOMPARE(stamped.minDuplicate, walked.minDuplicate);
        QVERIFY(stamped.classOfOp == walked.classOfOp);
        for (std::size_t c = 0; c < walked.classes.size(); ++c) {
            const auto &w = walked.classes[c], &s = stamped.classes[c];
            QCOMPARE(s.id, w.id);
            QCOMPARE(s.representative, w.representative);
            QCOMPARE(s.opsPerInstance, w.opsPerInstance);
            QCOMPARE(s.parametersPerInstance, w.parametersPerInstance);
            QCOMPARE(s.signature, w.signature);
            QCOMPARE(s.instances.size(), w.instances.size());
            for (std::size_t i = 0; i < w.instances.size(); ++i) {
                const auto &a = w.instances[i], &b = s.instances[i];
                QCOMPARE(b.scope, a.scope);
                QVERIFY2(b.ops == a.ops && b.nodes == a.nodes, a.scope.c_str());
                QVERIFY2(b.inputs == a.inputs && b.outputs == a.outputs && b.parameters == a.parameters, a.scope.c_str());
            }
        }
    }

    // Instances carry what the search stitches along: boundary tensors in and
    // out, their parameters, their coarse nodes.
    void instances()
    {
        const auto graph = gptLike({3});
        const auto coarse = passes::Coarsen().run(graph);
        const auto result = passes::Prune().run(graph, coarse);
        QCOMPARE(result.classes.size(), std::size_t(1));
        const auto &cls = result.classes.front();
        QCOMPARE(cls.representative, std::size_t(0));
        // Per layer: two norm weights, q/k/v/o, c_fc, c_proj weights and biases.
        QCOMPARE(cls.parametersPerInstance, std::int64_t(16 + 16 + 4 * (16 * 16 + 16) + 16 * 64 + 64 + 64 * 16 + 16));
        const auto &mid = cls.instances[1];
        QStringList in, out;
        for (auto t : mid.inputs)
            in << QString::fromStdString(graph.tensor(t).name);
        for (auto t : mid.outputs)
            out << QString::fromStdString(graph.tensor(t).name);
        QCOMPARE(in.join(QLatin1Char(' ')), QStringLiteral("transformer/h.0/Add_1:0 attention_mask"));
        QCOMPARE(out.join(QLatin1Char(' ')), QStringLiteral("transformer/h.1/Add_1:0"));
        QCOMPARE(mid.parameters.size(), std::size_t(14));
        for (auto node : mid.nodes)
            for (auto op : coarse.node(node).ops)
                QVERIFY(std::find(mid.ops.begin(), mid.ops.end(), op) != mid.ops.end());
        for (auto op : mid.ops)
            QCOMPARE(result.classOfOp[op.index()].value, cls.id.value);
        // Outside the layers: the embedding, ln_f, lm_head and its weight transpose.
        QCOMPARE(result.coverage, 87.0 / 91.0);
    }
};

QTEST_APPLESS_MAIN(TestPrune)
#include "tst_prune.moc"
