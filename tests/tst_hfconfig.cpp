#include "io/hfconfig.h"
#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/modelloader.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "ir/validate.h"

#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

using namespace tapestry;

namespace {

std::string sample(const QString &file)
{
    return std::string(TAPESTRY_SOURCE_DIR) + "/samples/configs/" + file.toStdString();
}

// Writes the sample `file` with `edits` applied into `dir` and returns the new
// file's path. `edits` is a JSON object: each field is set to its value, and
// the fields listed under "-" are removed.
std::string editedSample(const QTemporaryDir &dir, const QString &file, const QString &edits)
{
    auto config = nlohmann::json::parse(io::readFile(sample(file)));
    const auto changes = nlohmann::json::parse(edits.toStdString());
    for (const auto &[field, value] : changes.items()) {
        if (field == "-")
            for (const auto &removed : value)
                config.erase(removed.get<std::string>());
        else
            config[field] = value;
    }
    const std::string path = dir.filePath(QStringLiteral("config.json")).toStdString();
    io::writeOutputFile(path, config.dump(2));
    return path;
}

} // namespace

class TestHfConfig : public QObject {
    Q_OBJECT
private slots:
    // Parameter counts as Hugging Face reports them for these checkpoints
    // (BERT: BertForPreTraining, the graph the zoo builds).
    void sampleLoadsWithPublishedCount_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qlonglong>("parameters");
        QTest::newRow("gpt2") << "gpt2.json" << qlonglong(124'439'808);
        QTest::newRow("bert-base-uncased") << "bert-base-uncased.json" << qlonglong(110'106'428);
        QTest::newRow("t5-small") << "t5-small.json" << qlonglong(60'506'624);
        QTest::newRow("llama3-8b") << "llama3-8b.json" << qlonglong(8'030'261'248);
        QTest::newRow("mixtral-8x7b") << "mixtral-8x7b.json" << qlonglong(46'702'792'704);
    }
    void sampleLoadsWithPublishedCount()
    {
        QFETCH(QString, file);
        QFETCH(qlonglong, parameters);
        const auto g = io::loadModel(sample(file));  // through the .json hook, validated
        QCOMPARE(qlonglong(g.parameterCount()), parameters);
    }

    // A config and the zoo preset of the same model give the same graph.
    void sampleMatchesZooPreset_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("spec");
        QTest::newRow("gpt2") << "gpt2.json" << "gpt2";
        QTest::newRow("bert-base-uncased") << "bert-base-uncased.json" << "bert-base";
        QTest::newRow("t5-small") << "t5-small.json" << "t5-base?layers=6&decoder_layers=6&hidden=512&heads=8&ffn=2048";
        QTest::newRow("llama3-8b") << "llama3-8b.json" << "llama3-8b";
        QTest::newRow("mixtral-8x7b") << "mixtral-8x7b.json" << "mixtral-8x7b";
    }
    void sampleMatchesZooPreset()
    {
        QFETCH(QString, file);
        QFETCH(QString, spec);
        auto fromConfig = io::loadHfConfig(sample(file), {});
        auto fromZoo = io::zoo::build(spec.toStdString());
        fromConfig.name = fromZoo.name;
        QVERIFY(io::writeModelJson(fromConfig) == io::writeModelJson(fromZoo));
    }

