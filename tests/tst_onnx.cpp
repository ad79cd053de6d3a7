#include "io/modelloader.h"
#include "io/onnx/onnxloader.h"
#include "ir/error.h"
#include "ir/validate.h"
#include "sharding/oprule.h"

#include <nlohmann/json.hpp>

#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <ctime>
#include <limits>
#include <sys/wait.h>
#include <unistd.h>
#include <variant>

using namespace tapestry;

namespace {

const std::string kSamples = std::string(TAPESTRY_SOURCE_DIR) + "/samples/onnx/";

// Protobuf wire format written by hand, so the test builds ONNX files
// (good, broken and over 2 GB) without linking the ONNX classes.
class Wire {
public:
    Wire &varint(int field, std::uint64_t v)
    {
        tag(field, 0);
        put(v);
        return *this;
    }
    Wire &bytes(int field, const std::string &s)
    {
        tag(field, 2);
        put(s.size());
        m_s += s;
        return *this;
    }
    Wire &message(int field, const Wire &w) { return bytes(field, w.m_s); }
    Wire &fixed32(int field, float f)
    {
        tag(field, 5);
        std::uint32_t bits;
        std::memcpy(&bits, &f, sizeof bits);
        for (int i = 0; i < 4; ++i)
            m_s += static_cast<char>(bits >> (8 * i) & 0xff);
        return *this;
    }
    // The header of a length-delimited field whose `size` bytes follow.
    Wire &header(int field, std::uint64_t size)
    {
        tag(field, 2);
        put(size);
        return *this;
    }
    const std::string &str() const { return m_s; }

private:
    void tag(int field, int type) { put(static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(type)); }
    void put(std::uint64_t v)
    {
        do {
            m_s += static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
            v >>= 7;
        } while (v);
    }
    std::string m_s;
};

constexpr int kFloat = 1, kInt64 = 7;
using Dim = std::variant<std::int64_t, std::string>;

Wire valueInfo(const std::string &name, int elemType, const std::vector<Dim> &dims)
{
    Wire shape;
    for (const auto &d : dims) {
        Wire dim;
        if (const auto *v = std::get_if<std::int64_t>(&d))
            dim.varint(1, static_cast<std::uint64_t>(*v));
        else
            dim.bytes(2, std::get<std::string>(d));
        shape.message(1, dim);
    }
    Wire tensorType;
    tensorType.varint(1, static_cast<std::uint64_t>(elemType)).message(2, shape);
    Wire type;
    type.message(1, tensorType);
    Wire vi;
    vi.bytes(1, name).message(2, type);
    return vi;
}

Wire node(const std::string &op, const std::string &name, const std::vector<std::string> &inputs,
          const std::vector<std::string> &outputs, const std::string &domain = {})
{
    Wire n;
    for (const auto &i : inputs)
        n.bytes(1, i);
    for (const auto &o : outputs)
        n.bytes(2, o);
    n.bytes(3, name).bytes(4, op);
    if (!domain.empty())
        n.bytes(7, domain);
    return n;
}

// TensorProto header: dims, data type, name (data fields follow separately).
Wire tensorHeader(const std::string &name, int elemType, const std::vector<std::int64_t> &dims)
{
    Wire t;
    for (auto d : dims)
        t.varint(1, static_cast<std::uint64_t>(d));
    t.varint(2, static_cast<std::uint64_t>(elemType)).bytes(8, name);
    return t;
}

Wire model(const Wire &graph, int opset = 17, const std::vector<std::pair<std::string, int>> &domains = {})
{
    Wire opsetId;
    opsetId.bytes(1, "").varint(2, static_cast<std::uint64_t>(opset));
    Wire m;
    m.varint(1, 8).message(8, opsetId);
    for (const auto &[domain, version] : domains) {
        Wire o;
        o.bytes(1, domain).varint(2, static_cast<std::uint64_t>(version));
        m.message(8, o);
    }
    return m.message(7, graph);
}

// x[2,3] -> Relu -> y: the smallest valid model, varied by the bad cases.
Wire reluGraph(const std::string &inputName = "x")
{
    Wire g;
    g.message(1, node("Relu", "act/Relu", {inputName}, {"y"}))
        .bytes(2, "tiny")
        .message(11, valueInfo("x", kFloat, {2, 3}))
        .message(12, valueInfo("y", kFloat, {2, 3}));
    return g;
}

// AttributeProto: name 1, f 2, i 3, ints 8, type 20 (FLOAT 1, INT 2, INTS 7).
Wire intAttribute(const std::string &name, std::int64_t v)
{
    Wire a;
    a.bytes(1, name).varint(20, 2).varint(3, static_cast<std::uint64_t>(v));
    return a;
}

Wire constantInts(const std::string &output, const std::vector<std::int64_t> &values)
{
    Wire a;
    a.bytes(1, "value_ints").varint(20, 7);
    for (auto v : values)
        a.varint(8, static_cast<std::uint64_t>(v));
    return node("Constant", output + "/Constant", {}, {output}).message(5, a);
}

Wire constantFloat(const std::string &output, float value)
{
    Wire a;
    a.bytes(1, "value_float").varint(20, 1).fixed32(2, value);
    return node("Constant", output + "/Constant", {}, {output}).message(5, a);
}

// x[4, 6, 24] reshaped to [4, 6, a mod b, last] and scaled by 1/sqrt(24),
// both computed from x's Shape the way torch.onnx exports
// nn.MultiheadAttention: the target by Slice up to a Mod and Concat, the
// scale by Slice -> Cast -> Sqrt -> Div.
Wire shapeArithmeticGraph(std::int64_t a, std::int64_t b, bool fmod, std::int64_t last)
{
    Wire g;
    g.message(1, node("Shape", "attn/Shape", {"x"}, {"shape"}))
        .message(1, constantInts("a", {a}))
        .message(1, constantInts("b", {b}))
        .message(1, node("Mod", "attn/Mod", {"a", "b"}, {"m"}).message(5, intAttribute("fmod", fmod)))
        .message(1, constantInts("zero", {0}))
        .message(1, constantInts("two", {2}))
        .message(1, node("Slice", "attn/Slice", {"shape", "zero", "two"}, {"lead"}))
        .message(1, constantInts("last", {last}))
        .message(1, node("Concat", "attn/Concat", {"lead", "m", "last"}, {"target"}).message(5, intAttribute("axis", 0)))
        .message(1, node("Reshape", "attn/Reshape", {"x", "target"}, {"y"}))
        .message(1, constantInts("minus1", {-1}))
        .message(1, constantInts("end", {std::numeric_limits<std::int64_t>::max()}))
        .message(1, node("Slice", "attn/Slice_1", {"shape", "minus1", "end"}, {"width"}))
        .message(1, node("Cast", "attn/Cast", {"width"}, {"widthf"}).message(5, intAttribute("to", kFloat)))
        .message(1, node("Sqrt", "attn/Sqrt", {"widthf"}, {"root"}))
        .message(1, constantFloat("one", 1.0f))
        .message(1, node("Div", "attn/Div", {"one", "root"}, {"scale"}))
        .message(1, node("Mul", "attn/Mul", {"y", "scale"}, {"z"}))
        .bytes(2, "attention")
        .message(11, valueInfo("x", kFloat, {4, 6, 24}));
    Wire out;
    out.bytes(1, "z");
    return g.message(12, out);
}

void writeBytes(const std::string &path, const std::string &bytes)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// A MatMul model whose weight W[rows, cols] (float) lies inline in the
// file. The weight bytes are zeros: written out, or left as a hole of a
// sparse file when `sparse`, which makes a file over 2 GB cheap to have.
void writeLargeModel(const std::string &path, std::int64_t rows, std::int64_t cols, bool sparse)
{
    const std::uint64_t dataBytes = static_cast<std::uint64_t>(rows * cols * 4);
    const Wire head = tensorHeader("W", kFloat, {rows, cols});
    Wire dataHeader;
    dataHeader.header(9, dataBytes);
    Wire initializerHeader;
    initializerHeader.header(5, head.str().size() + dataHeader.str().size() + dataBytes);
    Wire before;
    before.message(1, node("MatMul", "proj/MatMul", {"x", "W"}, {"y"})).bytes(2, "large");
    Wire after;
    after.message(11, valueInfo("x", kFloat, {"batch", rows})).message(12, valueInfo("y", kFloat, {"batch", cols}));
    const std::uint64_t graphBytes = before.str().size() + initializerHeader.str().size() + head.str().size() +
                                     dataHeader.str().size() + dataBytes + after.str().size();
    Wire opsetId;
    opsetId.bytes(1, "").varint(2, 17);
    Wire top;
    top.varint(1, 8).message(8, opsetId).header(7, graphBytes);

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << top.str() << before.str() << initializerHeader.str() << head.str() << dataHeader.str();
    if (sparse) {
        out.seekp(static_cast<std::streamoff>(dataBytes), std::ios::cur);
    } else {
        const std::string zeros(1 << 20, '\0');
        for (std::uint64_t left = dataBytes; left > 0;) {
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, zeros.size()));
            out.write(zeros.data(), static_cast<std::streamsize>(n));
            left -= n;
        }
    }
    out << after.str();
}

