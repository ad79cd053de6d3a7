#include "io/zoo/graphbuilder.h"
#include "ir/scopetree.h"
#include "ir/validate.h"

#include <QTest>

#include <algorithm>

using namespace tapestry;
using namespace tapestry::ir;

namespace {

// x[8,4] · w[4,6] → y[8,6] → Relu → z: the smallest valid graph.
Graph smallGraph()
{
    Graph g;
    auto x = g.addTensor("x", {8, 4}, DType::F32, Role::Input);
    auto w = g.addTensor("layer/w", {4, 6}, DType::F32, Role::Parameter);
    auto y = g.addTensor("y", {8, 6}, DType::F32, Role::Activation);
    auto z = g.addTensor("z", {8, 6}, DType::F32, Role::Output);
    g.addOp("MatMul", "model/layer.0/MatMul", {x, w}, {y});
    g.addOp("Relu", "model/layer.0/act/Relu", {y}, {z});
    return g;
}

QString problem(const Graph &g)
{
    auto e = validate(g, "test-model");
    return e ? QString::fromStdString(e->toString()) : QString();
}

} // namespace

class TestIr : public QObject {
    Q_OBJECT
private slots:
    void validGraph()
    {
        const Graph g = smallGraph();
        QCOMPARE(problem(g), QString());
        QCOMPARE(g.parameterCount(), 24);
        QCOMPARE(g.parameterBytes(), 96);
        QCOMPARE(g.tensor(*g.findTensor("y")).producer, OpId(0));
        QCOMPARE(g.tensor(*g.findTensor("y")).consumers.size(), std::size_t(1));
    }

    // The flat arrays the passes read say what the records say, after every
    // change the graph allows and after the graph is moved.
    void arraysFollowTheRecords()
    {
        Graph g = smallGraph();
        g.setDomain(OpId(1), "com.example");
        g.renameOp(OpId(0), "model/layer.0/proj/MatMul");
        g.setDType(*g.findTensor("y"), DType::BF16);
        g.setRole(*g.findTensor("y"), Role::Output);
        g.renameTensor(*g.findTensor("x"), "tokens");
        const GraphArrays::View before = g.arrays().view();
        const Graph moved = std::move(g);
        const GraphArrays::View a = moved.arrays().view();
        // A view taken before the move still reads the moved graph's arrays.
        QCOMPARE(before.name(OpId(1)), std::string_view("model/layer.0/act/Relu"));
        QVERIFY(std::ranges::equal(before.inputs(OpId(0)), moved.op(OpId(0)).inputs));
        QCOMPARE(a.opCount(), moved.opCount());
        QCOMPARE(a.tensorCount(), moved.tensorCount());
        for (std::size_t i = 0; i < moved.opCount(); ++i) {
            const OpId id(static_cast<std::int32_t>(i));
            const Op &op = moved.op(id);
            QCOMPARE(a.name(id), std::string_view(op.name));
            QCOMPARE(moved.arrays().typeNames()[a.type(id)], op.type);
            QCOMPARE(a.attributeHash(id), hashAttributes(op.domain, op.attributes));
            QVERIFY(std::ranges::equal(a.inputs(id), op.inputs));
            QVERIFY(std::ranges::equal(a.outputs(id), op.outputs));
        }
        for (std::size_t i = 0; i < moved.tensorCount(); ++i) {
            const TensorId id(static_cast<std::int32_t>(i));
            const Tensor &t = moved.tensor(id);
            QVERIFY(a.role(id) == t.role);
            QVERIFY(a.dtype(id) == t.dtype);
            QCOMPARE(a.producer(id), t.producer);
            QVERIFY(std::ranges::equal(a.shape(id), t.shape));
        }
        QCOMPARE(a.name(OpId(0)), std::string_view("model/layer.0/proj/MatMul"));
        QCOMPARE(moved.findOp("model/layer.0/proj/MatMul"), std::optional<OpId>(OpId(0)));
        QVERIFY(!moved.findOp("model/layer.0/MatMul"));
        QCOMPARE(moved.findTensor("tokens"), std::optional<TensorId>(TensorId(0)));
        QVERIFY(!moved.findTensor("x"));
        QVERIFY(a.attributeHash(OpId(1)) != hashAttributes({}, {}));
        QVERIFY(a.role(TensorId(2)) == Role::Output);
        QVERIFY(a.dtype(TensorId(2)) == DType::BF16);
    }

