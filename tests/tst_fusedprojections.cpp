// The loader's stacked fused projections (io/onnx/fusedprojections.h):
// the graph computes what the export computes, number for number, and the
// rewrite is found only where it is exact.
#include "interpreter.h"

#include "io/modelloader.h"
#include "io/onnx/fusedprojections.h"
#include "io/zoo/graphbuilder.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <string>

using namespace tapestry;
using namespace tapestry::exec;

namespace {

std::string sample(const char *name)
{
    return std::string(TAPESTRY_SOURCE_DIR) + "/samples/onnx/" + name;
}

ir::Graph load(const std::string &path, bool stacked)
{
    io::LoadOptions options;
    options.stackFusedProjections = stacked;
    return io::loadModel(path, options);
}

float maxDifference(const TensorView &a, const TensorView &b)
{
    float worst = 0;
    for (std::int64_t i = 0; i < a.size(); ++i)
        worst = std::max(worst, std::abs(a.data[i] - b.data[i]));
    return worst;
}

float maxMagnitude(const TensorView &a)
{
    float most = 0;
    for (std::int64_t i = 0; i < a.size(); ++i)
        most = std::max(most, std::abs(a.data[i]));
    return most;
}

// Element (p, r, c) of the stacked [k, in, m] (or bias [k, 1, m]) is
// element (r, p·m + c) of the fused [in, k·m] (or [k·m]).
std::int64_t fusedIndex(const ir::Shape &stacked, std::int64_t p, std::int64_t r, std::int64_t c)
{
    const std::int64_t k = stacked[0], m = stacked[2];
    return r * k * m + p * m + c;
}

// Self-attention of one fused projection as exports write it.
// Sequence first (torch.nn.MultiheadAttention, torch 1.13): x [s, b, h] ·
// in_proj [h, 3h] + bias, q, k and v sliced from it, each reshaped to
// [s, b·heads, d] and moved to [b·heads, s, d]. Batch first (GPT-2's
// c_attn): x [b, s, h], q, k and v by one Split, each reshaped to
// [b, s, heads, d] and moved to [b, heads, s, d]. Then scores, softmax,
// context, and an output projection back to the input's shape.
ir::Graph fusedAttention(bool sequenceFirst)
{
    const std::int64_t s = 6, b = sequenceFirst ? 1 : 2, heads = 2, d = 4, h = heads * d;
    io::zoo::GraphBuilder g("fused");
    const ir::Shape xs = sequenceFirst ? ir::Shape{s, b, h} : ir::Shape{b, s, h};
    auto x = g.input("src", xs, ir::DType::F32);
    auto w = g.parameter("in_proj_weight", {h, 3 * h});
    auto bias = g.parameter("in_proj_bias", {3 * h});
    auto y = g.matmul(x, w);
    y = g.op("Add", {bias, y}, g.shape(y));
    std::vector<ir::TensorId> parts;
    if (sequenceFirst) {
        for (std::int64_t i = 0; i < 3; ++i)
            parts.push_back(g.op("Slice", {y}, xs,
                                 {{"starts", std::vector<std::int64_t>{i * h}},
                                  {"ends", std::vector<std::int64_t>{(i + 1) * h}},
                                  {"axes", std::vector<std::int64_t>{-1}}}));
    } else {
        parts = g.opMulti("Split", {y}, {xs, xs, xs},
                          {{"axis", std::int64_t{2}}, {"split", std::vector<std::int64_t>{h, h, h}}});
    }
    std::vector<ir::TensorId> qkv;
    for (auto part : parts)
        qkv.push_back(sequenceFirst ? g.transpose(g.reshape(part, {s, b * heads, d}), {1, 0, 2})
                                    : g.transpose(g.reshape(part, {b, s, heads, d}), {0, 2, 1, 3}));
    const std::size_t r = sequenceFirst ? 3 : 4;
    std::vector<std::int64_t> swapLast(r);
    for (std::size_t i = 0; i < r; ++i)
        swapLast[i] = static_cast<std::int64_t>(i);
    std::swap(swapLast[r - 1], swapLast[r - 2]);
    auto scores = g.matmul(qkv[0], g.transpose(qkv[1], swapLast));
    auto probs = g.op("Softmax", {scores}, g.shape(scores), {{"axis", std::int64_t{-1}}});
    auto context = g.matmul(probs, qkv[2]);
    context = sequenceFirst ? g.reshape(g.transpose(context, {1, 0, 2}), xs)
                            : g.reshape(g.transpose(context, {0, 2, 1, 3}), xs);
    g.markOutput(g.matmul(context, g.parameter("out_proj_weight", {h, h})));
    return g.take();
}

} // namespace

