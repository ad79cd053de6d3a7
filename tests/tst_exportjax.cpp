#include "exporttesting.h"
#include "io/modelloader.h"
#include "export/exportaxis.h"
#include "export/exportjax.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"
#include "sharding/strategy.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <sstream>

using namespace tapestry;

namespace {

const char *kLlama = "zoo:llama3-8b?layers=2&batch=8&seq=64&hidden=256&heads=8&kv_heads=4&ffn=512&vocab=1024";
const char *kGpt = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&ffn=256&vocab=256&positions=128";

// Reference plans: deterministic, so that the golden files change only
// when the export (or the model) does.
plan::Plan referencePlan(const ir::Graph &g, const std::string &source, const std::string &shape, bool sequenceParallel)
{
    return testing::exportPlan(g, source, shape, sequenceParallel ? "megatron-sp" : "megatron");
}

std::string readFile(const std::string &path)
{
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

void writeFile(const QString &path, const std::string &text)
{
    std::ofstream(path.toStdString()) << text;
}

struct Run {
    int code;
    QString out;
};

Run runPython(const QStringList &args, const QString &pythonPath = {})
{
    QProcess p;
    if (!pythonPath.isEmpty()) {
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("PYTHONPATH"), pythonPath);
        p.setProcessEnvironment(env);
    }
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral("python3"), args);
    p.waitForFinished(60000);
    return {p.exitCode(), QString::fromUtf8(p.readAll())};
}

// Stand-ins for jax and numpy (neither is installed here) with what the
// exported module calls: they record the meshes, shardings and constraints
// it makes, so that its Python runs.
const char *kJaxStub = R"PY(import types

constrained = []


def devices():
    return [f"device{i}" for i in range(8)]


def _with_sharding_constraint(x, sharding):
    constrained.append((x, sharding))
    return x


lax = types.SimpleNamespace(with_sharding_constraint=_with_sharding_constraint)
)PY";

const char *kShardingStub = R"PY(class Mesh:
    def __init__(self, devices, axis_names):
        self.devices, self.axis_names = devices, tuple(axis_names)


class PartitionSpec(tuple):
    def __new__(cls, *dims):
        return tuple.__new__(cls, dims)


class NamedSharding:
    def __init__(self, mesh, spec):
        self.mesh, self.spec = mesh, spec
)PY";

const char *kNumpyStub = R"PY(import math


def prod(shape):
    return math.prod(shape)


class _Grid(list):
    def reshape(self, shape):
        rows = list(self)
        for size in reversed(shape[1:]):
            rows = [rows[i:i + size] for i in range(0, len(rows), size)]
        return rows


def empty(count, dtype=None):
    return _Grid([None] * count)
)PY";

// Builds the Flax parameter tree the module describes (under "params", as
// flax.linen's init returns it), applies param_shardings, and checks each
// leaf, the refusals and the activation constraints.
const char *kDriver = R"PY(import math
import sys
import types

import jax
import plan

count = math.prod(plan.mesh_shape)
mesh = plan.make_mesh(jax.devices()[:count])
if count == len(jax.devices()):
    assert plan.make_mesh().axis_names == mesh.axis_names
assert mesh.axis_names == plan.mesh_axis_names, mesh.axis_names
assert len(mesh.devices) == plan.mesh_shape[0] and len(mesh.devices[0]) == plan.mesh_shape[1]
assert mesh.devices[1][0] == f"device{plan.mesh_shape[1]}", mesh.devices  # row-major
try:
    plan.make_mesh(jax.devices()[:3])
    raise SystemExit("3 devices accepted")
except ValueError:
    pass

tree = {}
for name, path in plan.flax_paths.items():
    node = tree
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = types.SimpleNamespace(shape=plan.param_shapes[name])
shardings = plan.param_shardings({"params": tree}, mesh)
for name, path in plan.flax_paths.items():
    leaf = shardings["params"]
    for key in path:
        leaf = leaf[key]
    assert leaf.spec == plan.partition_specs[name], (name, leaf.spec)
    assert leaf.mesh is mesh

extra = dict(tree, extra={"kernel": types.SimpleNamespace(shape=(2, 2))})
try:
    plan.param_shardings(extra, mesh)
    raise SystemExit("an unknown leaf accepted")
except KeyError as e:
    assert "extra/kernel" in str(e), e
assert plan.param_shardings(extra, mesh, strict=False)["extra"]["kernel"].spec == ()

first = next(iter(plan.flax_paths))
path = plan.flax_paths[first]
node = tree
for key in path[:-1]:
    node = node[key]
node[path[-1]] = types.SimpleNamespace(shape=(1,))
try:
    plan.param_shardings(tree, mesh)
    raise SystemExit("a wrong shape accepted")
except ValueError as e:
    assert "/".join(path) in str(e), e