    // Names stay unique through renames, and validate() sees a rename that
    // makes or clears a duplicate.
    void renamesKeepNameLookups()
    {
        Graph g = smallGraph();
        QVERIFY(g.namesKnownUnique());
        g.renameOp(OpId(1), "model/layer.0/MatMul");
        QVERIFY(!g.namesKnownUnique());
        QCOMPARE(problem(g), QString("test-model: op 'model/layer.0/MatMul': duplicate op name"));
        g.renameOp(OpId(0), "model/layer.0/proj");
        QCOMPARE(g.findOp("model/layer.0/MatMul"), std::optional<OpId>(OpId(1)));
        QCOMPARE(g.findOp("model/layer.0/proj"), std::optional<OpId>(OpId(0)));
        QCOMPARE(problem(g), QString());
        g.renameTensor(TensorId(3), "y");
        QCOMPARE(problem(g), QString("test-model: tensor 'y': duplicate tensor name"));
        g.renameTensor(TensorId(2), "hidden");
        QCOMPARE(g.findTensor("y"), std::optional<TensorId>(TensorId(3)));
        QCOMPARE(problem(g), QString());
    }

    // Thousands of names, half of them renamed (each rename takes a name
    // out of the lookup and puts another in), some renamed back: every
    // name finds its tensor, and an old name none.
    void manyRenamesKeepNameLookups()
    {
        Graph g;
        const int n = 5000;
        for (int i = 0; i < n; ++i)
            g.addTensor("t" + std::to_string(i), {1}, DType::F32, Role::Input);
        for (int i = 0; i < n; i += 2)
            g.renameTensor(TensorId(i), "renamed/" + std::to_string(i));
        for (int i = 0; i < n; i += 6)
            g.renameTensor(TensorId(i), "t" + std::to_string(i));
        for (int i = 0; i < n; ++i) {
            const bool renamed = i % 2 == 0 && i % 6 != 0;
            const std::string now = renamed ? "renamed/" + std::to_string(i) : "t" + std::to_string(i);
            QCOMPARE(g.findTensor(now), std::optional<TensorId>(TensorId(i)));
            if (renamed)
                QVERIFY(!g.findTensor("t" + std::to_string(i)));
        }
        QVERIFY(g.namesKnownUnique());
    }

    void topologicalOrderIsDeterministic()
    {
        Graph g;
        auto a = g.addTensor("a", {2}, DType::F32, Role::Input);
        auto b = g.addTensor("b", {2}, DType::F32, Role::Activation);
        auto c = g.addTensor("c", {2}, DType::F32, Role::Activation);
        auto d = g.addTensor("d", {2}, DType::F32, Role::Output);
        // Added out of order: the consumer first.
        g.addOp("Add", "sum", {b, c}, {d});
        QVERIFY(g.arrays().idOrderIsTopological());
        g.addOp("Relu", "left", {a}, {b});
        QVERIFY(!g.arrays().idOrderIsTopological());
        g.addOp("Neg", "right", {a}, {c});
        QVERIFY(smallGraph().arrays().idOrderIsTopological());
        auto order = g.topologicalOrder();
        QVERIFY(order);
        QCOMPARE(order->size(), std::size_t(3));
        QCOMPARE(order->at(0), OpId(1));
        QCOMPARE(order->at(1), OpId(2));
        QCOMPARE(order->at(2), OpId(0));
    }

