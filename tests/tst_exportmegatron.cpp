#include "exporttesting.h"
#include "io/modelloader.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "export/exportaxis.h"
#include "export/exportmegatron.h"
#include "search/referenceplan.h"
#include "sharding/meshprofile.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>

using namespace tapestry;

namespace {

// LLaMA with grouped-query attention (8 heads, 4 key/value heads), bf16,
// an LM head of its own.
const char *kLlama = "zoo:llama3-8b?layers=3&batch=8&seq=64&hidden=256&heads=8&kv_heads=4&ffn=512&vocab=1024";
// GPT-2: learned positions, LayerNorm, GELU (tanh), biases, tied LM head, fp32.
const char *kGpt = "zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&ffn=256&vocab=256&positions=128";

plan::Plan referencePlan(const ir::Graph &g, const std::string &source, const std::string &shape,
                         const std::string &method, const cost::Techniques &techniques = {})
{
    return testing::exportPlan(g, source, shape, method, 0, techniques);
}

exports::MegatronArguments argumentsOf(const ir::Graph &g, const plan::Plan &p)
{
    return exports::megatronArguments(exports::exportInput(g, p, "p.json", "megatron", true), "p.json");
}

// The value after `flag`; "" for a flag without one, "absent" where missing.
QString valueOf(const std::vector<std::string> &args, const std::string &flag)
{
    const auto it = std::find(args.begin(), args.end(), flag);
    if (it == args.end())
        return QStringLiteral("absent");
    if (it + 1 == args.end() || (it + 1)->rfind("--", 0) == 0)
        return QString();
    return QString::fromStdString(*(it + 1));
}

using testing::runCli;

} // namespace