struct Measured {
    bool ok = false;
    long peakKb = 0;
    double seconds = 0;
    std::string shapes;
};

// Loads `path` in a forked child, so the peak resident memory read from
// /proc/self/status (VmHWM) is the loader's and not the test's history.
Measured loadInChild(const std::string &path)
{
    int fds[2];
    if (::pipe(fds) != 0)
        return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        std::string report = "fail";
        try {
            // CPU time, not wall time: a busy machine must not fail the test.
            const auto cpuSeconds = [] {
                timespec t {};
                ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
                return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
            };
            const double start = cpuSeconds();
            io::LoadOptions options;
            options.batch = 4;
            const auto g = io::loadOnnx(path, options);
            const double s = cpuSeconds() - start;
            long hwm = 0;
            std::ifstream status("/proc/self/status");
            for (std::string line; std::getline(status, line);)
                if (line.rfind("VmHWM:", 0) == 0)
                    hwm = std::stol(line.substr(6));
            report = "ok " + std::to_string(hwm) + " " + std::to_string(s) + " " +
                     ir::shapeToString(g.tensor(*g.findTensor("W")).shape) +
                     ir::shapeToString(g.tensor(*g.findTensor("y")).shape);
        } catch (const std::exception &e) {
            report = std::string("fail ") + e.what();
        }
        (void)!::write(fds[1], report.data(), report.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string report;
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
        report.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    Measured m;
    char shapes[256] = {};
    if (std::sscanf(report.c_str(), "ok %ld %lf %255[^\n]", &m.peakKb, &m.seconds, shapes) == 3) {
        m.ok = true;
        m.shapes = shapes;
    } else {
        m.shapes = report;
    }
    return m;
}

std::string loadError(const std::string &path, const io::LoadOptions &options = {})
{
    try {
        io::loadModel(path, options);
    } catch (const TapestryError &e) {
        return e.what();
    }
    return "(loaded without error)";
}

nlohmann::json expected()
{
    std::ifstream in(kSamples + "expected.json");
    return nlohmann::json::parse(in);
}

} // namespace

