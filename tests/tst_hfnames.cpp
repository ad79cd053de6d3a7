// The zoo's parameters carry the names Hugging Face's modeling code gives
// them (named_parameters() of one layer of each, written out below from
// transformers' modeling_llama.py, modeling_mixtral.py, modeling_bert.py,
// modeling_t5.py and modeling_gpt2.py, and for the config.json families
// from their modeling_*.py), so that an exported plan's module names match
// the modules of a Hugging Face model.
#include "configsample.h"
#include "io/modelloader.h"

#include <QtTest>


#include <set>
#include <string>

using namespace tapestry;

namespace {

std::set<std::string> parameterNames(const std::string &source)
{
    const auto g = io::loadModel(source);
    std::set<std::string> names;
    for (auto t : g.tensorsWithRole(ir::Role::Parameter))
        names.insert(g.tensor(t).name);
    return names;
}

// The parameter names of samples/configs/FILE with `edits` applied (fewer
// layers and experts, so that one layer's names are listed).
std::set<std::string> configParameterNames(const QString &file, const QString &edits)
{
    QTemporaryDir dir;
    return parameterNames(testing::editedConfig(dir, file, edits));
}

std::string describe(const std::set<std::string> &zoo, const std::set<std::string> &hf)
{
    std::string s;
    for (const auto &n : zoo)
        if (!hf.count(n))
            s += " zoo only: " + n + ";";
    for (const auto &n : hf)
        if (!zoo.count(n))
            s += " Hugging Face only: " + n + ";";
    return s;
}

} // namespace

class TestHfNames : public QObject {
    Q_OBJECT

private slots:
    void llama()
    {
        const std::set<std::string> hf{
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.k_proj.weight",
            "model.layers.0.self_attn.v_proj.weight",
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.mlp.gate_proj.weight",
            "model.layers.0.mlp.up_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.norm.weight",
            "lm_head.weight",
        };
        const auto zoo = parameterNames("zoo:llama3-8b?layers=1");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
    }

    void mixtral()
    {
        std::set<std::string> hf{
            "model.embed_tokens.weight",
            "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.k_proj.weight",
            "model.layers.0.self_attn.v_proj.weight",
            "model.layers.0.self_attn.o_proj.weight",
            "model.layers.0.block_sparse_moe.gate.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.norm.weight",
            "lm_head.weight",
        };
        for (int e = 0; e < 2; ++e)
            for (const char *w : {"w1", "w2", "w3"})
                hf.insert("model.layers.0.block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight");
        const auto zoo = parameterNames("zoo:mixtral-8x7b?layers=1&experts=2");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
    }

    // BertForPreTraining; the MLM decoder's weight is the word embeddings'
    // (tied), so named_parameters() lists it once.
    void bert()
    {
        std::set<std::string> hf{
            "bert.embeddings.word_embeddings.weight",
            "bert.embeddings.position_embeddings.weight",
            "bert.embeddings.token_type_embeddings.weight",
            "bert.pooler.dense.weight",
            "cls.predictions.bias",
            "cls.predictions.transform.dense.weight",
            "cls.seq_relationship.weight",
        };
        for (const char *m : {"bert.embeddings.LayerNorm", "bert.encoder.layer.0.attention.output.LayerNorm",
                              "bert.encoder.layer.0.output.LayerNorm", "cls.predictions.transform.LayerNorm"}) {
            hf.insert(std::string(m) + ".weight");
            hf.insert(std::string(m) + ".bias");
        }
        for (const char *m : {"bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.0.attention.self.key",
                              "bert.encoder.layer.0.attention.self.value", "bert.encoder.layer.0.attention.output.dense",
                              "bert.encoder.layer.0.intermediate.dense", "bert.encoder.layer.0.output.dense"}) {
            hf.insert(std::string(m) + ".weight");
            hf.insert(std::string(m) + ".bias");
        }
        hf.insert("bert.pooler.dense.bias");
        hf.insert("cls.predictions.transform.dense.bias");
        hf.insert("cls.seq_relationship.bias");
        const auto zoo = parameterNames("zoo:bert-base?layers=1");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
    }

