#include "io/modelloader.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "passes/coarsen.h"
#include "repeatcases.h"

#include <QtTest>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>

using namespace tapestry;
using io::zoo::GraphBuilder;

namespace {

using Builder = std::function<ir::Graph()>;

ir::TensorId layerNorm(GraphBuilder &g, const std::string &module, ir::TensorId x, bool decomposed)
{
    g.push(module);
    const ir::Shape s = g.shape(x);
    const std::int64_t h = s.back();
    auto gamma = g.parameter("weight", {h});
    auto beta = g.parameter("bias", {h});
    ir::TensorId y;
    if (decomposed) {
        // torch.onnx's LayerNorm below opset 17.
        ir::Shape reduced = s;
        reduced.back() = 1;
        const ir::Attributes axes{{"axes", std::vector<std::int64_t>{-1}}};
        auto mean = g.op("ReduceMean", {x}, reduced, axes);
        auto centred = g.op("Sub", {x, mean}, s);
        auto two = g.parameter("two", {});
        auto squared = g.op("Pow", {centred, two}, s);
        auto variance = g.op("ReduceMean", {squared}, reduced, axes);
        auto eps = g.parameter("eps", {});
        auto shifted = g.op("Add", {variance, eps}, reduced);
        auto deviation = g.op("Sqrt", {shifted}, reduced);
        auto normed = g.op("Div", {centred, deviation}, s);
        y = g.op("Add", {g.op("Mul", {normed, gamma}, s), beta}, s);
    } else {
        y = g.op("LayerNormalization", {x, gamma, beta}, s, {{"axis", std::int64_t{-1}}});
    }
    g.pop();
    return y;
}

// GPT-2 written the way torch.onnx exports it: fused c_attn, Split, head
// reshapes, scaled and masked scores, Gelu MLP, tied LM head, loss.
ir::Graph gptLike(int layers, bool decomposedNorm)
{
    const std::int64_t b = 2, s = 8, h = 16, heads = 2, d = h / heads, vocab = 50;
    GraphBuilder g("gpt-like");
    auto ids = g.input("input_ids", {b, s}, ir::DType::I64);
    auto pos = g.input("position_ids", {1, s}, ir::DType::I64);
    auto labels = g.input("labels", {b, s}, ir::DType::I64);
    auto mask = g.input("attention_mask", {1, 1, s, s}, ir::DType::F32);
    g.push("transformer");
    g.push("wte");
    auto wte = g.parameter("weight", {vocab, h});
    auto tok = g.op("Gather", {wte, ids}, {b, s, h});
    g.pop();
    g.push("wpe");
    auto wpe = g.parameter("weight", {s, h});
    auto where = g.op("Gather", {wpe, pos}, {1, s, h});
    g.pop();
    auto x = g.op("Add", {tok, where}, {b, s, h});
    for (int i = 0; i < layers; ++i) {
        g.push("h." + std::to_string(i));
        auto a = layerNorm(g, "ln_1", x, decomposedNorm);
        g.push("attn");
        auto qkv = g.linear("c_attn", a, 3 * h, true);
        auto parts = g.opMulti("Split", {qkv}, {{b, s, h}, {b, s, h}, {b, s, h}}, {{"axis", std::int64_t{2}}});
        auto q = g.transpose(g.reshape(parts[0], {b, s, heads, d}), {0, 2, 1, 3});
        auto k = g.transpose(g.reshape(parts[1], {b, s, heads, d}), {0, 2, 3, 1});
        auto v = g.transpose(g.reshape(parts[2], {b, s, heads, d}), {0, 2, 1, 3});
        auto scores = g.op("MatMul", {q, k}, {b, heads, s, s});
        auto scale = g.parameter("scale", {});
        scores = g.op("Mul", {scores, scale}, {b, heads, s, s});
        scores = g.op("Add", {scores, mask}, {b, heads, s, s});
        auto probs = g.op("Softmax", {scores}, {b, heads, s, s}, {{"axis", std::int64_t{-1}}});
        auto context = g.op("MatMul", {probs, v}, {b, heads, s, d});
        auto merged = g.reshape(g.transpose(context, {0, 2, 1, 3}), {b, s, h});
        auto o = g.linear("c_proj", merged, h, true);
        g.pop();
        x = g.op("Add", {x, o}, {b, s, h});
        auto m = layerNorm(g, "ln_2", x, decomposedNorm);
        g.push("mlp");
        auto u = g.linear("c_fc", m, 4 * h, true);
        u = g.op("Gelu", {u}, g.shape(u));
        auto dn = g.linear("c_proj", u, h, true);
        g.pop();
        x = g.op("Add", {x, dn}, {b, s, h});
        g.pop();
    }
    x = layerNorm(g, "ln_f", x, decomposedNorm);
    g.pop();
    g.push("lm_head");
    auto logits = g.matmul(x, g.transpose(wte, {1, 0}));
    g.pop();
    g.push("loss");
    auto loss = g.op("SoftmaxCrossEntropyLoss", {logits, labels}, {});
    g.pop();
    g.markOutput(loss);
    return g.take();
}

ir::Graph loadSample(const std::string &file)
{
    return io::loadModel(std::string(TAPESTRY_SOURCE_DIR) + "/samples/onnx/" + file);
}

void renameOpaque(ir::Graph &graph)
{
    for (std::size_t i = 0; i < graph.opCount(); ++i)
        graph.renameOp(ir::OpId(static_cast<std::int32_t>(i)), "node_" + std::to_string(i));
}

// "attention:2 linear:9 ...": the node kinds of a coarse graph, as text.
QString kindHistogram(const passes::CoarseGraph &coarse)
{
    std::map<std::string, int> kinds;
    for (const auto &n : coarse.nodes())
        ++kinds[std::string(passes::toString(n.kind))];
    QStringList parts;
    for (const auto &[kind, count] : kinds)
        parts << QString::fromStdString(kind) + QLatin1Char(':') + QString::number(count);
    return parts.join(QLatin1Char(' '));
}

// The op types of the node holding the op named `opName`, in order.
QString nodeOpTypes(const ir::Graph &graph, const passes::CoarseGraph &coarse, const std::string &opName)
{
    auto op = graph.findOp(opName);
    if (!op)
        return QStringLiteral("no op ") + QString::fromStdString(opName);
    QStringList types;
    for (ir::OpId member : coarse.node(coarse.nodeOf(*op)).ops)
        types << QString::fromStdString(graph.op(member).type);
    return types.join(QLatin1Char(' '));
}

} // namespace