class TestFusedProjections : public QObject {
    Q_OBJECT

private slots:
    // A graph as exported and with its fused projections stacked, the
    // second's weights the first's laid out by parts: the same objective,
    // the same q, k and v (every tensor both hold), and the same gradient
    // of each weight.
    void sameNumbersAsTheExport_data()
    {
        QTest::addColumn<bool>("sequenceFirst");
        // torch.nn.MultiheadAttention's in_proj as torch 1.13 exports it:
        // sequence first, q, k and v by three Slices.
        QTest::newRow("MultiheadAttention in_proj, sliced") << true;
        // Hugging Face GPT-2's c_attn: batch first, one Split.
        QTest::newRow("GPT-2 c_attn, split") << false;
    }

    void sameNumbersAsTheExport()
    {
        QFETCH(bool, sequenceFirst);
        const std::string path = sequenceFirst ? "sliced" : "split";
        const ir::Graph fused = fusedAttention(sequenceFirst);
        std::vector<io::onnximport::StackedProjection> found;
        const ir::Graph stacked = io::onnximport::stackFusedProjections(fused, &found);
        QCOMPARE(found.size(), std::size_t{1});
        QCOMPARE(stacked.parameterCount(), fused.parameterCount());

        Interpreter a(fused, InterpreterOptions{}, path), b(stacked, InterpreterOptions{}, path);
        int laidOut = 0;
        for (auto t : stacked.tensorsWithRole(ir::Role::Parameter)) {
            const ir::Tensor &tensor = stacked.tensor(t);
            const TensorView to = b.value(tensor.name), from = a.value(tensor.name);
            QCOMPARE(to.size(), from.size());
            if (to.shape == from.shape) {
                std::copy(from.data, from.data + from.size(), to.data);
                continue;
            }
            QCOMPARE(to.rank(), std::size_t{3});
            ++laidOut;
            for (std::int64_t p = 0; p < to.shape[0]; ++p)
                for (std::int64_t r = 0; r < to.shape[1]; ++r)
                    for (std::int64_t c = 0; c < to.shape[2]; ++c)
                        to.data[(p * to.shape[1] + r) * to.shape[2] + c] = from.data[fusedIndex(to.shape, p, r, c)];
        }
        QCOMPARE(laidOut, 2);  // the weight and its bias

        const float fa = a.forward(), fb = b.forward();
        QVERIFY2(std::abs(fa - fb) <= 1e-4f * std::max(1.0f, std::abs(fa)),
                 qPrintable(QString("objective %1 as exported, %2 stacked").arg(fa).arg(fb)));
        // Every tensor both graphs hold (q, k and v among them) alike.
        int compared = 0;
        for (const auto &t : fused.tensors()) {
            const auto other = stacked.findTensor(t.name);
            if (t.role != ir::Role::Activation || !other || stacked.tensor(*other).shape != t.shape ||
                t.dtype != ir::DType::F32)
                continue;
            const TensorView x = a.value(t.name), y = b.value(t.name);
            QVERIFY2(maxDifference(x, y) <= 1e-4f * std::max(1.0f, maxMagnitude(x)), t.name.c_str());
            ++compared;
        }
        QVERIFY(compared >= 10);

        a.backward();
        b.backward();
        for (const auto &w : found) {
            const TensorView ga = a.grad(w.weight), gb = b.grad(w.weight);
            QVERIFY(ga && gb);
            float worst = 0;
            for (std::int64_t p = 0; p < gb.shape[0]; ++p)
                for (std::int64_t r = 0; r < gb.shape[1]; ++r)
                    for (std::int64_t c = 0; c < gb.shape[2]; ++c)
                        worst = std::max(worst, std::abs(gb.data[(p * gb.shape[1] + r) * gb.shape[2] + c] -
                                                         ga.data[fusedIndex(gb.shape, p, r, c)]));
            QVERIFY2(worst <= 1e-4f * std::max(1.0f, maxMagnitude(ga)), w.weight.c_str());
        }
    }