class TestOnnx : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void samplesMatchExpected_data()
    {
        QTest::addColumn<int>("index");
        const auto samples = expected()["samples"];
        QVERIFY(samples.size() >= 4);
        for (std::size_t i = 0; i < samples.size(); ++i)
            QTest::newRow(samples[i]["note"].get<std::string>().c_str()) << static_cast<int>(i);
    }

    void samplesMatchExpected()
    {
        QFETCH(int, index);
        const auto s = expected()["samples"][static_cast<std::size_t>(index)];
        // The export's own ops and names, as export.py counts them: fused
        // projections as exported (tst_fusedprojections checks them
        // stacked), folded weights under the names the export gave them.
        io::LoadOptions options;
        options.stackFusedProjections = false;
        options.nameFoldedWeights = false;
        if (s["options"].contains("batch"))
            options.batch = s["options"]["batch"].get<std::int64_t>();
        if (s["options"].contains("seq"))
            options.seq = s["options"]["seq"].get<std::int64_t>();
        const auto g = io::loadModel(kSamples + s["file"].get<std::string>(), options);

        std::map<std::string, int> counts;
        for (const auto &op : g.ops())
            ++counts[op.type];
        QCOMPARE(counts, (s["op_counts"].get<std::map<std::string, int>>()));
        QCOMPARE(g.opCount(), s["ops"].get<std::size_t>());
        QCOMPARE(g.parameterCount(), s["parameters"].get<std::int64_t>());
        QCOMPARE(g.tensorsWithRole(ir::Role::Parameter).size(), s["parameter_tensors"].get<std::size_t>());
        // The parameters are torch's: constants (scalars, masks, indices)
        // are not counted as weights.
        if (!s["batch_norm_folded"].get<bool>())
            QCOMPARE(g.parameterCount(), s["torch_parameters"].get<std::int64_t>());
        for (const auto &[name, shape] : s["shapes"].items()) {
            const auto id = g.findTensor(name);
            QVERIFY2(id, name.c_str());
            QCOMPARE(ir::shapeToString(g.tensor(*id).shape), ir::shapeToString(shape.get<ir::Shape>()));
        }
    }

    // The compute graph is what is left: no Shape arithmetic or Constants,
    // a Reshape has one input and its target as the `shape` attribute, and
    // shape inputs that were cut live on as attributes.
    void shapeSubgraphsAreFolded()
    {
        const auto g = io::loadOnnx(kSamples + "transformer-encoder.onnx", {});
        for (const auto &op : g.ops()) {
            QVERIFY2(op.type != "Shape" && op.type != "Constant" && op.type != "Concat" && op.type != "Unsqueeze",
                     op.name.c_str());
            if (op.type == "Reshape") {
                QCOMPARE(op.inputs.size(), std::size_t(1));
                QCOMPARE(ir::intsAttr(op.attributes, "shape").value(), g.tensor(op.outputs[0]).shape);
            }
            if (op.type == "Slice") {
                QCOMPARE(op.inputs.size(), std::size_t(1));
                QVERIFY(ir::intsAttr(op.attributes, "starts"));
                QVERIFY(ir::intsAttr(op.attributes, "ends"));
            }
            if (op.type == "Transpose")
                QVERIFY(ir::intsAttr(op.attributes, "perm"));
        }
        const auto norm = g.findOp("/layers.0/norm1/LayerNormalization");
        QVERIFY(norm);
        QCOMPARE(g.op(*norm).scope(), (std::vector<std::string>{"layers", "0", "norm1"}));
        QVERIFY(ir::floatAttr(g.op(*norm).attributes, "epsilon"));
        // The Range of positions computes data (position ids), so it stays;
        // its bounds, computed from the input's shape, became attributes.
        const auto gpt = io::loadOnnx(kSamples + "gpt-tiny.onnx", {});
        const auto range = gpt.findOp("/Range");
        QVERIFY(range);
        QCOMPARE(gpt.op(*range).inputs.size(), std::size_t(0));
        QCOMPARE(ir::intAttr(gpt.op(*range).attributes, "limit").value(), std::int64_t(128));
    }

    // Reshape targets and factors computed from Shape ops, as torch.onnx
    // exports nn.MultiheadAttention: the Mod follows ONNX (fmod 0 takes the
    // divisor's sign, fmod 1 the dividend's), the computed target sizes the
    // Reshape, and the scale, a single element, becomes a constant tensor, so
    // only Reshape and Mul are left.
    void shapeArithmeticIsEvaluated_data()
    {
        QTest::addColumn<qint64>("a");
        QTest::addColumn<qint64>("b");
        QTest::addColumn<bool>("fmod");
        QTest::addColumn<qint64>("last");
        QTest::addColumn<QString>("shape");
        QTest::newRow("-5 mod 3 is 1") << qint64(-5) << qint64(3) << false << qint64(24) << "[4, 6, 1, 24]";
        QTest::newRow("fmod(10, -4) is 2") << qint64(10) << qint64(-4) << true << qint64(12) << "[4, 6, 2, 12]";
    }

    // ONNX 1.12 infers an Einsum's rank, not its dims; the loader takes
    // them from the equation (MaxViT's attention as torch exports it, with
    // spaces and capitals) and the op splits by its labels.
    void einsumShapesFromTheEquation()
    {
        Wire equation;
        equation.bytes(1, "equation").varint(20, 3).bytes(4, "B G H I D, B G H J D -> B G H I J");
        Wire g;
        g.message(1, node("Einsum", "attn/Einsum", {"q", "k"}, {"scores"}).message(5, equation))
            .message(1, node("Softmax", "attn/Softmax", {"scores"}, {"probs"}))
            .bytes(2, "einsum")
            .message(11, valueInfo("q", kFloat, {2, 16, 4, 49, 32}))
            .message(11, valueInfo("k", kFloat, {2, 16, 4, 49, 32}));
        Wire out;
        out.bytes(1, "probs");
        g.message(12, out);
        const std::string path = m_dir.filePath("einsum.onnx").toStdString();
        writeBytes(path, model(g).str());
        const auto graph = io::loadOnnx(path, {});
        QCOMPARE(graph.tensor(*graph.findTensor("scores")).shape, (ir::Shape{2, 16, 4, 49, 49}));
        const auto rule = sharding::opRule(graph, graph.op(*graph.findOp("attn/Einsum")));
        QVERIFY(rule);
        QCOMPARE(rule->toString(), std::string("abcde,abcfe->abcdf"));
    }

    void shapeArithmeticIsEvaluated()
    {
        QFETCH(qint64, a);
        QFETCH(qint64, b);
        QFETCH(bool, fmod);
        QFETCH(qint64, last);
        QFETCH(QString, shape);
        const std::string path = m_dir.filePath("arithmetic.onnx").toStdString();
        writeBytes(path, model(shapeArithmeticGraph(a, b, fmod, last)).str());
        const auto g = io::loadOnnx(path, {});
        QCOMPARE(g.opCount(), std::size_t(2));
        QCOMPARE(QString::fromStdString(ir::shapeToString(g.tensor(*g.findTensor("y")).shape)), shape);
        const auto reshape = g.findOp("attn/Reshape");
        QVERIFY(reshape);
        QCOMPARE(g.op(*reshape).inputs.size(), std::size_t(1));
        const auto mul = g.findOp("attn/Mul");
        QVERIFY(mul);
        const ir::Tensor &scale = g.tensor(g.op(*mul).inputs[1]);
        QCOMPARE(scale.name, std::string("scale"));
        // A constant, not a weight: no gradient, nothing to all-reduce.
        QVERIFY(scale.role == ir::Role::Input);
        QCOMPARE(scale.shape, ir::Shape{1});
        QCOMPARE(g.parameterCount(), std::int64_t(0));
    }

    // torch.onnx merges parameters that hold equal values into one
    // initializer read through Identity nodes; each alias is a parameter of
    // its own again.
    void identityAliasesAreParameters()
    {
        Wire g;
        g.message(1, node("MatMul", "fc1/MatMul", {"x", "W"}, {"h"}))
            .message(1, node("Identity", "Identity_0", {"W"}, {"fc2.weight"}))
            .message(1, node("MatMul", "fc2/MatMul", {"h", "fc2.weight"}, {"y"}))
            .bytes(2, "aliases")
            .message(5, tensorHeader("W", kFloat, {4, 4}))
            .message(11, valueInfo("x", kFloat, {2, 4}))
            .message(12, valueInfo("y", kFloat, {2, 4}));
        const std::string path = m_dir.filePath("aliases.onnx").toStdString();
        writeBytes(path, model(g).str());
        const auto graph = io::loadOnnx(path, {});
        QCOMPARE(graph.opCount(), std::size_t(2));
        for (const char *name : {"W", "fc2.weight"}) {
            const auto t = graph.findTensor(name);
            QVERIFY2(t, name);
            QVERIFY(graph.tensor(*t).role == ir::Role::Parameter);
            QCOMPARE(graph.tensor(*t).shape, (ir::Shape{4, 4}));
        }
        QCOMPARE(graph.parameterCount(), std::int64_t(32));
    }

    // --batch or --seq on an export with fixed shapes would be ignored and
    // the plan made for another size than asked: one line says why not.
    void optionWithoutSymbolicDimIsRefused_data()
    {
        QTest::addColumn<bool>("batch");
        QTest::addColumn<QString>("message");
        QTest::newRow("--batch") << true
                                 << "transformer-2x3.onnx: --batch: the model's inputs have no symbolic batch dim "
                                    "to bind (src [8, 16, 32], tgt [8, 8, 32]); export it with a dynamic batch axis";
        QTest::newRow("--seq") << false << "transformer-2x3.onnx: --seq: the model's inputs have no symbolic sequence dim";
    }
    void optionWithoutSymbolicDimIsRefused()
    {
        QFETCH(bool, batch);
        QFETCH(QString, message);
        io::LoadOptions options;
        (batch ? options.batch : options.seq) = 4;
        try {
            io::loadModel(kSamples + "transformer-2x3.onnx", options);
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString(e.what()).contains(message), e.what());
        }
    }

    // torchvision's ResNet-18 exported in training mode (export_vision.py):
    // BatchNormalization stays, with its running mean and variance, which
    // the step updates but does not train; the count is torch's.
    void batchNormStatisticsAreBuffers()
    {
        const auto g = io::loadModel(kSamples + "resnet18-train-shapes.onnx", {});
        QCOMPARE(g.parameterCount(), std::int64_t(11'689'512));
        int norms = 0;
        for (const auto &op : g.ops()) {
            if (op.type != "BatchNormalization")
                continue;
            ++norms;
            QVERIFY(op.inputs.size() >= 5);
            for (std::size_t slot = 1; slot < 5; ++slot)
                QVERIFY2(g.tensor(op.inputs[slot]).role == (slot < 3 ? ir::Role::Parameter : ir::Role::Input),
                         g.tensor(op.inputs[slot]).name.c_str());
        }
        QCOMPARE(norms, 20);
    }

    // torchvision's Swin-T (export_swin.py, torch 1.13, opset 14): each
    // shifted-window attention pads its input to whole windows with pads
    // torch computes as a [k, 2] tensor reversed by a Slice of step -1 and
    // transposed; the loader evaluates that chain and sizes the Pad. The
    // relative position biases constant folding gathered from their tables
    // (onnx::Add_N, [1, heads, 49, 49], read by the scores' Add) are
    // constants, not weights: no gradient, not counted.
    void swinPadsAndFoldedBiases()
    {
        const auto g = io::loadModel(kSamples + "swin-t-shapes.onnx", {});
        int pads = 0, biases = 0;
        for (const auto &op : g.ops()) {
            if (op.type == "Pad") {
                ++pads;
                const auto &out = g.tensor(op.outputs[0]).shape;
                // [b, h, w, c] in whole 7x7 windows (56, 28, 14, 7)
                QVERIFY2(out.size() == 4 && out[1] % 7 == 0 && out[2] % 7 == 0, op.name.c_str());
            }
            for (ir::TensorId t : op.inputs) {
                const auto &tensor = g.tensor(t);
                if (tensor.name.starts_with("onnx::Add_") && tensor.shape.size() == 4) {
                    ++biases;
                    QCOMPARE(tensor.shape[2], std::int64_t(49));
                    QVERIFY2(tensor.role == ir::Role::Input, tensor.name.c_str());
                }
            }
        }
        QCOMPARE(pads, 12 + 3);  // one per block, and per patch merging (to even sizes)
        QCOMPARE(biases, 12);  // one per block's attention
        QCOMPARE(g.parameterCount(), std::int64_t(28'265'032));
    }

    // torch folds the transpose of an nn.Linear weight into an initializer
    // named onnx::MatMul_N; the loader names it after its module again (its
    // bias's name with "weight" for "bias", else the op's scope), so that
    // plans and exports name the module a training script splits.
    void foldedWeightsTakeTheirModulesNames_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("op");
        QTest::addColumn<QString>("weight");
        QTest::newRow("nn.Linear") << "transformer-encoder.onnx" << "/layers.2/linear1/MatMul" << "layers.2.linear1.weight";
        QTest::newRow("MultiheadAttention in_proj")
            << "transformer-encoder.onnx" << "/layers.0/self_attn/MatMul" << "layers.0.self_attn.in_proj_weight";
        QTest::newRow("GPT-2 Conv1D") << "gpt-tiny.onnx" << "/h.1/mlp/c_fc/MatMul" << "h.1.mlp.c_fc.weight";
        QTest::newRow("GPT-2 fused c_attn") << "gpt-tiny.onnx" << "/h.3/attn/c_attn/MatMul" << "h.3.attn.c_attn.weight";
    }
    void foldedWeightsTakeTheirModulesNames()
    {
        QFETCH(QString, file);
        QFETCH(QString, op);
        QFETCH(QString, weight);
        QStringList notes;
        io::LoadOptions options;
        options.note = [&](const std::string &line) { notes << QString::fromStdString(line); };
        const auto g = io::loadModel(kSamples + file.toStdString(), options);
        const auto id = g.findOp(op.toStdString());
        QVERIFY(id);
        QCOMPARE(QString::fromStdString(g.tensor(g.op(*id).inputs[1]).name), weight);
        for (const auto &t : g.tensorsWithRole(ir::Role::Parameter))
            QVERIFY2(!g.tensor(t).name.starts_with("onnx::"), g.tensor(t).name.c_str());
        QVERIFY(std::any_of(notes.begin(), notes.end(),
                            [](const QString &n) { return n.contains("given their modules' names"); }));
    }

    // A model exported without its weights (torch.onnx.export(...,
    // export_params=False), export_weightless.py): every parameter is a
    // graph input. The inputs read as weights are taken as parameters, the
    // loader says so once, and the count is torch's trainable parameters;
    // the model's own input stays an input.
    void weightInputsAreParameters()
    {
        QStringList notes;
        io::LoadOptions options;
        options.note = [&](const std::string &line) { notes << QString::fromStdString(line); };
        const auto g = io::loadModel(kSamples + "encoder-weightless.onnx", options);
        QCOMPARE(g.parameterCount(), std::int64_t(66'944));
        const auto src = g.findTensor("src");
        QVERIFY(src);
        QVERIFY(g.tensor(*src).role == ir::Role::Input);
        const auto weightNotes = notes.filter(QStringLiteral("read only as weights"));
        QCOMPARE(weightNotes.size(), 1);
        QVERIFY2(weightNotes[0].contains("taken as parameters"), qPrintable(weightNotes[0]));
        // The same kind of model with its weights in the file says nothing
        // of weights (only that its in_proj is held stacked).
        notes.clear();
        io::loadModel(kSamples + "transformer-encoder.onnx", options);
        for (const auto &note : notes)
            QVERIFY2(!note.contains("read only as weights"), qPrintable(note));
    }

    // torch.nn.Transformer as PyTorch 2.6 exports it (export_transformer.py):
    // every reshape target comes from Shape arithmetic, the attention scale
    // from a Shape, and fresh parameters are merged through Identity nodes.
    // What loads is the compute graph with concrete shapes and torch's own
    // parameters, each under its module name.
    void transformerExportLoads()
    {
        const auto g = io::loadOnnx(kSamples + "transformer-2x3.onnx", {});
        for (const auto &t : g.tensors())
            for (auto d : t.shape)
                QVERIFY2(d > 0, t.name.c_str());
        const std::set<std::string> compute{"Add",  "Gather",  "Gemm",    "LayerNormalization", "MatMul",   "Mul",
                                            "Relu", "Reshape", "Softmax", "Squeeze",            "Transpose", "Unsqueeze"};
        for (const auto &op : g.ops())
            QVERIFY2(compute.count(op.type), (op.type + " " + op.name).c_str());
        // d_model 32, ffn 64: an encoder layer holds attention (4·32² + 4·32),
        // the MLP (2·32·64 + 64 + 32) and two norms (4·32); a decoder layer
        // one more attention and norm; then two final norms. The single
        // elements computed from shapes (attention scales) are constants,
        // not weights: the count is torch's sum of numel() over parameters().
        const std::int64_t encoder = 4 * 32 * 32 + 4 * 32 + 2 * 32 * 64 + 64 + 32 + 4 * 32;
        const std::int64_t decoder = encoder + 4 * 32 * 32 + 4 * 32 + 2 * 32;
        QCOMPARE(g.parameterCount(), 2 * encoder + 3 * decoder + 2 * 2 * 32);
        for (auto t : g.tensorsWithRole(ir::Role::Parameter))
            QVERIFY2(g.tensor(t).elementCount() > 1, g.tensor(t).name.c_str());
        for (const char *name : {"t.encoder.layers.1.self_attn.in_proj_bias", "t.decoder.layers.2.norm3.weight"}) {
            const auto t = g.findTensor(name);
            QVERIFY2(t, name);
            QVERIFY(g.tensor(*t).role == ir::Role::Parameter);
        }
        const std::pair<const char *, const char *> shapes[] = {
            {"out", "[8, 8, 32]"},
            {"/t/encoder/layers.0/self_attn/Reshape_2_output_0", "[16, 8, 3, 32]"},
            {"/t/decoder/layers.2/multihead_attn/Softmax_output_0", "[8, 4, 8, 16]"},
        };
        for (const auto &[name, shape] : shapes) {
            const auto t = g.findTensor(name);
            QVERIFY2(t, name);
            QCOMPARE(ir::shapeToString(g.tensor(*t).shape), std::string(shape));
        }
    }

    void symbolicDimsBind_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("batch");  // 0: not given
        QTest::addColumn<int>("seq");
        QTest::addColumn<QString>("input");
        QTest::addColumn<QString>("shape");
        QTest::newRow("gpt defaults: batch 1, seq from metadata") << "gpt-tiny.onnx" << 0 << 0 << "idx" << "[1, 128]";
        QTest::newRow("gpt --batch 3 --seq 7") << "gpt-tiny.onnx" << 3 << 7 << "idx" << "[3, 7]";
        QTest::newRow("gpt logits follow") << "gpt-tiny.onnx" << 3 << 7 << "logits" << "[3, 7, 512]";
        QTest::newRow("encoder 'sequence'") << "transformer-encoder.onnx" << 2 << 9 << "memory" << "[2, 9, 64]";
        QTest::newRow("resnet 'N' is the batch") << "resnet18-shapes.onnx" << 5 << 0 << "logits" << "[5, 1000]";
    }

    void symbolicDimsBind()
    {
        QFETCH(QString, file);
        QFETCH(int, batch);
        QFETCH(int, seq);
        QFETCH(QString, input);
        QFETCH(QString, shape);
        io::LoadOptions options;
        if (batch)
            options.batch = batch;
        if (seq)
            options.seq = seq;
        const auto g = io::loadOnnx(kSamples + file.toStdString(), options);
        const auto id = g.findTensor(input.toStdString());
        QVERIFY(id);
        QCOMPARE(QString::fromStdString(ir::shapeToString(g.tensor(*id).shape)), shape);
    }

    void missingExternalDataIsNoError()
    {
        QVERIFY(!std::filesystem::exists(kSamples + "gpt2-external.onnx.data"));
        const auto g = io::loadOnnx(kSamples + "gpt2-external.onnx", {});
        QCOMPARE(ir::shapeToString(g.tensor(*g.findTensor("wte.weight")).shape), std::string("[50257, 768]"));
        QVERIFY(g.parameterCount() > 160'000'000);
    }

    void opaqueOpsKeepDeclaredShapes()
    {
        Wire g;
        Wire alpha;
        alpha.bytes(1, "alpha").varint(20, 2).varint(3, 7);
        Wire custom = node("FusedThing", "blk/FusedThing", {"x"}, {"z"}, "com.example");
        custom.message(5, alpha);
        g.message(1, custom)
            .message(1, node("Relu", "blk/Relu", {"z"}, {"y"}))
            .message(11, valueInfo("x", kFloat, {"batch", 3}))
            .message(12, valueInfo("y", kFloat, {"batch", 5}))
            .message(13, valueInfo("z", kFloat, {"batch", 5}));
        const std::string path = m_dir.filePath("custom.onnx").toStdString();
        writeBytes(path, model(g, 17, {{"com.example", 1}}).str());
        io::LoadOptions options;
        options.batch = 6;
        const auto graph = io::loadModel(path, options);
        const auto op = graph.findOp("blk/FusedThing");
        QVERIFY(op);
        QCOMPARE(graph.op(*op).domain, std::string("com.example"));
        QCOMPARE(ir::intAttr(graph.op(*op).attributes, "alpha").value(), std::int64_t(7));
        QCOMPARE(ir::shapeToString(graph.tensor(*graph.findTensor("y")).shape), std::string("[6, 5]"));
    }

    void unnamedNodesGetNames()
    {
        Wire g;
        g.message(1, node("Relu", "", {"x"}, {"h"}))
            .message(1, node("Relu", "", {"h"}, {"y"}))
            .message(11, valueInfo("x", kFloat, {2, 3}))
            .message(12, valueInfo("y", kFloat, {2, 3}));
        const std::string path = m_dir.filePath("unnamed.onnx").toStdString();
        writeBytes(path, model(g).str());
        const auto graph = io::loadOnnx(path, {});
        QCOMPARE(graph.op(ir::OpId(0)).name, std::string("Relu_0"));
        QCOMPARE(graph.op(ir::OpId(1)).name, std::string("Relu_1"));
    }

    // Memory and time stay proportional to the graph, not to the file: the
    // weight bytes are never read.
    void largeInlineWeightsLoadCheaply_data()
    {
        QTest::addColumn<qint64>("rows");
        QTest::addColumn<qint64>("cols");
        QTest::addColumn<bool>("sparse");
        QTest::newRow("1 GiB written out") << qint64(16384) << qint64(16384) << false;
        QTest::newRow("3 GiB, over protobuf's 2 GB limit") << qint64(32768) << qint64(24576) << true;
    }

    void largeInlineWeightsLoadCheaply()
    {
        QFETCH(qint64, rows);
        QFETCH(qint64, cols);
        QFETCH(bool, sparse);
        const std::string path = m_dir.filePath("large.onnx").toStdString();
        writeLargeModel(path, rows, cols, sparse);
        QVERIFY(std::filesystem::file_size(path) > static_cast<std::uintmax_t>(rows * cols * 4));
        const Measured m = loadInChild(path);
        std::filesystem::remove(path);
        QVERIFY2(m.ok, m.shapes.c_str());
        qInfo("%lld x %lld float weight: loaded in %.2f ms of CPU time, peak memory %.1f MB", static_cast<long long>(rows),
              static_cast<long long>(cols), m.seconds * 1000.0, static_cast<double>(m.peakKb) / 1024.0);
        QCOMPARE(QString::fromStdString(m.shapes), QStringLiteral("[%1, %2][4, %2]").arg(rows).arg(cols));
        QVERIFY(m.peakKb < 200 * 1024);
        QVERIFY(m.seconds < 1.0);
    }

    void badInputIsOneClearError_data()
    {
        QTest::addColumn<QString>("name");
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("problem");

        QTest::newRow("not onnx") << "text.onnx" << QByteArray("this is a text file, not a model\n")
                                  << "not an ONNX model";
        QTest::newRow("empty") << "empty.onnx" << QByteArray() << "not an ONNX model (no graph found";
        {
            std::ifstream in(kSamples + "gpt-tiny.onnx", std::ios::binary);
            std::string whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            QTest::newRow("truncated") << "truncated.onnx" << QByteArray::fromStdString(whole.substr(0, whole.size() / 2))
                                       << "file is truncated";
        }
        auto add = [](const char *row, const char *name, const Wire &m, const char *problem) {
            QTest::newRow(row) << name << QByteArray::fromStdString(m.str()) << problem;
        };
        {
            Wire g;
            g.message(1, node("Relu", "a/Relu", {"b"}, {"a"}))
                .message(1, node("Relu", "b/Relu", {"a"}, {"b"}))
                .message(12, valueInfo("a", kFloat, {2}));
            add("cycle", "cycle.onnx", model(g), "node 'a/Relu' (Relu): is part of a cycle");
        }
        add("dangling input", "dangling.onnx", model(reluGraph("ghost")),
            "node 'act/Relu' (Relu): reads 'ghost', which no node, graph input or initializer produces");
        add("opset 9", "opset9.onnx", model(reluGraph(), 9), "opset 9 is outside the supported range 11..17");
        add("opset 18", "opset18.onnx", model(reluGraph(), 18), "opset 18 is outside the supported range 11..17");
        {
            Wire g;
            g.message(1, node("MatMul", "proj/MatMul", {"x", "w"}, {"y"}))
                .message(11, valueInfo("x", kFloat, {2, 3}))
                .message(11, valueInfo("w", kFloat, {4, 5}))
                .message(12, valueInfo("y", kFloat, {2, 5}));
            add("shape inference failure", "matmul.onnx", model(g),
                "node 'proj/MatMul' (MatMul): shape inference failed");
        }
        {
            Wire g;
            g.message(1, node("Relu", "act/Relu", {"x"}, {"y"}))
                .message(11, valueInfo("x", kFloat, {"heads", 3}))
                .message(12, valueInfo("y", kFloat, {"heads", 3}));
            add("unbound symbolic dim", "heads.onnx", model(g), "input 'x': symbolic dim 'heads' is not bound");
        }
        {
            Wire g;
            g.message(1, node("Relu", "act/Relu", {"x"}, {"y"}))
                .message(11, valueInfo("x", kFloat, {"batch", "seq_len"}))
                .message(12, valueInfo("y", kFloat, {"batch", "seq_len"}));
            add("sequence without a maximum", "seq.onnx", model(g),
                "input 'x': symbolic dim 'seq_len' is the sequence length and the model records no maximum: "
                "pass --seq");
        }
        {
            Wire g;
            g.message(1, node("FusedThing", "blk/FusedThing", {"x"}, {"y"}, "com.example"))
                .message(11, valueInfo("x", kFloat, {2, 3}));
            Wire out;
            out.bytes(1, "y");
            g.message(12, out);
            add("custom op without declared shape", "custom.onnx", model(g, 17, {{"com.example", 1}}),
                "tensor 'y' (output of node 'blk/FusedThing' (FusedThing)): has no shape");
        }
        {
            Wire g;
            Wire sparse;
            sparse.message(1, tensorHeader("s", kFloat, {4}));
            g.message(1, node("Relu", "act/Relu", {"x"}, {"y"}))
                .message(15, sparse)
                .message(11, valueInfo("x", kFloat, {2}))
                .message(12, valueInfo("y", kFloat, {2}));
            add("sparse initializer", "sparse.onnx", model(g), "sparse initializers are not supported");
        }
        {
            Wire g;
            Wire bad;
            bad.bytes(1, "axis").varint(20, 2).varint(3, 5);
            Wire softmax = node("Softmax", "head/Softmax", {"x"}, {"y"});
            softmax.message(5, bad);
            g.message(1, softmax).message(11, valueInfo("x", kFloat, {2, 3})).message(12, valueInfo("y", kFloat, {2, 3}));
            add("attribute out of range", "softmax.onnx", model(g), "node 'head/Softmax' (Softmax)");
        }
        // A Reshape target computed from shapes that cannot be had, or that
        // does not fit the data.
        add("reshape target with a mod by zero", "modzero.onnx", model(shapeArithmeticGraph(5, 0, false, 24)),
            "tensor 'y' (output of node 'attn/Reshape' (Reshape)): has no shape: its shape input 'target' is not "
            "known at load time (node 'attn/Mod' (Mod) cannot be evaluated)");
        {
            Wire g;
            g.message(1, node("Shape", "Shape", {"ids"}, {"shape"}))
                .message(1, node("Mul", "Mul", {"shape", "n"}, {"target"}))
                .message(1, node("Reshape", "view/Reshape", {"x", "target"}, {"y"}))
                .message(11, valueInfo("x", kFloat, {4, 6}))
                .message(11, valueInfo("ids", kInt64, {2}))
                .message(11, valueInfo("n", kInt64, {1}));
            Wire out;
            out.bytes(1, "y");
            g.message(12, out);
            add("reshape target from input data", "runtime.onnx", model(g),
                "tensor 'y' (output of node 'view/Reshape' (Reshape)): has no shape: its shape input 'target' "
                "is not known at load time (it depends on the values of 'n')");
        }
        add("computed reshape target that does not fit", "misfit.onnx", model(shapeArithmeticGraph(-5, 3, false, 5)),
            "op 'attn/Reshape' (Reshape): Reshape from [4, 6, 24] to [4, 6, 1, 5] changes the element count");
        {
            // ONNX's own shape function would divide by the zero stride.
            Wire g;
            Wire strides;
            strides.bytes(1, "strides").varint(20, 7).varint(8, 0).varint(8, 1);
            Wire conv = node("Conv", "stem/Conv", {"x", "w"}, {"y"});
            conv.message(5, strides);
            g.message(1, conv)
                .message(11, valueInfo("x", kFloat, {1, 3, 8, 8}))
                .message(11, valueInfo("w", kFloat, {4, 3, 3, 3}))
                .message(12, valueInfo("y", kFloat, {1, 4, 6, 6}));
            add("zero stride", "stride.onnx", model(g),
                "node 'stem/Conv' (Conv): attribute strides holds 0; every entry must be at least 1");
        }
        {
            // ONNX's own shape function would index a dim with it.
            Wire g;
            Wire axis;
            axis.bytes(1, "axis").varint(20, 2).varint(3, static_cast<std::uint64_t>(std::int64_t{-7}));
            Wire norm = node("LayerNormalization", "ln/LayerNorm", {"x", "scale"}, {"y"});
            norm.message(5, axis);
            g.message(1, norm)
                .message(11, valueInfo("x", kFloat, {5, 4}))
                .message(11, valueInfo("scale", kFloat, {4}))
                .message(12, valueInfo("y", kFloat, {5, 4}));
            add("axis out of rank", "lnaxis.onnx", model(g),
                "node 'ln/LayerNorm' (LayerNormalization): attribute axis is -7, outside -2..1 for an input of rank 2");
        }
    }

    void badInputIsOneClearError()
    {
        QFETCH(QString, name);
        QFETCH(QByteArray, bytes);
        QFETCH(QString, problem);
        const std::string path = m_dir.filePath(name).toStdString();
        writeBytes(path, bytes.toStdString());

        const std::string message = loadError(path);
        QVERIFY2(message.rfind(path + ": ", 0) == 0, message.c_str());
        QVERIFY2(message.find(problem.toStdString()) != std::string::npos, message.c_str());
        QVERIFY2(message.find('\n') == std::string::npos, message.c_str());

        QProcess cli;
        cli.start(QStringLiteral(TAPESTRY_CLI), {QStringLiteral("inspect"), QString::fromStdString(path)});
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitStatus(), QProcess::NormalExit);
        QCOMPARE(cli.exitCode(), 2);
        const QByteArray err = cli.readAllStandardError();
        QCOMPARE(err.count('\n'), 1);
        QVERIFY2(err.contains(problem.toUtf8()), err.constData());
        QVERIFY(cli.readAllStandardOutput().isEmpty());
    }

    void missingFileIsAnError()
    {
        const std::string message = loadError(m_dir.filePath("absent.onnx").toStdString());
        QVERIFY2(message.find("absent.onnx: cannot open file") != std::string::npos, message.c_str());
    }

    void cliInspectsSamples_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("ops");
        QTest::addColumn<qint64>("parameters");
        const auto samples = expected()["samples"];
        for (const auto &s : samples) {
            // The ops as the library loads them, fused projections stacked.
            io::LoadOptions options;
            for (const char *k : {"batch", "seq"})
                if (s["options"].contains(k))
                    (std::string(k) == "batch" ? options.batch : options.seq) = s["options"][k].get<std::int64_t>();
            const int ops = static_cast<int>(io::loadModel(kSamples + s["file"].get<std::string>(), options).opCount());
            QStringList args{QStringLiteral("inspect"), QString::fromStdString(kSamples + s["file"].get<std::string>()),
                             QStringLiteral("--json")};
            for (const char *k : {"batch", "seq"})
                if (s["options"].contains(k))
                    args << QStringLiteral("--%1").arg(QLatin1String(k))
                         << QString::number(s["options"][k].get<int>());
            QTest::newRow(s["note"].get<std::string>().c_str())
                << args << ops << s["parameters"].get<qint64>();
        }
    }

    void cliInspectsSamples()
    {
        QFETCH(QStringList, args);
        QFETCH(int, ops);
        QFETCH(qint64, parameters);
        QProcess cli;
        cli.start(QStringLiteral(TAPESTRY_CLI), args);
        QVERIFY(cli.waitForFinished(60000));
        QCOMPARE(cli.exitCode(), 0);
        const auto out = nlohmann::json::parse(cli.readAllStandardOutput().toStdString());
        QCOMPARE(out["ops"].get<int>(), ops);
        QCOMPARE(out["parameters"].get<qint64>(), parameters);
        QVERIFY(out["opaque_ops"].empty());
    }

private:
    QTemporaryDir m_dir;
};

QTEST_APPLESS_MAIN(TestOnnx)
#include "tst_onnx.moc"