Q_DECLARE_METATYPE(Builder)

class TestCoarsen : public QObject {
    Q_OBJECT

private slots:
    void everyOpInOneNode_data()
    {
        QTest::addColumn<Builder>("build");
        QTest::newRow("gpt-like, 3 layers") << Builder([] { return gptLike(3, false); });
        QTest::newRow("gpt-like, decomposed norms") << Builder([] { return gptLike(2, true); });
        QTest::newRow("gpt-like, opaque names") << Builder([] {
            auto g = gptLike(2, true);
            renameOpaque(g);
            return g;
        });
        QTest::newRow("zoo:mlp") << Builder([] { return io::zoo::build("mlp"); });
        QTest::newRow("zoo:abc") << Builder([] { return io::zoo::build("abc"); });
        for (const char *spec : {"gpt2", "bert-base", "t5-base", "llama3-8b?layers=4", "mixtral-8x7b?layers=4"})
            QTest::newRow(spec) << Builder([spec] { return io::zoo::build(spec); });
        for (const char *file : {"gpt-tiny.onnx", "transformer-encoder.onnx", "gpt2-external.onnx",
                                 "resnet18-shapes.onnx"})
            QTest::newRow(file) << Builder([file] { return loadSample(file); });
    }

    // A node's lists are views into its coarse graph's arrays: a copy
    // carries its own, which outlive the original, and equal a fresh run.
    void copiesKeepTheirLists()
    {
        const auto graph = io::zoo::build("gpt2?layers=2");
        const auto fresh = passes::Coarsen().run(graph);
        auto original = std::make_unique<passes::CoarseGraph>(passes::Coarsen().run(graph));
        passes::CoarseGraph copy(*original);
        passes::CoarseGraph assigned;
        assigned = *original;
        passes::CoarseGraph moved(std::move(*original));
        original.reset();
        for (const passes::CoarseGraph *c : {&copy, &assigned, &moved}) {
            QCOMPARE(c->nodeCount(), fresh.nodeCount());
            QCOMPARE(c->edgeCount(), fresh.edgeCount());
            for (std::size_t i = 0; i < fresh.nodeCount(); ++i) {
                const auto &a = c->nodes()[i], &b = fresh.nodes()[i];
                QCOMPARE(a.name, b.name);
                QVERIFY(std::ranges::equal(a.ops, b.ops));
                QVERIFY(std::ranges::equal(a.inputs, b.inputs));
                QVERIFY(std::ranges::equal(a.parameters, b.parameters));
                QVERIFY(std::ranges::equal(a.outputs, b.outputs));
                QVERIFY(std::ranges::equal(a.inEdges, b.inEdges));
                QVERIFY(std::ranges::equal(a.outEdges, b.outEdges));
            }
            for (std::size_t i = 0; i < fresh.edgeCount(); ++i)
                QVERIFY(std::ranges::equal(c->edges()[i].shape, fresh.edges()[i].shape));
        }
    }