    // ElectraForPreTraining (modeling_electra.py): ELECTRA-small's 128-wide
    // embeddings projected into its 256-wide layers by
    // electra.embeddings_project, no pooler, and the discriminator's head.
    void electra()
    {
        std::set<std::string> hf{
            "electra.embeddings.word_embeddings.weight",
            "electra.embeddings.position_embeddings.weight",
            "electra.embeddings.token_type_embeddings.weight",
        };
        for (const char *m : {"electra.embeddings.LayerNorm", "electra.encoder.layer.0.attention.output.LayerNorm",
                              "electra.encoder.layer.0.output.LayerNorm", "electra.embeddings_project",
                              "electra.encoder.layer.0.attention.self.query", "electra.encoder.layer.0.attention.self.key",
                              "electra.encoder.layer.0.attention.self.value",
                              "electra.encoder.layer.0.attention.output.dense", "electra.encoder.layer.0.intermediate.dense",
                              "electra.encoder.layer.0.output.dense", "discriminator_predictions.dense",
                              "discriminator_predictions.dense_prediction"}) {
            hf.insert(std::string(m) + ".weight");
            hf.insert(std::string(m) + ".bias");
        }
        const auto zoo = configParameterNames("electra-small-discriminator.json", R"({"num_hidden_layers": 1})");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
        // Where the embeddings are as wide as the layers (ELECTRA-base) there
        // is no projection.
        const auto base = configParameterNames("electra-base-discriminator.json", R"({"num_hidden_layers": 1})");
        QVERIFY(!base.count("electra.embeddings_project.weight"));
        QCOMPARE(base.size(), hf.size() - 2);
    }