layer = sys.argv[1]
x = object()
assert plan.constrain(x, layer, mesh) is x
assert jax.constrained[-1][1].spec == plan.activation_spec(layer)
try:
    plan.activation_spec("nowhere:input")
    raise SystemExit("an unknown activation accepted")
except KeyError:
    pass
print("ok")
)PY";

} // namespace

class TestExportJax : public QObject {
    Q_OBJECT

private slots:
    // The whole module, compared with tests/golden/; TAPESTRY_UPDATE_GOLDEN=1
    // writes it there instead (review the diff before committing it).
    void golden_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::addColumn<bool>("sequenceParallel");
        QTest::addColumn<QString>("file");
        QTest::newRow("llama megatron-sp 2x4") << kLlama << "2x4" << true << "jax_llama_megatron_sp_2x4.py";
        QTest::newRow("gpt2 megatron 2x2") << kGpt << "2x2" << false << "jax_gpt2_megatron_2x2.py";
    }
    void golden()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        QFETCH(bool, sequenceParallel);
        QFETCH(QString, file);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto p = referencePlan(g, source, shape.toStdString(), sequenceParallel);
        const std::string text = exports::jaxPartitionSpecs(exports::exportInput(g, p, "p.json", "jax", false));
        const QString path = QStringLiteral(TAPESTRY_SOURCE_DIR "/tests/golden/") + file;
        if (qEnvironmentVariable("TAPESTRY_UPDATE_GOLDEN") == QStringLiteral("1")) {
            QVERIFY(QDir().mkpath(QFileInfo(path).path()));
            writeFile(path, text);
            qInfo("wrote %s", qPrintable(path));
            return;
        }
        QVERIFY2(QFile::exists(path), qPrintable(path + QStringLiteral(" is missing (TAPESTRY_UPDATE_GOLDEN=1 writes it)")));
        const std::string golden = readFile(path.toStdString());
        if (text == golden)
            return;
        std::istringstream a(text), b(golden);
        std::string la, lb;
        int line = 1;
        while (std::getline(a, la) && std::getline(b, lb) && la == lb)
            ++line;
        QFAIL(qPrintable(QStringLiteral("%1 differs at line %2:\n  now:    %3\n  golden: %4\n"
                                        "(TAPESTRY_UPDATE_GOLDEN=1 rewrites it)")
                             .arg(path)
                             .arg(line)
                             .arg(QString::fromStdString(la), QString::fromStdString(lb))));
    }

    // Flax paths as Hugging Face's Flax models and flax.linen hold them.
    void flaxPaths_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("parameter");
        QTest::addColumn<QString>("path");
        QTest::newRow("llama q_proj") << kLlama << "model.layers.0.self_attn.q_proj.weight"
                                      << "model/layers/0/self_attn/q_proj/kernel";
        QTest::newRow("llama embedding") << kLlama << "model.embed_tokens.weight" << "model/embed_tokens/embedding";
        QTest::newRow("llama RMSNorm") << kLlama << "model.layers.1.input_layernorm.weight"
                                       << "model/layers/1/input_layernorm/weight";
        QTest::newRow("llama lm_head") << kLlama << "lm_head.weight" << "lm_head/kernel";
        QTest::newRow("gpt2 LayerNorm scale") << kGpt << "transformer.h.0.ln_1.weight" << "transformer/h/0/ln_1/scale";
        QTest::newRow("gpt2 LayerNorm bias") << kGpt << "transformer.h.0.ln_1.bias" << "transformer/h/0/ln_1/bias";
        QTest::newRow("gpt2 linear bias") << kGpt << "transformer.h.1.mlp.c_fc.bias" << "transformer/h/1/mlp/c_fc/bias";
        QTest::newRow("gpt2 positions") << kGpt << "transformer.wpe.weight" << "transformer/wpe/embedding";
    }
    void flaxPaths()
    {
        QFETCH(QString, model);
        QFETCH(QString, parameter);
        QFETCH(QString, path);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto p = referencePlan(g, source, "2x2", false);
        const auto jax = exports::jaxPlan(exports::exportInput(g, p, "p.json", "jax", false));
        const auto it = std::find_if(jax.parameters.begin(), jax.parameters.end(),
                                     [&](const exports::JaxParameter &j) { return j.name == parameter.toStdString(); });
        QVERIFY(it != jax.parameters.end());
        QString joined;
        for (const auto &atom : it->path)
            joined += (joined.isEmpty() ? QString() : QStringLiteral("/")) + QString::fromStdString(atom);
        QCOMPARE(joined, path);
        QCOMPARE(it->shape, g.tensor(*g.findTensor(parameter.toStdString())).shape);
    }

    // The activation constraints: at each layer's boundary and its
    // attention's and MLP's, the plan's own spec of the tensor named.
    void activationConstraints()
    {
        const auto g = io::loadModel(kLlama);
        const auto p = referencePlan(g, kLlama, "2x4", true);
        const auto in = exports::exportInput(g, p, "p.json", "jax", false);
        const auto jax = exports::jaxPlan(in);
        std::map<std::string, exports::JaxConstraint> byKey;
        for (const auto &c : jax.constraints)
            byKey[c.key] = c;
        // Sequence parallelism: the residual stream between layers is split
        // over the sequence on the tensor-parallel axis, the batch on data.
        QCOMPARE(byKey["model.layers.*:input"].spec, std::string("P('data', 'model', None)"));
        QCOMPARE(byKey["model.layers.*:output"].spec, std::string("P('data', 'model', None)"));
        for (const char *key : {"model.layers.*.self_attn:input", "model.layers.*.self_attn:output",
                                "model.layers.*.mlp:input", "model.layers.*.mlp:output", "model.embed_tokens:output",
                                "lm_head:input", "lm_head:output"})
            QVERIFY2(byKey.count(key), key);
        // The logits split over the vocabulary on the tensor-parallel axis.
        QCOMPARE(byKey["lm_head:output"].spec, std::string("P('data', None, 'model')"));
        sharding::Mesh named = p.mesh;
        for (std::size_t a = 0; a < named.axes.size(); ++a)
            named.axes[a].name = in.axisNames[a];
        // Each linear reads its input as the plan computes on it: q, k, v
        // and the MLP's gate and up on the whole sequence (the plan's
        // all-gather between the sequence-sharded norm and the linears),
        // o_proj and down_proj split over the features.
        for (const char *key : {"model.layers.*.self_attn.q_proj:input", "model.layers.*.self_attn.k_proj:input",
                                "model.layers.*.self_attn.v_proj:input", "model.layers.*.mlp.gate_proj:input",
                                "model.layers.*.mlp.up_proj:input", "lm_head:input"})
            QCOMPARE(byKey[key].spec, std::string("P('data', None, None)"));
        for (const char *key : {"model.layers.*.self_attn.o_proj:input", "model.layers.*.mlp.down_proj:input"})
            QCOMPARE(byKey[key].spec, std::string("P('data', None, 'model')"));
        QCOMPARE(byKey["model.layers.*.self_attn.q_proj:input"].reader,
                 std::string("model/layers.0/self_attn/q_proj/MatMul"));
        // Each linear's output as its readers read it: the row-parallel
        // projections' partial sums reduce-scattered onto sequence shards
        // for the residual add, the column-parallel ones split by features.
        for (const char *key : {"model.layers.*.self_attn.o_proj:output", "model.layers.*.mlp.down_proj:output"})
            QCOMPARE(byKey[key].spec, std::string("P('data', 'model', None)"));
        for (const char *key : {"model.layers.*.self_attn.q_proj:output", "model.layers.*.mlp.gate_proj:output"})
            QCOMPARE(byKey[key].spec, std::string("P('data', None, 'model')"));
        QCOMPARE(byKey["model.layers.*.self_attn.o_proj:output"].reader, std::string("model/layers.0/Add"));
        for (const auto &c : jax.constraints) {
            const auto t = g.findTensor(c.tensor);
            QVERIFY2(t, c.tensor.c_str());
            const int rank = static_cast<int>(g.tensor(*t).shape.size());
            if (c.reader.empty()) {
                QCOMPARE(c.spec, in.specs[t->index()].toPartitionSpec(rank, named));
                continue;
            }
            const auto op = g.findOp(c.reader);
            QVERIFY2(op, c.reader.c_str());
            std::vector<sharding::ShardingSpec> specs;
            for (auto x : g.op(*op).inputs)
                specs.push_back(in.specs[x.index()]);
            const auto strategy = sharding::resolveStrategy(g, *op, specs, p.mesh);
            const auto at = std::find(g.op(*op).inputs.begin(), g.op(*op).inputs.end(), *t) - g.op(*op).inputs.begin();
            QCOMPARE(c.spec, strategy.inputs[static_cast<std::size_t>(at)].toPartitionSpec(rank, named));
        }

        // GPT-2's fused c_attn reads the norm's output [b, s, h] as
        // [b, 1, s, h]: its constraint is on the norm's output, gathered
        // over the sequence as the column-parallel q/k/v compute on it,
        // where the attention's input is stored on sequence shards. Its
        // output, q, k and v side by side in Flax, is left to the kernel.
        {
            const auto gpt = io::loadModel(kGpt);
            std::map<std::string, exports::JaxConstraint> gptKeys;
            for (const auto &c :
                 exports::jaxPlan(exports::exportInput(gpt, referencePlan(gpt, kGpt, "2x2", true), "p.json", "jax", false))
                     .constraints)
                gptKeys[c.key] = c;
            QCOMPARE(gptKeys["transformer.h.*.attn:input"].spec, std::string("P('data', 'model', None)"));
            QCOMPARE(gptKeys["transformer.h.*.attn.c_attn:input"].spec, std::string("P('data', None, None)"));
            QCOMPARE(gptKeys["transformer.h.*.attn.c_attn:input"].tensor, std::string("transformer/h.0/ln_1/LayerNormalization:0"));
            QVERIFY(!gptKeys.count("transformer.h.*.attn.c_attn:output"));
        }

        // Without attention layers, the modules that hold weights; the axis
        // named model carries data here, and is exported so.
        const auto mlp = io::loadModel("zoo:mlp?batch=8");
        const auto dp = search::referencePlan(mlp, "zoo:mlp?batch=8", p.mesh, search::ReferenceMethod::DataParallel);
        std::vector<std::string> keys;
        for (const auto &c : exports::jaxPlan(exports::exportInput(mlp, dp, "dp.json", "jax", false)).constraints)
            keys.push_back(c.key + " " + c.spec);
        QCOMPARE(keys, (std::vector<std::string>{"mlp.fc1:output P(('data', 'data1'), None)",
                                                 "mlp.fc2:input P(('data', 'data1'), None)",
                                                 "mlp.fc2:output P(('data', 'data1'), None)"}));
    }

    // The plan's techniques: layers recomputed whole and micro-batches as
    // the module's tables, the rest as notes in its docstring.
    void techniques()
    {
        const auto g = io::loadModel(kLlama);
        auto p = referencePlan(g, kLlama, "2x4", false);
        p.costOptions.techniques.recomputeLayers["model/layers.*/"] = cost::Recompute::Full;
        p.costOptions.techniques.microBatches = 2;
        p.costOptions.techniques.zeroStage = 1;
        p.costOptions.techniques.zeroAxes = std::vector<std::string>{"data"};
        const auto in = exports::exportInput(g, p, "p.json", "jax", false);
        const auto jax = exports::jaxPlan(in);
        QCOMPARE(jax.rematModules, std::vector<std::string>{"model.layers.*"});
        QCOMPARE(jax.microBatches, 2);
        const std::string text = exports::jaxPlanPython(jax, p);
        QVERIFY(text.find("\nremat_modules = ('model.layers.*',)\n") != std::string::npos);
        QVERIFY(text.find("\nmicro_batches = 2\n") != std::string::npos);
        QVERIFY2(text.find("Note: ZeRO-1 over axes data: the optimizer state sharded further than partition_specs; "
                           "this module does not apply it") != std::string::npos,
                 text.c_str());
        const auto plain = exports::jaxPlan(exports::exportInput(g, referencePlan(g, kLlama, "2x4", false), "p.json",
                                                                  "jax", false));
        QVERIFY(plain.rematModules.empty());
        QVERIFY(plain.notes.empty());
    }

    // The module is Python: it parses, and with stand-ins for jax and
    // numpy its functions run and return what the tables say.
    void python_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::addColumn<bool>("sequenceParallel");
        QTest::addColumn<QString>("activation");
        QTest::newRow("llama") << kLlama << "2x4" << true << "model.layers.1.self_attn:input";
        QTest::newRow("gpt2") << kGpt << "2x2" << false << "transformer.h.1.mlp:output";
    }
    void python()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        QFETCH(bool, sequenceParallel);
        QFETCH(QString, activation);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto p = referencePlan(g, source, shape.toStdString(), sequenceParallel);
        QTemporaryDir dir;
        const QString module = dir.filePath(QStringLiteral("plan.py"));
        writeFile(module, exports::jaxPartitionSpecs(exports::exportInput(g, p, "p.json", "jax", false)));
        auto r = runPython({QStringLiteral("-c"), QStringLiteral("import ast, sys; ast.parse(open(sys.argv[1]).read())"),
                         module});
        QVERIFY2(r.code == 0, qPrintable(r.out));

        QVERIFY(QDir(dir.path()).mkpath(QStringLiteral("jax")));
        writeFile(dir.filePath(QStringLiteral("jax/__init__.py")), kJaxStub);
        writeFile(dir.filePath(QStringLiteral("jax/sharding.py")), kShardingStub);
        writeFile(dir.filePath(QStringLiteral("numpy.py")), kNumpyStub);
        writeFile(dir.filePath(QStringLiteral("driver.py")), kDriver);
        r = runPython({dir.filePath(QStringLiteral("driver.py")), activation}, dir.path());
        QVERIFY2(r.code == 0 && r.out.trimmed() == QStringLiteral("ok"), qPrintable(r.out));
    }
};

QTEST_GUILESS_MAIN(TestExportJax)
#include "tst_exportjax.moc"
