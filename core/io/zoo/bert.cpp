#include "io/zoo/attention.h"
#include "io/zoo/families.h"
#include "io/zoo/graphbuilder.h"
#include "io/zoo/knobcheck.h"

#include <optional>

namespace tapestry::io::zoo {

namespace {

constexpr double kLayerNormEpsilon = 1e-12;

// One post-LayerNorm encoder layer with Hugging Face's module names.
ir::TensorId bertLayer(GraphBuilder &g, ir::TensorId x, const AttentionSpec &spec, std::int64_t ffn)
{
    const std::int64_t h = g.shape(x).back();
    g.push("attention");
    g.push("self");
    auto q = g.linear("query", x, h, true);
    auto k = g.linear("key", x, h, true);
    auto v = g.linear("value", x, h, true);
    auto context = attentionCore(g, q, k, v, spec);
    g.pop();
    g.push("output");
    auto o = g.linear("dense", context, h, true);
    auto y = g.layerNorm("LayerNorm", g.op("Add", {o, x}, g.shape(x)), kLayerNormEpsilon);
    g.pop();
    g.pop();
    g.push("intermediate");
    auto u = g.linear("dense", y, ffn, true);
    u = g.op("Gelu", {u}, g.shape(u));
    g.pop();
    g.push("output");
    auto d = g.linear("dense", u, h, true);
    auto z = g.layerNorm("LayerNorm", g.op("Add", {d, y}, g.shape(y)), kLayerNormEpsilon);
    g.pop();
    return z;
}

} // namespace

// BertForPreTraining: the encoder, the pooler, the masked-LM head (decoder
// tied to the word embeddings, with its own bias) and the next-sentence head;
// the loss is the sum of both. bert-large-uncased's published 335M is the
// encoder with pooler; the heads add 1.1M. fp32, as BERT was released.
ir::Graph buildBert(const std::string &name, const Knobs &knobs)
{
    return buildEncoder(name, EncoderHead::NextSentence, knobs);
}

// RobertaForMaskedLM has no pooler and no next-sentence head; its masked-LM
// head is lm_head/{dense, layer_norm, decoder, bias}. ElectraForPreTraining
// (the discriminator) has neither: discriminator_predictions/{dense,
// dense_prediction} give one logit per token, trained to tell replaced
// tokens by binary cross-entropy, mean(softplus(x) - x·y) over the tokens;
// its embeddings may be narrower than the layers (ELECTRA-small: 128 into
// 256), with electra/embeddings_project between.
ir::Graph buildEncoder(const std::string &name, EncoderHead head, const Knobs &knobs)
{
    const bool bert = head == EncoderHead::NextSentence;
    const bool electra = head == EncoderHead::Discriminator;
    const KnobCheck check(name, knobs);
    check.divides("heads", "hidden");
    check.atMost("seq", "positions");
    const std::int64_t layers = check["layers"], h = check["hidden"], heads = check["heads"],
                       b = check["batch"], s = check["seq"];
    const std::int64_t e = check.has("embedding") ? check["embedding"] : h;

    GraphBuilder g(name, ir::DType::F32);
    auto inputIds = g.input("input_ids", {b, s}, ir::DType::I64);
    auto tokenTypeIds = g.input("token_type_ids", {b, s}, ir::DType::I64);
    auto positionIds = g.input("position_ids", {1, s}, ir::DType::I64);
    // The discriminator's labels: 1 where the generator replaced the token.
    auto labels = electra ? g.input("labels", {b, s, 1}, ir::DType::F32) : g.input("labels", {b, s}, ir::DType::I64);
    std::optional<ir::TensorId> nextSentenceLabel;
    if (bert)
        nextSentenceLabel = g.input("next_sentence_label", {b}, ir::DType::I64);
    AttentionSpec spec;
    spec.heads = spec.kvHeads = heads;
    spec.headDim = h / heads;
    spec.scale = g.input("attention_scale", {}, ir::DType::F32);
    spec.mask = g.input("attention_mask", {b, 1, 1, s}, ir::DType::F32);  // padding: -inf on pad keys

    g.push(bert ? "bert" : electra ? "electra" : "roberta");
    g.push("embeddings");
    auto table = [&](const std::string &module, std::int64_t rows) {
        g.push(module);
        auto w = g.parameter("weight", {rows, e});
        g.pop();
        return w;
    };
    auto wordEmbeddings = table("word_embeddings", check["vocab"]);
    auto words = g.embedding("word_embeddings", wordEmbeddings, inputIds);
    auto positions = g.embedding("position_embeddings", table("position_embeddings", check["positions"]),
                                 positionIds);
    auto types = g.embedding("token_type_embeddings", table("token_type_embeddings", check["type_vocab"]),
                             tokenTypeIds);
    auto x = g.op("Add", {words, types}, g.shape(words));
    x = g.op("Add", {x, positions}, g.shape(words));
    x = g.layerNorm("LayerNorm", x, kLayerNormEpsilon);
    g.pop();
    if (e != h)
        x = g.linear("embeddings_project", x, h, true);
    g.push("encoder");
    for (std::int64_t i = 0; i < layers; ++i) {
        g.push("layer." + std::to_string(i));
        x = bertLayer(g, x, spec, check["ffn"]);
        g.pop();
    }
    g.pop();
    if (electra) {
        g.pop();
        g.push("discriminator_predictions");
        auto t = g.linear("dense", x, h, true);
        t = g.op("Gelu", {t}, g.shape(t));
        auto logits = g.linear("dense_prediction", t, 1, true);
        g.pop();
        g.push("loss");
        auto softplus = g.op("Softplus", {logits}, g.shape(logits));
        auto perToken = g.op("Sub", {softplus, g.op("Mul", {logits, labels}, g.shape(logits))}, g.shape(logits));
        auto loss = g.op("ReduceMean", {perToken}, {}, {{"keepdims", std::int64_t{0}}});
        g.pop();
        g.markOutput(loss);
        return g.take();
    }
    if (!bert) {
        g.pop();
        g.push("lm_head");
        auto t = g.linear("dense", x, h, true);
        t = g.op("Gelu", {t}, g.shape(t));
        t = g.layerNorm("layer_norm", t, kLayerNormEpsilon);
        g.push("decoder");
        auto logits = g.matmul(t, g.transpose(wordEmbeddings, {1, 0}));
        g.pop();
        logits = g.op("Add", {logits, g.parameter("bias", {check["vocab"]})}, g.shape(logits));
        g.pop();
        g.markOutput(g.crossEntropyLoss(logits, labels));
        return g.take();
    }
    g.push("pooler");
    auto first = g.op("Slice", {x}, {b, 1, h},
                      {{"starts", std::vector<std::int64_t>{0}}, {"ends", std::vector<std::int64_t>{1}},
                       {"axes", std::vector<std::int64_t>{1}}});
    auto pooled = g.linear("dense", g.reshape(first, {b, h}), h, true);
    pooled = g.op("Tanh", {pooled}, g.shape(pooled));
    g.pop();
    g.pop();

    g.push("cls");
    g.push("predictions");
    g.push("transform");
    auto t = g.linear("dense", x, h, true);
    t = g.op("Gelu", {t}, g.shape(t));
    t = g.layerNorm("LayerNorm", t, kLayerNormEpsilon);
    g.pop();
    g.push("decoder");
    auto logits = g.matmul(t, g.transpose(wordEmbeddings, {1, 0}));
    g.pop();
    logits = g.op("Add", {logits, g.parameter("bias", {check["vocab"]})}, g.shape(logits));
    g.pop();
    auto nsp = g.linear("seq_relationship", pooled, 2, true);
    g.pop();

    auto mlmLoss = g.crossEntropyLoss(logits, labels);
    auto nspLoss = g.crossEntropyLoss(nsp, *nextSentenceLabel);
    g.push("loss");
    auto total = g.op("Add", {mlmLoss, nspLoss}, {});
    g.pop();
    g.markOutput(total);
    return g.take();
}

} // namespace tapestry::io::zoo