    // T5ForConditionalGeneration (v1.0: the LM head tied to the shared
    // embeddings, which the encoder and decoder read as embed_tokens); the
    // relative position bias lives in each stack's first block.
    void t5()
    {
        std::set<std::string> hf{"shared.weight", "encoder.final_layer_norm.weight", "decoder.final_layer_norm.weight",
                                 "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                                 "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"};
        for (const char *a : {"encoder.block.0.layer.0.SelfAttention", "decoder.block.0.layer.0.SelfAttention",
                              "decoder.block.0.layer.1.EncDecAttention"})
            for (const char *w : {"q", "k", "v", "o"})
                hf.insert(std::string(a) + "." + w + ".weight");
        for (const char *n : {"encoder.block.0.layer.0", "encoder.block.0.layer.1", "decoder.block.0.layer.0",
                              "decoder.block.0.layer.1", "decoder.block.0.layer.2"})
            hf.insert(std::string(n) + ".layer_norm.weight");
        for (const char *f : {"encoder.block.0.layer.1", "decoder.block.0.layer.2"})
            for (const char *w : {"wi", "wo"})
                hf.insert(std::string(f) + ".DenseReluDense." + w + ".weight");
        const auto zoo = parameterNames("zoo:t5-base?layers=1&decoder_layers=1");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
    }

    // BartForConditionalGeneration (modeling_bart.py): the shared
    // embeddings (the LM head tied to them, final_logits_bias a buffer),
    // each stack's learned positions and layernorm_embedding, post-norm
    // layers whose attentions have biases.
    void bart()
    {
        std::set<std::string> hf{"model.shared.weight", "model.encoder.embed_positions.weight",
                                 "model.decoder.embed_positions.weight"};
        std::vector<std::string> modules{"model.encoder.layernorm_embedding", "model.decoder.layernorm_embedding"};
        for (const std::string stack : {"model.encoder.layers.0", "model.decoder.layers.0"}) {
            for (const char *m : {"self_attn_layer_norm", "fc1", "fc2", "final_layer_norm"})
                modules.push_back(stack + "." + m);
            std::vector<std::string> attentions{"self_attn"};
            if (stack.find("decoder") != std::string::npos) {
                attentions.push_back("encoder_attn");
                modules.push_back(stack + ".encoder_attn_layer_norm");
            }
            for (const auto &a : attentions)
                for (const char *p : {"q_proj", "k_proj", "v_proj", "out_proj"})
                    modules.push_back(stack + "." + a + "." + p);
        }
        for (const auto &m : modules) {
            hf.insert(m + ".weight");
            hf.insert(m + ".bias");
        }
        const auto zoo = configParameterNames("bart-base.json", R"({"encoder_layers": 1, "decoder_layers": 1})");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
    }

    // GPT2LMHeadModel: query, key and value are one Conv1D, attn.c_attn
    // ([hidden, 3 hidden], held as [3, hidden, hidden]), the projections
    // attn.c_proj, mlp.c_fc and mlp.c_proj; the LM head is tied to wte.
    void gpt2()
    {
        std::set<std::string> hf{"transformer.wte.weight", "transformer.wpe.weight"};
        for (const char *m : {"transformer.h.0.ln_1", "transformer.h.0.ln_2", "transformer.ln_f", "transformer.h.0.attn.c_attn",
                              "transformer.h.0.attn.c_proj", "transformer.h.0.mlp.c_fc", "transformer.h.0.mlp.c_proj"}) {
            hf.insert(std::string(m) + ".weight");
            hf.insert(std::string(m) + ".bias");
        }
        const auto zoo = parameterNames("zoo:gpt2?layers=1");
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
        // c_attn holds Hugging Face's [768, 2304] weight and [2304] bias
        // as [3, 768, 768] and [3, 1, 768]: the same elements.
        const auto g = io::loadModel("zoo:gpt2?layers=1");
        QCOMPARE(g.tensor(*g.findTensor("transformer.h.0.attn.c_attn.weight")).elementCount(), std::int64_t(768 * 2304));
        QCOMPARE(g.tensor(*g.findTensor("transformer.h.0.attn.c_attn.bias")).elementCount(), std::int64_t(2304));
    }

    // One layer of each config.json family, as named_parameters() lists it.
    void configFamilies_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("edits");
        QTest::addColumn<QStringList>("names");
        const QStringList llamaLayer{
            "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
            "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
            "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
            "model.norm.weight"};
        const QString oneLayer = R"({"num_hidden_layers": 1})";
        QTest::newRow("mistral") << "mistral-7b-v0.1.json" << oneLayer << (llamaLayer + QStringList{"lm_head.weight"});
        QTest::newRow("qwen2: q/k/v biases")
            << "qwen2-7b.json" << oneLayer
            << (llamaLayer + QStringList{"lm_head.weight", "model.layers.0.self_attn.q_proj.bias",
                                         "model.layers.0.self_attn.k_proj.bias",
                                         "model.layers.0.self_attn.v_proj.bias"});
        QTest::newRow("qwen3: q/k norms")
            << "qwen3-8b.json" << oneLayer
            << (llamaLayer + QStringList{"lm_head.weight", "model.layers.0.self_attn.q_norm.weight",
                                         "model.layers.0.self_attn.k_norm.weight"});
        QTest::newRow("granite: tied") << "granite-3.0-8b.json" << oneLayer << llamaLayer;
        QTest::newRow("gemma2: four norms, tied")
            << "gemma2-9b.json" << oneLayer
            << (llamaLayer + QStringList{"model.layers.0.pre_feedforward_layernorm.weight",
                                         "model.layers.0.post_feedforward_layernorm.weight"});
        QTest::newRow("phi3: fused projections")
            << "phi3-mini-4k.json" << oneLayer
            << QStringList{"model.embed_tokens.weight", "model.layers.0.self_attn.qkv_proj.weight",
                           "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_up_proj.weight",
                           "model.layers.0.mlp.down_proj.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
                           "lm_head.weight"};
        QTest::newRow("olmo: norms without parameters")
            << "olmo-7b.json" << oneLayer
            << QStringList{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
                           "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
                           "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
                           "lm_head.weight"};
        QTest::newRow("internlm2")
            << "internlm2-7b.json" << oneLayer
            << QStringList{"model.tok_embeddings.weight", "model.layers.0.attention.wqkv.weight",
                           "model.layers.0.attention.wo.weight", "model.layers.0.feed_forward.w1.weight",
                           "model.layers.0.feed_forward.w3.weight", "model.layers.0.feed_forward.w2.weight",
                           "model.layers.0.attention_norm.weight", "model.layers.0.ffn_norm.weight",
                           "model.norm.weight", "output.weight"};
        QStringList starcoder2;
        for (const char *m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                              "mlp.c_fc", "mlp.c_proj", "input_layernorm", "post_attention_layernorm"})
            for (const char *p : {"weight", "bias"})
                starcoder2 << QString("model.layers.0.%1.%2").arg(m, p);
        starcoder2 << "model.embed_tokens.weight" << "model.norm.weight" << "model.norm.bias";
        QTest::newRow("starcoder2") << "starcoder2-3b.json" << oneLayer << starcoder2;
        QStringList neox{"gpt_neox.embed_in.weight", "gpt_neox.final_layer_norm.weight",
                         "gpt_neox.final_layer_norm.bias", "embed_out.weight"};
        for (const char *m : {"input_layernorm", "post_attention_layernorm", "attention.query_key_value",
                              "attention.dense", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"})
            for (const char *p : {"weight", "bias"})
                neox << QString("gpt_neox.layers.0.%1.%2").arg(m, p);
        QTest::newRow("gpt_neox") << "pythia-1b.json" << oneLayer << neox;
        QStringList gptj{"transformer.wte.weight", "transformer.ln_f.weight", "transformer.ln_f.bias",
                         "lm_head.weight", "lm_head.bias", "transformer.h.0.ln_1.weight",
                         "transformer.h.0.ln_1.bias", "transformer.h.0.attn.q_proj.weight",
                         "transformer.h.0.attn.k_proj.weight", "transformer.h.0.attn.v_proj.weight",
                         "transformer.h.0.attn.out_proj.weight"};
        for (const char *m : {"mlp.fc_in", "mlp.fc_out"})
            for (const char *p : {"weight", "bias"})
                gptj << QString("transformer.h.0.%1.%2").arg(m, p);
        QTest::newRow("gptj") << "gpt-j-6b.json" << R"({"n_layer": 1})" << gptj;
        QStringList opt{"model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
                        "model.decoder.final_layer_norm.weight", "model.decoder.final_layer_norm.bias"};
        for (const char *m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                              "self_attn_layer_norm", "fc1", "fc2", "final_layer_norm"})
            for (const char *p : {"weight", "bias"})
                opt << QString("model.decoder.layers.0.%1.%2").arg(m, p);
        QTest::newRow("opt") << "opt-1.3b.json" << oneLayer << opt;
        QStringList bloom{"transformer.word_embeddings.weight"};
        for (const char *m : {"word_embeddings_layernorm", "ln_f"})
            for (const char *p : {"weight", "bias"})
                bloom << QString("transformer.%1.%2").arg(m, p);
        for (const char *m : {"input_layernorm", "self_attention.query_key_value", "self_attention.dense",
                              "post_attention_layernorm", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h"})
            for (const char *p : {"weight", "bias"})
                bloom << QString("transformer.h.0.%1.%2").arg(m, p);
        QTest::newRow("bloom") << "bloom-560m.json" << R"({"n_layer": 1})" << bloom;
        QTest::newRow("falcon")
            << "falcon-7b.json" << oneLayer
            << QStringList{"transformer.word_embeddings.weight", "transformer.h.0.input_layernorm.weight",
                           "transformer.h.0.input_layernorm.bias",
                           "transformer.h.0.self_attention.query_key_value.weight",
                           "transformer.h.0.self_attention.dense.weight", "transformer.h.0.mlp.dense_h_to_4h.weight",
                           "transformer.h.0.mlp.dense_4h_to_h.weight", "transformer.ln_f.weight",
                           "transformer.ln_f.bias"};
        QStringList bigcode{"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                            "transformer.ln_f.bias"};
        for (const char *m : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"})
            for (const char *p : {"weight", "bias"})
                bigcode << QString("transformer.h.0.%1.%2").arg(m, p);
        QTest::newRow("gpt_bigcode") << "starcoderbase-1b.json" << R"({"n_layer": 1})" << bigcode;
        QStringList qwenMoe = QStringList{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                                          "model.layers.0.input_layernorm.weight",
                                          "model.layers.0.post_attention_layernorm.weight",
                                          "model.layers.0.mlp.gate.weight",
                                          "model.layers.0.mlp.shared_expert_gate.weight"};
        for (const char *m : {"q_proj", "k_proj", "v_proj"})
            for (const char *p : {"weight", "bias"})
                qwenMoe << QString("model.layers.0.self_attn.%1.%2").arg(m, p);
        qwenMoe << "model.layers.0.self_attn.o_proj.weight";
        for (const char *e : {"experts.0", "experts.1", "shared_expert"})
            for (const char *m : {"gate_proj", "up_proj", "down_proj"})
                qwenMoe << QString("model.layers.0.mlp.%1.%2.weight").arg(e, m);
        QTest::newRow("qwen2_moe") << "qwen1.5-moe-a2.7b.json"
                                   << R"({"num_hidden_layers": 1, "num_experts": 2, "num_experts_per_tok": 1})"
                                   << qwenMoe;
        QStringList deepseek{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                             "model.layers.1.mlp.gate.weight"};
        for (const char *layer : {"0", "1"}) {
            for (const char *m : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                                  "self_attn.kv_a_proj_with_mqa", "self_attn.kv_a_layernorm", "self_attn.kv_b_proj",
                                  "self_attn.o_proj"})
                deepseek << QString("model.layers.%1.%2.weight").arg(layer, m);
        }
        for (const char *e : {"layers.0.mlp", "layers.1.mlp.experts.0", "layers.1.mlp.experts.1",
                              "layers.1.mlp.shared_experts"})
            for (const char *m : {"gate_proj", "up_proj", "down_proj"})
                deepseek << QString("model.%1.%2.weight").arg(e, m);
        QTest::newRow("deepseek_v2: a dense layer, then experts")
            << "deepseek-v2-lite.json" << R"({"num_hidden_layers": 2, "n_routed_experts": 2, "num_experts_per_tok": 1})"
            << deepseek;
    }
    void configFamilies()
    {
        QFETCH(QString, file);
        QFETCH(QString, edits);
        QFETCH(QStringList, names);
        std::set<std::string> hf;
        for (const auto &n : names)
            hf.insert(n.toStdString());
        QCOMPARE(hf.size(), std::size_t(names.size()));
        std::set<std::string> zoo;
        try {
            zoo = configParameterNames(file, edits);
        } catch (const std::exception &e) {
            QFAIL(e.what());
        }
        QVERIFY2(zoo == hf, describe(zoo, hf).c_str());
    }
};

QTEST_GUILESS_MAIN(TestHfNames)
#include "tst_hfnames.moc"