    // The samples as the loader reads them: torch 1.13's
    // TransformerEncoder (in_proj by Slices) and GPT-2 (c_attn by a Split)
    // stacked in every layer, parameters unchanged; torch 2's unflatten and
    // Gather form left as exported.
    void samplesStacked_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("projections");
        QTest::addColumn<QString>("weightOf");  // the first layer's fused matmul
        // Ops each adds: the input's reshape, the split into parts and a
        // reshape per part, less the slices or the split they replace.
        QTest::addColumn<int>("added");
        QTest::newRow("transformer-encoder") << "transformer-encoder.onnx" << 4 << "/layers.0/self_attn/MatMul" << 2;
        QTest::newRow("gpt-tiny") << "gpt-tiny.onnx" << 4 << "/h.0/attn/c_attn/MatMul" << 4;
        QTest::newRow("transformer-2x3") << "transformer-2x3.onnx" << 0 << "" << 0;
    }

    void samplesStacked()
    {
        QFETCH(QString, file);
        QFETCH(int, projections);
        QFETCH(QString, weightOf);
        QFETCH(int, added);
        const std::string path = sample(file.toStdString().c_str());
        const ir::Graph fused = load(path, false), stacked = load(path, true);
        std::vector<io::onnximport::StackedProjection> found;
        io::onnximport::stackFusedProjections(fused, &found);
        QCOMPARE(static_cast<int>(found.size()), projections);
        QCOMPARE(stacked.parameterCount(), fused.parameterCount());
        QCOMPARE(stacked.tensorsWithRole(ir::Role::Parameter).size(), fused.tensorsWithRole(ir::Role::Parameter).size());
        if (projections == 0) {
            QCOMPARE(stacked.opCount(), fused.opCount());
            return;
        }
        QCOMPARE(stacked.opCount(), fused.opCount() + static_cast<std::size_t>(projections * added));
        const ir::Op &matmul = stacked.op(*stacked.findOp(weightOf.toStdString()));
        const ir::Shape &fusedShape = fused.tensor(*fused.findTensor(stacked.tensor(matmul.inputs[1]).name)).shape;
        QCOMPARE(stacked.tensor(matmul.inputs[1]).shape,
                 (ir::Shape{3, fusedShape[0], fusedShape[1] / 3}));
        for (const auto &t : fused.tensors())  // every tensor but the fused ones as it was
            if (const auto other = stacked.findTensor(t.name); other && t.role == ir::Role::Activation &&
                                                                  stacked.tensor(*other).shape != t.shape)
                QVERIFY2(stacked.tensor(*other).shape.size() == t.shape.size() + 1, t.name.c_str());
        std::vector<std::string> notes;
        io::LoadOptions options;
        options.note = [&](const std::string &line) { notes.push_back(line); };
        io::loadModel(path, options);
        QCOMPARE(std::count_if(notes.begin(), notes.end(),
                               [](const std::string &n) { return n.find("held as their 3 parts stacked") != std::string::npos; }),
                 1);
    }

    // Where the parts are not exactly k equal slices of the last dim, or
    // something else reads the product, the projection stays as exported.
    void onlyExactPatternsStacked_data()
    {
        QTest::addColumn<QString>("variant");
        QTest::addColumn<bool>("stacks");
        QTest::newRow("three equal slices") << "equal" << true;
        QTest::newRow("grouped-query parts of unequal size") << "unequal" << false;
        QTest::newRow("a part left out") << "missing" << false;
        QTest::newRow("the product read whole too") << "whole" << false;
        QTest::newRow("the weight read twice") << "tied" << false;
        QTest::newRow("slices of another dim") << "rows" << false;
    }

    void onlyExactPatternsStacked()
    {
        QFETCH(QString, variant);
        QFETCH(bool, stacks);
        const std::string v = variant.toStdString();
        io::zoo::GraphBuilder g("fused");
        auto x = g.input("x", {2, 8, 16}, ir::DType::F32);
        auto w = g.parameter("qkv.weight", {16, 48});
        auto bias = g.parameter("qkv.bias", {48});
        auto y = g.matmul(x, w);
        y = g.op("Add", {y, bias}, g.shape(y));
        auto slice = [&](std::int64_t begin, std::int64_t end, std::int64_t axis = -1) {
            ir::Shape s = g.shape(y);
            s[static_cast<std::size_t>(axis < 0 ? axis + 3 : axis)] = end - begin;
            return g.op("Slice", {y}, s,
                        {{"starts", std::vector<std::int64_t>{begin}}, {"ends", std::vector<std::int64_t>{end}},
                         {"axes", std::vector<std::int64_t>{axis}}});
        };
        std::vector<ir::TensorId> parts;
        if (v == "unequal")
            parts = {slice(0, 32), slice(32, 40), slice(40, 48)};
        else if (v == "missing")
            parts = {slice(0, 16), slice(32, 48)};
        else if (v == "rows")
            parts = {slice(0, 4, 1), slice(4, 8, 1)};
        else
            parts = {slice(0, 16), slice(16, 32), slice(32, 48)};
        if (v == "whole")
            parts.push_back(g.op("Relu", {y}, g.shape(y)));
        if (v == "tied")
            parts.push_back(g.matmul(x, w));
        for (auto p : parts)
            g.markOutput(p);
        const ir::Graph graph = g.take();
        std::vector<io::onnximport::StackedProjection> found;
        const ir::Graph out = io::onnximport::stackFusedProjections(graph, &found);
        QCOMPARE(found.empty(), !stacks);
        QCOMPARE(out.tensor(*out.findTensor("qkv.weight")).shape,
                 stacks ? ir::Shape({3, 16, 16}) : ir::Shape({16, 48}));
        if (stacks) {
            QCOMPARE(out.tensor(*out.findTensor("qkv.bias")).shape, ir::Shape({3, 1, 16}));
            for (auto p : parts)  // each part keeps its name and shape
                QCOMPARE(out.tensor(*out.findTensor(graph.tensor(p).name)).shape, graph.tensor(p).shape);
        } else {
            QCOMPARE(out.opCount(), graph.opCount());
        }
    }
};

QTEST_GUILESS_MAIN(TestFusedProjections)
#include "tst_fusedprojections.moc"