class TestExportMegatron : public QObject {
    Q_OBJECT

private slots:
    // Every argument of a pretrain_gpt.py job, for models whose shape is
    // known from their zoo knobs.
    void arguments_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("flag");
        QTest::addColumn<QString>("value");  // "absent": not given; "": a switch
        auto rows = [](const char *name, const char *model, const char *shape, const char *method,
                       std::initializer_list<std::pair<const char *, const char *>> flags) {
            for (const auto &[flag, value] : flags)
                QTest::newRow((std::string(name) + " " + flag).c_str())
                    << model << shape << method << flag << value;
        };
        rows("llama sp 2x4", kLlama, "2x4", "megatron-sp",
             {{"--tensor-model-parallel-size", "4"},
              {"--pipeline-model-parallel-size", "1"},
              {"--sequence-parallel", ""},
              {"--num-layers", "3"},
              {"--hidden-size", "256"},
              {"--ffn-hidden-size", "512"},
              {"--num-attention-heads", "8"},
              {"--group-query-attention", ""},
              {"--num-query-groups", "4"},
              {"--kv-channels", "absent"},
              {"--swiglu", ""},
              {"--openai-gelu", "absent"},
              {"--normalization", "RMSNorm"},
              {"--norm-epsilon", "1e-05"},
              {"--position-embedding-type", "rope"},
              {"--max-position-embeddings", "64"},
              {"--seq-length", "64"},
              {"--untie-embeddings-and-output-weights", ""},
              {"--disable-bias-linear", ""},
              {"--attention-dropout", "0.0"},
              {"--hidden-dropout", "0.0"},
              {"--bf16", ""},
              {"--fp16", "absent"},
              {"--micro-batch-size", "4"},  // 8 samples over 2 data-parallel ranks
              {"--global-batch-size", "8"},
              {"--attention-backend", "unfused"},
              {"--recompute-granularity", "absent"},
              {"--use-distributed-optimizer", "absent"}});
        rows("gpt2 4", kGpt, "4", "megatron",
             {{"--tensor-model-parallel-size", "4"},
              {"--sequence-parallel", "absent"},
              {"--num-layers", "2"},
              {"--hidden-size", "64"},
              {"--ffn-hidden-size", "256"},
              {"--num-attention-heads", "4"},
              {"--group-query-attention", "absent"},
              {"--swiglu", "absent"},
              {"--openai-gelu", ""},
              {"--normalization", "LayerNorm"},
              {"--position-embedding-type", "learned_absolute"},
              {"--max-position-embeddings", "128"},
              {"--seq-length", "32"},
              {"--untie-embeddings-and-output-weights", "absent"},
              {"--disable-bias-linear", "absent"},
              {"--bf16", "absent"},
              {"--micro-batch-size", "4"},
              {"--global-batch-size", "4"}});
        // Hugging Face configs, as their config.json says.
        rows("llama3-8b config.json 8", TAPESTRY_SOURCE_DIR "/samples/configs/llama3-8b.json", "8", "megatron",
             {{"--tensor-model-parallel-size", "8"},
              {"--num-layers", "32"},
              {"--hidden-size", "4096"},
              {"--ffn-hidden-size", "14336"},
              {"--num-attention-heads", "32"},
              {"--num-query-groups", "8"},
              {"--swiglu", ""},
              {"--normalization", "RMSNorm"},
              {"--position-embedding-type", "rope"},
              {"--untie-embeddings-and-output-weights", ""},
              {"--disable-bias-linear", ""},
              {"--bf16", ""}});
        rows("gpt2 config.json 4", TAPESTRY_SOURCE_DIR "/samples/configs/gpt2.json", "4", "megatron",
             {{"--num-layers", "12"},
              {"--hidden-size", "768"},
              {"--ffn-hidden-size", "3072"},
              {"--num-attention-heads", "12"},
              {"--openai-gelu", ""},  // activation_function gelu_new
              {"--position-embedding-type", "learned_absolute"},
              {"--max-position-embeddings", "1024"},
              {"--untie-embeddings-and-output-weights", "absent"},
              {"--disable-bias-linear", "absent"}});
        rows("gpt2 dp 2x2", kGpt, "2x2", "dp",
             {{"--tensor-model-parallel-size", "1"},
              {"--num-layers", "2"},
              {"--micro-batch-size", "1"},  // 4 samples over 4 data-parallel ranks
              {"--global-batch-size", "4"}});
    }
    void arguments()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        QFETCH(QString, method);
        QFETCH(QString, flag);
        QFETCH(QString, value);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        const auto args = argumentsOf(g, referencePlan(g, source, shape.toStdString(), method.toStdString())).arguments();
        QCOMPARE(valueOf(args, flag.toStdString()), value);
    }

    // The plan's memory techniques as Megatron-LM's arguments.
    void techniques_data()
    {
        QTest::addColumn<bool>("flash");
        QTest::addColumn<QString>("recompute");  // plan-wide, or "layers" for the decoder layers' own
        QTest::addColumn<int>("zero");
        QTest::addColumn<int>("microBatches");
        QTest::addColumn<bool>("offload");
        QTest::addColumn<QStringList>("expected");  // in order, a contiguous run of the arguments
        QTest::newRow("flash") << true << "none" << 0 << 1 << false
                               << QStringList{"--attention-backend", "flash"};
        QTest::newRow("full") << false << "full" << 0 << 1 << false
                              << QStringList{"--recompute-granularity", "full", "--recompute-method", "uniform",
                                             "--recompute-num-layers", "1"};
        QTest::newRow("full by kind of layer") << false << "layers" << 0 << 1 << false
                                               << QStringList{"--recompute-granularity", "full"};
        QTest::newRow("selective") << true << "selective" << 0 << 1 << false
                                   << QStringList{"--recompute-granularity", "selective"};
        QTest::newRow("zero-1") << false << "none" << 1 << 1 << false << QStringList{"--use-distributed-optimizer"};
        QTest::newRow("zero-2") << false << "none" << 2 << 1 << false << QStringList{"--use-distributed-optimizer"};
        QTest::newRow("zero-3") << false << "none" << 3 << 1 << false
                                << QStringList{"--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                                               "optim_grads_params"};
        QTest::newRow("micro-batches") << false << "none" << 0 << 4 << false
                                       << QStringList{"--micro-batch-size", "1", "--global-batch-size", "8"};
        QTest::newRow("offload") << false << "none" << 1 << 1 << true
                                 << QStringList{"--optimizer-cpu-offload", "--use-precision-aware-optimizer"};
    }
    void techniques()
    {
        QFETCH(bool, flash);
        QFETCH(QString, recompute);
        QFETCH(int, zero);
        QFETCH(int, microBatches);
        QFETCH(bool, offload);
        QFETCH(QStringList, expected);
        const auto g = io::loadModel(kLlama);
        auto p = referencePlan(g, kLlama, "2x4", "megatron");
        cost::Techniques &t = p.costOptions.techniques;
        t.flashAttention = flash;
        if (recompute == QStringLiteral("layers"))
            t.recomputeLayers["model/layers.*/"] = cost::Recompute::Full;
        else
            t.recompute = *cost::recomputeFromString(recompute.toStdString());
        t.zeroStage = zero;
        t.microBatches = microBatches;
        t.offloadOptimizer = offload;
        const auto args = argumentsOf(g, p).arguments();
        std::vector<std::string> want;
        for (const auto &e : expected)
            want.push_back(e.toStdString());
        QVERIFY2(std::search(args.begin(), args.end(), want.begin(), want.end()) != args.end(),
                 qPrintable(expected.join(QLatin1Char(' '))));
        if (recompute == QStringLiteral("none"))
            QCOMPARE(valueOf(args, "--recompute-granularity"), QStringLiteral("absent"));
        if (zero == 0)
            QCOMPARE(valueOf(args, "--use-distributed-optimizer"), QStringLiteral("absent"));
    }

    // Plans and models pretrain_gpt.py cannot run: one line naming the
    // tensor (or op) and the reason.
    void refusals_data()
    {
        QTest::addColumn<QString>("model");
        QTest::addColumn<QString>("shape");
        QTest::addColumn<QString>("method");
        QTest::addColumn<QString>("edit");
        QTest::addColumn<QString>("says");
        QTest::newRow("weight split by rows where Megatron splits columns")
            << kLlama << "2x4" << "megatron" << "q_proj rows"
            << "p.json: model.layers.0.self_attn.q_proj.weight: megatron: the plan stores it [Replicate(), Shard(0)] "
               "where Megatron-LM stores it [Replicate(), Shard(1)] (column-parallel)";
        QTest::newRow("2D split") << kLlama << "2x4" << "megatron" << "norm on data"
                                  << "model.layers.0.input_layernorm.weight: megatron: the plan splits parameters "
                                     "over mesh axes model and data";
        QTest::newRow("batch on the tensor axis")
            << kLlama << "2x4" << "megatron" << "batch on model"
            << "input_ids: megatron: split on dim 0 over axis model, which also splits the weights";
        QTest::newRow("ZeRO off the data axes") << kLlama << "2x4" << "megatron" << "zero on model"
                                                << "megatron: ZeRO-1 over axes model, where Megatron-LM shards over the data-parallel axes (data)";
        QTest::newRow("batch the micro-batches do not divide")
            << kLlama << "2x4" << "megatron" << "3 micro-batches"
            << "megatron: the global batch of 8 does not split into 2 data-parallel ranks x 3 micro-batches";
        QTest::newRow("no attention") << "zoo:mlp?batch=8" << "2" << "dp" << ""
                                      << "megatron: the model has no attention layers";
        QTest::newRow("encoder-decoder")
            << "zoo:t5-base?layers=2&decoder_layers=2&hidden=64&heads=4&ffn=128&vocab=256&batch=4&seq=16&target_seq=16"
            << "2" << "dp" << "" << "megatron: layers of two kinds";
        QTest::newRow("post-norm")
            << "zoo:bert-base?layers=2&hidden=64&heads=4&ffn=128&vocab=256&batch=4&seq=16" << "2" << "dp" << ""
            << "(post-norm)";
        QTest::newRow("mixture of experts")
            << "zoo:mixtral-8x7b?layers=2&hidden=64&heads=4&kv_heads=2&ffn=128&vocab=256&batch=4&seq=16&experts=4"
            << "2" << "dp" << "" << "megatron: a mixture of experts";
    }
    void refusals()
    {
        QFETCH(QString, model);
        QFETCH(QString, shape);
        QFETCH(QString, method);
        QFETCH(QString, edit);
        QFETCH(QString, says);
        const std::string source = model.toStdString();
        const auto g = io::loadModel(source);
        auto p = referencePlan(g, source, shape.toStdString(), method.toStdString());
        auto spec = [&](const std::string &name) -> sharding::ShardingSpec & { return p.specs.at(name).spec; };
        if (edit == QStringLiteral("q_proj rows"))
            spec("model.layers.0.self_attn.q_proj.weight").placements[1] = sharding::Placement::shard(0);
        else if (edit == QStringLiteral("norm on data"))
            spec("model.layers.0.input_layernorm.weight").placements[0] = sharding::Placement::shard(0);
        else if (edit == QStringLiteral("batch on model"))
            spec("input_ids").placements[1] = sharding::Placement::shard(0);
        else if (edit == QStringLiteral("zero on model")) {
            p.costOptions.techniques.zeroStage = 1;
            p.costOptions.techniques.zeroAxes = std::vector<std::string>{"model"};
        } else if (edit == QStringLiteral("3 micro-batches"))
            p.costOptions.techniques.microBatches = 3;
        try {
            argumentsOf(g, p);
            QFAIL("no error");
        } catch (const TapestryError &e) {
            QVERIFY2(QString::fromStdString(e.what()).contains(says), e.what());
        }
    }

    // What the job must be told besides the arguments.
    void notes()
    {
        const auto g = io::loadModel(kLlama);
        const auto a = argumentsOf(g, referencePlan(g, kLlama, "2x4", "megatron"));
        auto has = [&](const std::string &text) {
            return std::any_of(a.notes.begin(), a.notes.end(),
                               [&](const std::string &n) { return n.find(text) != std::string::npos; });
        };
        QVERIFY(has("the tokenizer sets the vocabulary: the plan's is 1024"));
        QVERIFY(has("--rotary-base"));
        const auto gpt = io::loadModel(kGpt);
        const auto b = argumentsOf(gpt, referencePlan(gpt, kGpt, "4", "megatron"));
        QVERIFY(std::none_of(b.notes.begin(), b.notes.end(),
                             [](const std::string &n) { return n.find("rotary") != std::string::npos; }));
    }

    // The command: the arguments on one line, the notes on stderr, and the
    // summary's fields.
    void cli()
    {
        QTemporaryDir dir;
        const QString planFile = dir.filePath(QStringLiteral("plan.json"));
        const auto g = io::loadModel(kLlama);
        const auto p = referencePlan(g, kLlama, "2x4", "megatron-sp");
        plan::writePlanFile(planFile.toStdString(), p);
        auto r = runCli({QStringLiteral("export"), planFile, QStringLiteral("--to"), QStringLiteral("megatron")});
        QCOMPARE(r.code, 0);
        std::string line;
        for (const auto &a : argumentsOf(g, p).arguments())
            line += (line.empty() ? "" : " ") + a;
        QCOMPARE(r.out, QString::fromStdString(line + "\n"));
        QVERIFY2(r.err.contains(QStringLiteral("note: the tokenizer sets the vocabulary")), qPrintable(r.err));

        r = runCli({QStringLiteral("export"), planFile, QStringLiteral("--to"), QStringLiteral("megatron"),
                    QStringLiteral("--json")});
        QCOMPARE(r.code, 0);
        const QJsonObject summary = QJsonDocument::fromJson(r.out.toUtf8()).object();
        QCOMPARE(summary.value(QStringLiteral("tensor_parallel")).toInt(), 4);
        QCOMPARE(summary.value(QStringLiteral("data_parallel")).toInt(), 2);
        QCOMPARE(summary.value(QStringLiteral("sequence_parallel")).toBool(), true);
        QCOMPARE(summary.value(QStringLiteral("micro_batch_size")).toInt(), 4);
        QCOMPARE(summary.value(QStringLiteral("global_batch_size")).toInt(), 8);
        const QJsonObject model = summary.value(QStringLiteral("model")).toObject();
        QCOMPARE(model.value(QStringLiteral("layers")).toInt(), 3);
        QCOMPARE(model.value(QStringLiteral("query_groups")).toInt(), 4);
        QCOMPARE(model.value(QStringLiteral("normalization")).toString(), QStringLiteral("RMSNorm"));
        QVERIFY(summary.value(QStringLiteral("arguments")).toArray().contains(QStringLiteral("--swiglu")));
        QVERIFY(!summary.value(QStringLiteral("notes")).toArray().isEmpty());
        QVERIFY(summary.value(QStringLiteral("text")).toString().startsWith(QStringLiteral("--tensor-model-parallel-size 4")));

        // A refusal: exit 2, one line naming the tensor, no file left.
        auto bad = p;
        bad.specs.at("input_ids").spec.placements[1] = sharding::Placement::shard(0);
        const QString badFile = dir.filePath(QStringLiteral("bad.json"));
        plan::writePlanFile(badFile.toStdString(), bad);
        const QString out = dir.filePath(QStringLiteral("args.txt"));
        r = runCli({QStringLiteral("export"), badFile, QStringLiteral("--to"), QStringLiteral("megatron"),
                    QStringLiteral("-o"), out});
        QCOMPARE(r.code, 2);
        QVERIFY2(r.err.contains(QStringLiteral("input_ids: megatron: split on dim 0 over axis model")), qPrintable(r.err));
        QCOMPARE(r.err.trimmed().count(QLatin1Char('\n')), 0);
        QVERIFY(!QFile::exists(out));
    }
};

QTEST_GUILESS_MAIN(TestExportMegatron)
#include "tst_exportmegatron.moc"