    void editedConfigLoads_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("edits");
        QTest::addColumn<qlonglong>("parameters");
        QTest::newRow("architectures without model_type")
            << "llama3-8b.json" << R"({"-": ["model_type"]})" << qlonglong(8'030'261'248);
        QTest::newRow("tied embeddings share the LM head")
            << "llama3-8b.json" << R"({"tie_word_embeddings": true})" << qlonglong(8'030'261'248 - 128'256LL * 4096);
        QTest::newRow("no num_key_value_heads: multi-head")
            << "llama3-8b.json" << R"({"-": ["num_key_value_heads"]})" << qlonglong(8'030'261'248 + 32LL * 2 * 4096 * 3072);
        QTest::newRow("gpt2 n_inner") << "gpt2.json" << R"({"n_inner": 1024})" << qlonglong(124'439'808 - 12LL * 2 * 768 * 2048 - 12LL * 2048);
        QTest::newRow("t5 num_decoder_layers") << "t5-small.json" << R"({"num_decoder_layers": 2})"
                                               << qlonglong(60'506'624 - 4LL * (4 * 512 * 512 * 2 + 2 * 512 * 2048 + 3 * 512));
    }
    void editedConfigLoads()
    {
        QFETCH(QString, file);
        QFETCH(QString, edits);
        QFETCH(qlonglong, parameters);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto g = io::loadModel(editedSample(dir, file, edits));
        QCOMPARE(qlonglong(g.parameterCount()), parameters);
    }

    void badConfigIsRejected_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("edits");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing field") << "gpt2.json" << R"({"-": ["n_head"]})" << "n_head: missing field";
        QTest::newRow("string for integer") << "gpt2.json" << R"({"n_layer": "twelve"})"
                                            << "n_layer: expected a positive integer, got string \"twelve\"";
        QTest::newRow("fraction for integer") << "bert-base-uncased.json" << R"({"hidden_size": 768.5})"
                                              << "hidden_size: expected a positive integer, got number";
        QTest::newRow("zero") << "t5-small.json" << R"({"num_layers": 0})" << "num_layers: expected a positive integer, got 0";
        QTest::newRow("string for boolean") << "llama3-8b.json" << R"({"tie_word_embeddings": "no"})"
                                            << "tie_word_embeddings: expected true or false";
        QTest::newRow("unknown model_type") << "gpt2.json" << R"({"model_type": "bloom"})"
                                            << "model_type: unsupported model_type 'bloom'";
        QTest::newRow("model_type not a string") << "gpt2.json" << R"({"model_type": 2})"
                                                 << "model_type: expected a string";
        QTest::newRow("unknown architecture") << "bert-base-uncased.json" << R"({"-": ["model_type"], "architectures": ["FalconForCausalLM"]})"
                                              << "architectures: no supported architecture in [\"FalconForCausalLM\"]";
        QTest::newRow("heads not dividing hidden") << "gpt2.json" << R"({"n_head": 7})"
                                                   << "n_head: n_head=7 does not divide n_embd=768";
        QTest::newRow("kv heads not dividing heads") << "llama3-8b.json" << R"({"num_key_value_heads": 5})"
                                                     << "num_key_value_heads: num_key_value_heads=5 does not divide "
                                                        "num_attention_heads=32";
        QTest::newRow("top-k beyond experts") << "mixtral-8x7b.json" << R"({"num_experts_per_tok": 9})"
                                              << "num_experts_per_tok: num_experts_per_tok=9 exceeds num_local_experts=8";
        QTest::newRow("gated T5") << "t5-small.json" << R"({"feed_forward_proj": "gated-gelu"})"
                                  << "feed_forward_proj: 'gated-gelu' is not supported";
    }
    void badConfigIsRejected()
    {
        QFETCH(QString, file);
        QFETCH(QString, edits);
        QFETCH(QString, message);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string path = editedSample(dir, file, edits);
        std::string error = "no error";
        try {
            io::loadModel(path);
        } catch (const TapestryError &e) {
            error = e.what();
        }
        QVERIFY2(error.rfind(path + ": ", 0) == 0, error.c_str());
        QVERIFY2(error.find(message.toStdString()) != std::string::npos, error.c_str());
    }

    // A number no double holds is a JSON error like any other, named with
    // the file.
    void numberPastADoubleIsRejected()
    {
        std::string text = io::readFile(sample(QStringLiteral("gpt2.json")));
        text.replace(text.find("1e-05"), 5, "1e999");
        try {
            io::readHfConfig(text, "config.json", {});
            QFAIL("expected an error");
        } catch (const TapestryError &e) {
            const std::string msg = e.what();
            QVERIFY2(msg.starts_with("config.json: invalid JSON"), msg.c_str());
            QVERIFY2(msg.find("1e999") != std::string::npos, msg.c_str());
        }
    }

    void seqBeyondContextNamesTheOption()
    {
        io::LoadOptions options;
        options.seq = 2048;
        std::string error = "no error";
        try {
            io::loadModel(sample(QStringLiteral("gpt2.json")), options);
        } catch (const TapestryError &e) {
            error = e.what();
        }
        QVERIFY2(error.find("--seq: --seq=2048 exceeds n_positions=1024") != std::string::npos, error.c_str());
    }

    void optionsBindBatchAndSeq_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("batch");
        QTest::addColumn<int>("seq");
        QTest::addColumn<QString>("shape");
        QTest::newRow("defaults: the config's context") << "llama3-8b.json" << 0 << 0 << "[8, 8192]";
        QTest::newRow("defaults: context capped") << "mixtral-8x7b.json" << 0 << 0 << "[8, 4096]";
        QTest::newRow("bound") << "bert-base-uncased.json" << 2 << 128 << "[2, 128]";
    }
    void optionsBindBatchAndSeq()
    {
        QFETCH(QString, file);
        QFETCH(int, batch);
        QFETCH(int, seq);
        QFETCH(QString, shape);
        io::LoadOptions options;
        if (batch)
            options.batch = batch;
        if (seq)
            options.seq = seq;
        const auto g = io::loadModel(sample(file), options);
        QCOMPARE(QString::fromStdString(ir::shapeToString(g.tensor(*g.findTensor("input_ids")).shape)), shape);
    }

    void tapestryModelJsonIsNotAConfig()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto mlp = io::zoo::build("mlp");
        const std::string text = io::writeModelJson(mlp);
        QVERIFY(!io::isHfConfig(text));
        QVERIFY(io::isHfConfig(io::readFile(sample(QStringLiteral("t5-small.json")))));
        const std::string path = dir.filePath(QStringLiteral("mlp.json")).toStdString();
        io::writeOutputFile(path, text);
        QCOMPARE(io::writeModelJson(io::loadModel(path)), text);
    }
};

QTEST_APPLESS_MAIN(TestHfConfig)
#include "tst_hfconfig.moc"
