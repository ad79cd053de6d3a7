#include "configsample.h"
#include "io/hfconfig.h"
#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/modelloader.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "ir/validate.h"

#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <algorithm>

using namespace tapestry;

namespace {

// Parameter counts as Hugging Face reports them for these checkpoints
// (the safetensors count on each model card; BERT: BertForPreTraining,
// RoBERTa: RobertaForMaskedLM, the graphs the zoo builds), from the
// published config.json files copied into samples/configs.
const std::pair<const char *, qlonglong> kPublished[] = {
    // GPT-like
    {"gpt2.json", 124'439'808},
    {"pythia-1b.json", 1'011'781'632},
    {"gpt-j-6b.json", 6'050'882'784},
    {"opt-1.3b.json", 1'315'758'080},
    {"bloom-560m.json", 559'214'592},
    {"falcon-7b.json", 6'921'720'704},
    {"starcoder2-3b.json", 3'030'371'328},
    // LLaMA-like
    {"llama2-7b.json", 6'738'415'616},
    {"llama3-8b.json", 8'030'261'248},
    {"llama3.2-1b.json", 1'235'814'400},
    {"mistral-7b-v0.1.json", 7'241'732'096},
    {"qwen2-7b.json", 7'615'616'512},
    {"qwen2.5-0.5b.json", 494'032'768},
    {"qwen3-8b.json", 8'190'735'360},
    {"gemma-2b.json", 2'506'172'416},
    {"gemma-7b.json", 8'537'680'896},
    {"gemma2-9b.json", 9'241'705'984},
    {"phi3-mini-4k.json", 3'821'079'552},
    {"olmo-7b.json", 6'888'095'744},
    {"internlm2-7b.json", 7'737'708'544},
    {"granite-3.0-8b.json", 8'170'848'256},
    // encoders, encoder-decoders
    {"bert-base-uncased.json", 110'106'428},
    {"bert-large-uncased.json", 336'226'108},
    {"roberta-base.json", 124'697'433},
    {"electra-small-discriminator.json", 13'549'057},
    {"electra-base-discriminator.json", 109'483'009},
    {"t5-small.json", 60'506'624},
    {"t5-base.json", 222'903'552},
    {"flan-t5-base.json", 247'577'856},
    {"mt5-small.json", 300'176'768},
    {"bart-base.json", 139'420'416},
    {"bart-large.json", 406'291'456},
    // mixtures of experts
    {"mixtral-8x7b.json", 46'702'792'704},
    {"qwen1.5-moe-a2.7b.json", 14'315'784'192},
    {"deepseek-v2-lite.json", 15'706'484'224},
    {"dbrx-base.json", 131'596'523'520},
    {"qwen3-30b-a3b.json", 30'532'122'624},
    {"deepseek-v3.json", 671'026'419'200},  // without the multi-token-prediction layer, as transformers builds it
};

} // namespace

class TestHfConfig : public QObject {
    Q_OBJECT
private slots:
    // Every published config loads with its published count, exactly.
    void sampleLoadsWithPublishedCount_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qlonglong>("parameters");
        for (const auto &[file, parameters] : kPublished)
            QTest::newRow(file) << QString(file) << parameters;
    }
    void sampleLoadsWithPublishedCount()
    {
        QFETCH(QString, file);
        QFETCH(qlonglong, parameters);
        const auto g = io::loadModel(testing::configSample(file));  // through the .json hook, validated
        QCOMPARE(qlonglong(g.parameterCount()), parameters);
    }

    // Every config in samples/configs is a test above, or here for want of
    // a published count to hold it to (StarCoderBase-1B's card says 1B).
    void everySampleIsCounted()
    {
        const QDir dir(QString(TAPESTRY_SOURCE_DIR) + "/samples/configs");
        const auto files = dir.entryList({"*.json"}, QDir::Files);
        QVERIFY(files.size() >= 25);
        for (const auto &file : files) {
            const bool counted = std::any_of(std::begin(kPublished), std::end(kPublished),
                                             [&](const auto &p) { return file == p.first; });
            QVERIFY2(counted || file == "starcoderbase-1b.json", qPrintable(file + " has no test"));
            QVERIFY2(io::loadModel(testing::configSample(file)).parameterCount() > 0, qPrintable(file));
        }
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
        auto fromConfig = io::loadHfConfig(testing::configSample(file), {});
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
        const auto g = io::loadModel(testing::editedConfig(dir, file, edits));
        QCOMPARE(qlonglong(g.parameterCount()), parameters);
    }

    // A config whose model_type Tapestry does not know is read by the
    // family its architectures name, or, for a causal LM with LLaMA's
    // fields, as LLaMA; the loader says which, once.
    void unknownModelTypeIsReadByFamily_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("edits");
        QTest::addColumn<QString>("note");
        QTest::addColumn<qlonglong>("parameters");
        QTest::newRow("by architectures")
            << "mistral-7b-v0.1.json" << R"({"model_type": "mistral-finetune"})"
            << "model_type 'mistral-finetune' is not one Tapestry knows; read as mistral from architectures "
               "MistralForCausalLM"
            << qlonglong(7'241'732'096);
        QTest::newRow("by LLaMA's fields")
            << "llama2-7b.json" << R"({"model_type": "acme", "architectures": ["AcmeForCausalLM"]})"
            << "model_type 'acme' (AcmeForCausalLM) is not one Tapestry knows; its fields are LLaMA's, so it is "
               "read as llama: check the parameter count"
            << qlonglong(6'738'415'616);
        QTest::newRow("known: no note") << "gemma-2b.json" << "{}" << "" << qlonglong(2'506'172'416);
    }
    void unknownModelTypeIsReadByFamily()
    {
        QFETCH(QString, file);
        QFETCH(QString, edits);
        QFETCH(QString, note);
        QFETCH(qlonglong, parameters);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        QStringList notes;
        io::LoadOptions options;
        options.note = [&](const std::string &line) { notes << QString::fromStdString(line); };
        const auto g = io::loadModel(testing::editedConfig(dir, file, edits), options);
        QCOMPARE(qlonglong(g.parameterCount()), parameters);
        QCOMPARE(notes, note.isEmpty() ? QStringList() : QStringList{note});
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
        QTest::newRow("unknown model_type") << "gpt2.json" << R"({"model_type": "mamba", "architectures": ["MambaForCausalLM"]})"
                                            << "model_type: unsupported model_type 'mamba'";
        QTest::newRow("model_type not a string") << "gpt2.json" << R"({"model_type": 2})"
                                                 << "model_type: expected a string";
        QTest::newRow("unknown architecture") << "bert-base-uncased.json" << R"({"-": ["model_type"], "architectures": ["MambaForCausalLM"]})"
                                              << "architectures: no supported architecture in [\"MambaForCausalLM\"]";
        QTest::newRow("mBART's pre-norm") << "bart-base.json" << R"({"normalize_before": true})"
                                         << "normalize_before: a pre-LayerNorm BART (mBART's) is not built";
        QTest::newRow("BART stacks of two widths") << "bart-base.json" << R"({"decoder_ffn_dim": 2048})"
                                                   << "decoder_ffn_dim: decoder_ffn_dim differs from the encoder's";
        QTest::newRow("ELECTRA's generator") << "electra-small-discriminator.json"
                                             << R"({"architectures": ["ElectraForMaskedLM"]})"
                                             << "architectures: ELECTRA's generator (ElectraForMaskedLM) is not built";
        QTest::newRow("heads not dividing hidden") << "gpt2.json" << R"({"n_head": 7})"
                                                   << "n_head: n_head=7 does not divide n_embd=768";
        QTest::newRow("kv heads not dividing heads") << "llama3-8b.json" << R"({"num_key_value_heads": 5})"
                                                     << "num_key_value_heads: num_key_value_heads=5 does not divide "
                                                        "num_attention_heads=32";
        QTest::newRow("top-k beyond experts") << "mixtral-8x7b.json" << R"({"num_experts_per_tok": 9})"
                                              << "num_experts_per_tok: num_experts_per_tok=9 exceeds num_local_experts=8";
        QTest::newRow("gated-silu T5") << "t5-small.json" << R"({"feed_forward_proj": "gated-silu"})"
                                       << "feed_forward_proj: 'gated-silu' is not supported";
        QTest::newRow("nested field missing") << "dbrx-base.json" << R"({"ffn_config": {"moe_num_experts": 16}})"
                                              << "ffn_config.ffn_hidden_size: missing field";
        QTest::newRow("nested field wrong") << "dbrx-base.json"
                                            << R"({"ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 0}})"
                                            << "ffn_config.moe_num_experts: expected a positive integer, got 0";
        QTest::newRow("nested object missing") << "dbrx-base.json" << R"({"-": ["attn_config"]})"
                                               << "attn_config: missing field (an object)";
        QTest::newRow("dense layers between experts") << "deepseek-v2-lite.json" << R"({"moe_layer_freq": 2})"
                                                      << "moe_layer_freq: only a mixture in every layer";
        QTest::newRow("dense layers listed") << "qwen1.5-moe-a2.7b.json" << R"({"mlp_only_layers": [0, 3]})"
                                             << "mlp_only_layers: only a mixture in every layer";
        QTest::newRow("OPT-350m's narrow embedding") << "opt-1.3b.json" << R"({"word_embed_proj_dim": 512})"
                                                     << "word_embed_proj_dim: an embedding narrower";
        QTest::newRow("unknown activation") << "mistral-7b-v0.1.json" << R"({"hidden_act": "swiglu2"})"
                                            << "hidden_act: activation 'swiglu2' is not supported";
        QTest::newRow("odd rotary head") << "gemma-2b.json" << R"({"head_dim": 255})"
                                         << "head_dim: the rotary embedding turns pairs of dims: 255 is odd";
        QTest::newRow("rotary fraction") << "pythia-1b.json" << R"({"rotary_pct": 1.5})"
                                         << "rotary_pct: expected a number in (0, 1]";
        QTest::newRow("experts past the limit") << "qwen1.5-moe-a2.7b.json" << R"({"num_experts": 4096})"
                                                << "num_experts: num_experts=4096 exceeds 1024";
    }
    void badConfigIsRejected()
    {
        QFETCH(QString, file);
        QFETCH(QString, edits);
        QFETCH(QString, message);
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string path = testing::editedConfig(dir, file, edits);
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
        std::string text = io::readFile(testing::configSample(QStringLiteral("gpt2.json")));
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
            io::loadModel(testing::configSample(QStringLiteral("gpt2.json")), options);
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
        const auto g = io::loadModel(testing::configSample(file), options);
        QCOMPARE(QString::fromStdString(ir::shapeToString(g.tensor(*g.findTensor("input_ids")).shape)), shape);
    }

    void tapestryModelJsonIsNotAConfig()
    {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto mlp = io::zoo::build("mlp");
        const std::string text = io::writeModelJson(mlp);
        QVERIFY(!io::isHfConfig(text));
        QVERIFY(io::isHfConfig(io::readFile(testing::configSample(QStringLiteral("t5-small.json")))));
        const std::string path = dir.filePath(QStringLiteral("mlp.json")).toStdString();
        io::writeOutputFile(path, text);
        QCOMPARE(io::writeModelJson(io::loadModel(path)), text);
    }
};

QTEST_APPLESS_MAIN(TestHfConfig)
#include "tst_hfconfig.moc"