    // Every op sits in exactly one node, every tensor that crosses nodes is an
    // edge with its shape, and the coarse graph stays acyclic.
    void everyOpInOneNode()
    {
        QFETCH(Builder, build);
        const auto graph = build();
        const auto coarse = passes::Coarsen().run(graph);
        std::vector<int> seen(graph.opCount(), 0);
        for (const auto &node : coarse.nodes()) {
            QVERIFY(!node.ops.empty());
            for (ir::OpId op : node.ops) {
                ++seen[op.index()];
                QCOMPARE(coarse.nodeOf(op).value, node.id.value);
            }
        }
        for (std::size_t i = 0; i < seen.size(); ++i)
            QVERIFY2(seen[i] == 1, graph.ops()[i].name.c_str());

        std::size_t crossing = 0;
        for (const auto &t : graph.tensors()) {
            if (!t.producer.valid())
                continue;
            std::set<std::int32_t> readers;
            for (ir::OpId c : t.consumers)
                if (coarse.nodeOf(c) != coarse.nodeOf(t.producer))
                    readers.insert(coarse.nodeOf(c).value);
            crossing += readers.size();
        }
        QCOMPARE(coarse.edgeCount(), crossing);
        for (const auto &e : coarse.edges()) {
            QVERIFY(std::ranges::equal(e.shape, graph.tensor(e.tensor).shape));
            QCOMPARE(coarse.nodeOf(graph.tensor(e.tensor).producer).value, e.from.value);
        }
        QCOMPARE(coarse.topologicalOrder().size(), coarse.nodeCount());

        // The flat index the coarse graph keeps for pruning mirrors the op
        // graph: the same links and the same topological order. A stamped
        // coarse graph never swept the op graph and keeps none.
        const auto &index = coarse.graphIndex();
        if (coarse.reduction()) {
            QCOMPARE(index.opCount(), std::size_t(0));
            return;
        }
        QCOMPARE(index.order(), *graph.topologicalOrder());
        for (std::size_t i = 0; i < graph.opCount(); ++i) {
            const ir::OpId op(static_cast<std::int32_t>(i));
            const auto in = index.inputs(op), out = index.outputs(op);
            QCOMPARE(std::vector<ir::TensorId>(in.begin(), in.end()), graph.op(op).inputs);
            QCOMPARE(std::vector<ir::TensorId>(out.begin(), out.end()), graph.op(op).outputs);
            QCOMPARE(index.typeNames()[index.type(op)], std::string_view(graph.op(op).type));
        }
        for (std::size_t i = 0; i < graph.tensorCount(); ++i) {
            const ir::TensorId t(static_cast<std::int32_t>(i));
            const auto consumers = index.consumers(t);
            QCOMPARE(std::vector<ir::OpId>(consumers.begin(), consumers.end()), graph.tensor(t).consumers);
            QCOMPARE(index.producer(t).value, graph.tensor(t).producer.value);
        }
    }