    void splitNames_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QStringList>("scope");
        QTest::newRow("slashes and dots") << "transformer/h.3/attn/c_attn/MatMul"
                                          << QStringList{"transformer", "h", "3", "attn", "c_attn"};
        QTest::newRow("leading slash") << "/encoder/layer.0/Add"
                                       << QStringList{"encoder", "layer", "0"};
        QTest::newRow("flat") << "node_17" << QStringList{};
    }
    void splitNames()
    {
        QFETCH(QString, name);
        QFETCH(QStringList, scope);
        Op op;
        op.name = name.toStdString();
        QStringList got;
        for (const auto &s : op.scope())
            got << QString::fromStdString(s);
        QCOMPARE(got, scope);
    }

    void scopeTree()
    {
        const Graph g = smallGraph();
        const ScopeTree tree(g);
        QCOMPARE(tree.depth(), 4);
        QCOMPARE(tree.root().totalOps(), std::size_t(2));
        const auto &model = *tree.root().children.at("model");
        QCOMPARE(model.path, std::string("model"));
        const auto &zero = *model.children.at("layer")->children.at("0");
        QCOMPARE(zero.path, std::string("model/layer/0"));
        QCOMPARE(zero.ops.size(), std::size_t(1));
        QCOMPARE(zero.children.at("act")->ops.size(), std::size_t(1));
    }

    void validationErrors_data()
    {
        QTest::addColumn<int>("breakage");
        QTest::addColumn<QString>("expected");
        QTest::newRow("cycle") << 0 << "test-model: op 'cyc/A' (or 'cyc/B') is part of a cycle";
        QTest::newRow("dangling input") << 1 << "test-model: op 'bad/Relu': reads tensor id 99 that does not exist";
        QTest::newRow("duplicate tensor") << 2 << "test-model: tensor 'y': duplicate tensor name";
        QTest::newRow("duplicate op") << 3 << "test-model: op 'model/layer.0/MatMul': duplicate op name";
        QTest::newRow("unproduced activation") << 4 << "test-model: tensor 'orphan': is an activation but no op produces it";
        QTest::newRow("matmul contracting") << 5 << "test-model: op 'bad/MatMul' (MatMul): MatMul contracting dims differ: [8, 4] x [5, 6]";
        QTest::newRow("matmul output") << 6 << "test-model: op 'bad/MatMul' (MatMul): output has shape [8, 7], expected [8, 6]";
        QTest::newRow("gemm") << 7 << "test-model: op 'bad/Gemm' (Gemm): Gemm contracting dims differ: [8, 4] x [6, 4]";
        QTest::newRow("broadcast") << 8 << "test-model: op 'bad/Add' (Add): inputs do not broadcast: [8, 6] and [4]";
        QTest::newRow("reshape") << 9 << "test-model: op 'bad/Reshape' (Reshape): Reshape from [8, 6] to [5, 10] changes the element count";
        QTest::newRow("transpose") << 10 << "test-model: op 'bad/Transpose' (Transpose): output has shape [8, 6], expected [6, 8]";
        QTest::newRow("softmax") << 11 << "test-model: op 'bad/Softmax' (Softmax): output has shape [8, 5], expected [8, 6]";
        QTest::newRow("layernorm") << 12 << "test-model: op 'bad/LayerNormalization' (LayerNormalization): scale/bias g has shape [5], expected [6]";
        QTest::newRow("gather") << 13 << "test-model: op 'bad/Gather' (Gather): output has shape [2, 3, 4], expected [2, 3, 6]";
        QTest::newRow("concat") << 14 << "test-model: op 'bad/Concat' (Concat): output has shape [8, 10], expected [8, 12]";
        QTest::newRow("split") << 15 << "test-model: op 'bad/Split' (Split): Split outputs cover 5 of 6 along axis 1";
        QTest::newRow("negative dim") << 16 << "test-model: tensor 'neg': negative dim in shape [-1, 4]";
        QTest::newRow("two writers") << 17 << "test-model: tensor 'y': written by more than one op";
    }
    void validationErrors()
    {
        QFETCH(int, breakage);
        QFETCH(QString, expected);
        Graph g = smallGraph();
        const auto x = *g.findTensor("x");
        const auto y = *g.findTensor("y");
        auto act = [&](const char *name, Shape s) { return g.addTensor(name, std::move(s), DType::F32, Role::Activation); };
        auto param = [&](const char *name, Shape s) { return g.addTensor(name, std::move(s), DType::F32, Role::Parameter); };
        switch (breakage) {
        case 0: {
            auto a = act("ca", {2});
            auto b = act("cb", {2});
            g.addOp("Relu", "cyc/A", {b}, {a});
            g.addOp("Relu", "cyc/B", {a}, {b});
            break;
        }
        case 1:
            g.addOp("Relu", "bad/Relu", {TensorId(99)}, {act("o", {1})});
            break;
        case 2:
            g.addTensor("y", {1}, DType::F32, Role::Input);
            break;
        case 3:
            g.addOp("Relu", "model/layer.0/MatMul", {x}, {act("o", {8, 4})});
            break;
        case 4:
            act("orphan", {3});
            break;
        case 5:
            g.addOp("MatMul", "bad/MatMul", {x, param("w5", {5, 6})}, {act("o", {8, 6})});
            break;
        case 6:
            g.addOp("MatMul", "bad/MatMul", {x, param("w6", {4, 6})}, {act("o", {8, 7})});
            break;
        case 7:
            g.addOp("Gemm", "bad/Gemm", {x, param("w7", {6, 4})}, {act("o", {8, 6})});
            break;
        case 8:
            g.addOp("Add", "bad/Add", {y, param("b8", {4})}, {act("o", {8, 6})});
            break;
        case 9:
            g.addOp("Reshape", "bad/Reshape", {y}, {act("o", {5, 10})});
            break;
        case 10:
            g.addOp("Transpose", "bad/Transpose", {y}, {act("o", {8, 6})}, {{"perm", std::vector<std::int64_t>{1, 0}}});
            break;
        case 11:
            g.addOp("Softmax", "bad/Softmax", {y}, {act("o", {8, 5})}, {{"axis", std::int64_t(-1)}});
            break;
        case 12:
            g.addOp("LayerNormalization", "bad/LayerNormalization", {y, param("g", {5})}, {act("o", {8, 6})});
            break;
        case 13: {
            auto ids = g.addTensor("ids", {2, 3}, DType::I64, Role::Input);
            g.addOp("Gather", "bad/Gather", {param("emb", {10, 6}), ids}, {act("o", {2, 3, 4})});
            break;
        }
        case 14:
            g.addOp("Concat", "bad/Concat", {y, y}, {act("o", {8, 10})}, {{"axis", std::int64_t(1)}});
            break;
        case 15:
            g.addOp("Split", "bad/Split", {y}, {act("o1", {8, 2}), act("o2", {8, 3})}, {{"axis", std::int64_t(1)}});
            break;
        case 16:
            g.addTensor("neg", {-1, 4}, DType::F32, Role::Input);
            break;
        case 17:
            g.addOp("Relu", "bad/Relu", {x}, {y});
            break;
        }
        QString got = problem(g);
        if (breakage == 0)
            QVERIFY2(got == "test-model: op 'cyc/A': is part of a cycle" ||
                         got == "test-model: op 'cyc/B': is part of a cycle",
                     qPrintable(got));
        else
            QCOMPARE(got, expected);
    }

    void broadcasting_data()
    {
        QTest::addColumn<QList<qint64>>("a");
        QTest::addColumn<QList<qint64>>("b");
        QTest::addColumn<QList<qint64>>("out");
        QTest::addColumn<bool>("ok");
        QTest::newRow("bias") << QList<qint64>{8, 16, 64} << QList<qint64>{64} << QList<qint64>{8, 16, 64} << true;
        QTest::newRow("mask") << QList<qint64>{8, 12, 16, 16} << QList<qint64>{1, 1, 16, 16} << QList<qint64>{8, 12, 16, 16} << true;
        QTest::newRow("scalar") << QList<qint64>{3, 4} << QList<qint64>{} << QList<qint64>{3, 4} << true;
        QTest::newRow("mismatch") << QList<qint64>{3, 4} << QList<qint64>{3} << QList<qint64>{} << false;
    }
    void broadcasting()
    {
        QFETCH(QList<qint64>, a);
        QFETCH(QList<qint64>, b);
        QFETCH(QList<qint64>, out);
        QFETCH(bool, ok);
        auto r = broadcastShapes(Shape(a.begin(), a.end()), Shape(b.begin(), b.end()));
        QCOMPARE(bool(r), ok);
        if (ok)
            QCOMPARE(*r, Shape(out.begin(), out.end()));
    }

    void builderNamesFollowScopes()
    {
        io::zoo::GraphBuilder b("t");
        auto x = b.input("x", {2, 4}, DType::F32);
        b.push("h.0");
        auto y = b.linear("fc", x, 8, true);
        b.pop();
        auto g = b.take();
        QCOMPARE(problem(g), QString());
        QVERIFY(g.findTensor("h.0.fc.weight"));
        QVERIFY(g.findTensor("h.0.fc.bias"));
        QCOMPARE(g.op(g.tensor(y).producer).name, std::string("h.0/fc/Add"));
        QCOMPARE(g.tensor(y).shape, (Shape{2, 8}));
    }
};

QTEST_APPLESS_MAIN(TestIr)
#include "tst_ir.moc"
