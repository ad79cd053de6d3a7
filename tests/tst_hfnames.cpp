// The zoo's parameters carry the names Hugging Face's modeling code gives
// them (named_parameters() of one layer of each, written out below from
// transformers' modeling_llama.py, modeling_mixtral.py, modeling_bert.py,
// modeling_t5.py and modeling_gpt2.py), so that an exported plan's module
// names match the modules of a Hugging Face model.
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
};

QTEST_GUILESS_MAIN(TestHfNames)
#include "tst_hfnames.moc"