    void kinds_data()
    {
        QTest::addColumn<Builder>("build");
        QTest::addColumn<QString>("kinds");
        // Per layer: 2 norms, c_attn, attention, c_proj, c_fc(+Gelu), c_proj,
        // 2 residual adds; around them 2 embeddings, their add, ln_f, lm_head, loss.
        const QString gpt2 = QStringLiteral("attention:2 elementwise:5 embedding:2 linear:9 loss:1 norm:5");
        QTest::newRow("gpt-like") << Builder([] { return gptLike(2, false); }) << gpt2;
        QTest::newRow("gpt-like, decomposed norms") << Builder([] { return gptLike(2, true); }) << gpt2;
        QTest::newRow("gpt-like, opaque names") << Builder([] {
            auto g = gptLike(2, true);
            renameOpaque(g);
            return g;
        }) << gpt2;
        QTest::newRow("zoo:mlp, relu joins fc1") << Builder([] { return io::zoo::build("mlp"); })
                                                 << QStringLiteral("linear:2");
        QTest::newRow("zoo:abc") << Builder([] { return io::zoo::build("abc"); })
                                 << QStringLiteral("linear:2");
        // torch.onnx at opset 14 decomposes LayerNorm: per layer two norms,
        // c_attn, attention, c_proj, c_fc(+Erf GELU), c_proj, two residual
        // adds; ln_f and the LM head after. The position embedding's Gather
        // reads constant Range indices, so it is a constant and joins the
        // node that reads it.
        const QString gptTiny = QStringLiteral("attention:4 elementwise:8 embedding:1 linear:17 norm:9");
        QTest::newRow("onnx gpt-tiny") << Builder([] { return loadSample("gpt-tiny.onnx"); }) << gptTiny;
        QTest::newRow("onnx gpt-tiny, opaque names") << Builder([] {
            auto g = loadSample("gpt-tiny.onnx");
            renameOpaque(g);
            return g;
        }) << gptTiny;
        // nn.TransformerEncoderLayer: in_proj, attention, out_proj, linear1
        // (+ReLU), linear2, two norms, two residual adds.
        QTest::newRow("onnx nn.TransformerEncoder")
            << Builder([] { return loadSample("transformer-encoder.onnx"); })
            << QStringLiteral("attention:4 elementwise:8 linear:16 norm:8");
        // nn.Transformer, 2 encoder and 3 decoder layers: per encoder layer
        // in_proj, out_proj, linear1 (+ReLU), linear2; per decoder layer
        // those, cross attention's q and packed kv projections and its
        // out_proj; an attention core per attention, a norm and a residual
        // add per sublayer, the encoder's and decoder's final norms. The
        // transposition of the encoder's memory, exported once for all
        // decoder layers, stands alone.
        QTest::newRow("onnx nn.Transformer")
            << Builder([] { return loadSample("transformer-2x3.onnx"); })
            << QStringLiteral("attention:8 elementwise:13 linear:29 norm:15 other:1");
        // Batch norms are folded into the convs on export; each block's
        // residual Add takes its ReLU; the stem's max pool stands alone.
        QTest::newRow("onnx resnet18") << Builder([] { return loadSample("resnet18-shapes.onnx"); })
                                       << QStringLiteral("conv:20 elementwise:8 linear:1 other:1");
    }

    void kinds()
    {
        QFETCH(Builder, build);
        QFETCH(QString, kinds);
        const auto graph = build();
        QCOMPARE(kindHistogram(passes::Coarsen().run(graph)), kinds);
    }

    void members_data()
    {
        QTest::addColumn<bool>("decomposed");
        QTest::addColumn<QString>("opName");
        QTest::addColumn<QString>("types");
        QTest::newRow("linear takes bias, split and head reshapes")
            << false << QStringLiteral("transformer/h.0/attn/c_attn/MatMul")
            << QStringLiteral("MatMul Add Split Reshape Transpose Reshape Transpose Reshape Transpose");
        QTest::newRow("attention core")
            << false << QStringLiteral("transformer/h.0/attn/Softmax")
            << QStringLiteral("MatMul Mul Add Softmax MatMul Transpose Reshape");
        QTest::newRow("mlp linear takes its activation")
            << false << QStringLiteral("transformer/h.1/mlp/c_fc/MatMul") << QStringLiteral("MatMul Add Gelu");
        QTest::newRow("layer norm") << false << QStringLiteral("transformer/h.0/ln_1/LayerNormalization")
                                    << QStringLiteral("LayerNormalization");
        QTest::newRow("decomposed layer norm")
            << true << QStringLiteral("transformer/h.0/ln_1/Sqrt")
            << QStringLiteral("ReduceMean Sub Pow ReduceMean Add Sqrt Div Mul Add");
        QTest::newRow("residual add stands alone")
            << true << QStringLiteral("transformer/h.0/Add") << QStringLiteral("Add");
        QTest::newRow("tied lm head takes the weight transpose")
            << false << QStringLiteral("lm_head/MatMul") << QStringLiteral("Transpose MatMul");
        QTest::newRow("embedding") << false << QStringLiteral("transformer/wte/Gather")
                                   << QStringLiteral("Gather");
    }

    void members()
    {
        QFETCH(bool, decomposed);
        QFETCH(QString, opName);
        QFETCH(QString, types);
        const auto graph = gptLike(2, decomposed);
        QCOMPARE(nodeOpTypes(graph, passes::Coarsen().run(graph), opName.toStdString()), types);
    }

    void decomposedRmsNorm()
    {
        GraphBuilder g("rms");
        auto x = g.input("x", {2, 8}, ir::DType::F32);
        g.push("norm");
        auto two = g.parameter("two", {});
        auto sq = g.op("Pow", {x, two}, {2, 8});
        auto mean = g.op("ReduceMean", {sq}, {2, 1}, {{"axes", std::vector<std::int64_t>{-1}}});
        auto eps = g.parameter("eps", {});
        auto root = g.op("Sqrt", {g.op("Add", {mean, eps}, {2, 1})}, {2, 1});
        auto normed = g.op("Div", {x, root}, {2, 8});
        auto y = g.op("Mul", {normed, g.parameter("weight", {8})}, {2, 8});
        g.pop();
        auto z = g.linear("proj", y, 4, false);
        g.markOutput(z);
        const auto graph = g.take();
        const auto coarse = passes::Coarsen().run(graph);
        QCOMPARE(kindHistogram(coarse), QStringLiteral("linear:1 norm:1"));
        QCOMPARE(nodeOpTypes(graph, coarse, "norm/Pow"), QStringLiteral("Pow ReduceMean Add Sqrt Div Mul"));
        // The norm hands one tensor, its result, to the projection.
        QCOMPARE(coarse.edgeCount(), std::size_t(1));
        QVERIFY(std::ranges::equal(coarse.edge(passes::EdgeId(0)).shape, ir::Shape{2, 8}));
    }

    // A plain mean (pooling) is not a norm: it needs the square root.
    void meanIsNotNorm()
    {
        GraphBuilder g("pool");
        auto x = g.input("x", {2, 8, 4}, ir::DType::F32);
        auto m = g.op("ReduceMean", {x}, {2, 1, 4}, {{"axes", std::vector<std::int64_t>{1}}});
        auto y = g.linear("head", g.reshape(m, {2, 4}), 3, true);
        g.markOutput(y);
        const auto graph = g.take();
        QCOMPARE(kindHistogram(passes::Coarsen().run(graph)), QStringLiteral("elementwise:1 linear:1"));
    }

    // Boundary tensors: what a node reads from outside and hands on.
    // A run of like layers is coarsened on a few of them and the rest are
    // stamped: the coarse graph is the one walking every op gives, node for
    // node (ops, lists, edges) and edge for edge.
    void stampedMatchesWalk_data()
    {
        QTest::addColumn<Builder>("build");
        QTest::addColumn<bool>("stamps");
        QTest::addColumn<int>("minCopies");
        for (const auto &c : testing::repeatCases())
            QTest::newRow(c.name.c_str()) << Builder(c.build) << c.stamps << c.minCopies;
    }

    void stampedMatchesWalk()
    {
        QFETCH(Builder, build);
        QFETCH(bool, stamps);
        QFETCH(int, minCopies);
        const auto graph = build();
        const auto walked = passes::Coarsen(passes::Repeats::Walk).run(graph);
        const auto stamped = passes::Coarsen(passes::Repeats::Stamp, minCopies).run(graph);
        QCOMPARE(stamped.stampedOps() > 0, stamps);
        QCOMPARE(walked.stampedOps(), std::size_t(0));
        QCOMPARE(stamped.nodeCount(), walked.nodeCount());
        QCOMPARE(stamped.edgeCount(), walked.edgeCount());
        auto same = [](auto a, auto b) { return std::ranges::equal(a, b); };
        for (std::size_t n = 0; n < walked.nodeCount(); ++n) {
            const auto &w = walked.nodes()[n], &s = stamped.nodes()[n];
            const QByteArray where = QByteArray::number(qulonglong(n)) + ' ' + QByteArray(w.name.data(), qsizetype(w.name.size()));
            QVERIFY2(s.kind == w.kind && s.name == w.name && s.anchor == w.anchor, where);
            QVERIFY2(same(s.ops, w.ops), where);
            QVERIFY2(same(s.inputs, w.inputs) && same(s.parameters, w.parameters) && same(s.outputs, w.outputs), where);
            QVERIFY2(same(s.inEdges, w.inEdges) && same(s.outEdges, w.outEdges), where);
        }
        for (std::size_t e = 0; e < walked.edgeCount(); ++e) {
            const auto &w = walked.edges()[e], &s = stamped.edges()[e];
            QVERIFY2(s.from == w.from && s.to == w.to && s.tensor == w.tensor && same(s.shape, w.shape),
                     QByteArray::number(qulonglong(e)));
        }
        for (std::size_t i = 0; i < graph.opCount(); ++i)
            QCOMPARE(stamped.nodeOf(ir::OpId(static_cast<std::int32_t>(i))), walked.nodeOf(ir::OpId(static_cast<std::int32_t>(i))));
    }

    // A run is only found on a graph whose ops name its own tensors: the
    // loaders refuse any other (ir::validate), and the finder reads no id
    // past the graph's.
    void noRunThroughUnknownTensors()
    {
        auto graph = io::zoo::build("gpt2?layers=40");
        QVERIFY(passes::findRepeatRun(graph).has_value());
        const ir::TensorId out = graph.addTensor("stray:0", {1}, ir::DType::F32, ir::Role::Output);
        graph.addOp("Identity", "stray/Identity", {ir::TensorId(1 << 30)}, {out});
        QVERIFY(!passes::findRepeatRun(graph).has_value());
        // Walking it, coarsening refuses in one line naming the op.
        try {
            passes::Coarsen().run(graph);
            QFAIL("coarsened a graph naming a tensor it does not have");
        } catch (const TapestryError &e) {
            QCOMPARE(QString::fromStdString(e.what()),
                     QStringLiteral("op 'stray/Identity': names tensor 1073741824, which the graph does not have "
                                    "(%1 tensors)")
                         .arg(graph.tensorCount()));
        }
    }

    void boundaries()
    {
        const auto graph = gptLike(1, false);
        const auto coarse = passes::Coarsen().run(graph);
        const auto &attn = coarse.node(coarse.nodeOf(*graph.findOp("transformer/h.0/attn/Softmax")));
        QVERIFY(attn.kind == passes::NodeKind::Attention);
        QCOMPARE(attn.name, std::string("transformer/h.0/attn"));
        QStringList inputs;
        for (ir::TensorId t : attn.inputs)
            inputs << QString::fromStdString(graph.tensor(t).name);
        QCOMPARE(inputs.join(QLatin1Char(' ')),
                 QStringLiteral("transformer/h.0/attn/Transpose:0 transformer/h.0/attn/Transpose_1:0 "
                                "attention_mask transformer/h.0/attn/Transpose_2:0"));
        QCOMPARE(attn.parameters.size(), std::size_t(1));
        QCOMPARE(attn.outputs.size(), std::size_t(1));
        QCOMPARE(graph.tensor(attn.outputs[0]).shape, (ir::Shape{2, 8, 16}));
        QCOMPARE(attn.inEdges.size(), std::size_t(3));
        QCOMPARE(attn.outEdges.size(), std::size_t(1));
    }
};

QTEST_APPLESS_MAIN(TestCoarsen)
#include "tst_coarsen.moc"
