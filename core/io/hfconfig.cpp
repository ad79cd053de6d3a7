#include "io/hfconfig.h"

#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/zoo/decoder.h"
#include "io/zoo/families.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

namespace tapestry::io {

namespace {

using nlohmann::json;

// Reads typed fields of one config, failing with the file and the field.
class ConfigFields {
public:
    ConfigFields(const json &config, const std::string &input, std::string prefix = {})
        : m_config(config), m_input(input), m_prefix(std::move(prefix))
    {
    }

    [[noreturn]] void fail(const std::string &field, const std::string &problem) const
    {
        throw TapestryError(Error{m_input, m_prefix + field, problem});
    }

    // The object under `field` (DBRX's attn_config, ffn_config), its fields
    // named "field.key" in errors.
    ConfigFields nested(const std::string &field) const
    {
        if (!m_config.contains(field))
            fail(field, "missing field (an object)");
        if (!m_config.at(field).is_object())
            fail(field, "expected an object, got " + describe(m_config.at(field)));
        return ConfigFields(m_config.at(field), m_input, m_prefix + field + ".");
    }

    // A number in (0, most], absent or null giving `fallback`.
    double fractionOr(const std::string &field, double fallback, double most = 1.0) const
    {
        if (!has(field))
            return fallback;
        const json &v = m_config.at(field);
        if (!v.is_number())
            fail(field, "expected a number, got " + describe(v));
        const double x = v.get<double>();
        if (!(x > 0.0 && x <= most))
        {
            std::ostringstream range;
            range << "expected a number in (0, " << most << "], got " << v.dump();
            fail(field, range.str());
        }
        return x;
    }

    bool nonEmptyArray(const std::string &field) const
    {
        return has(field) && m_config.at(field).is_array() && !m_config.at(field).empty();
    }

    // The first of `fields` the config has (configs of one family name a
    // size differently across versions: n_head, num_attention_heads).
    std::string firstOf(std::initializer_list<const char *> fields) const
    {
        for (const char *field : fields)
            if (has(field))
                return field;
        return *fields.begin();
    }

    // Whether the array `field` holds the string `value`.
    bool arrayHolds(const std::string &field, const std::string &value) const
    {
        if (!has(field) || !m_config.at(field).is_array())
            return false;
        const json &a = m_config.at(field);
        return std::any_of(a.begin(), a.end(), [&](const json &v) { return v.is_string() && v.get<std::string>() == value; });
    }

    bool has(const std::string &field) const
    {
        return m_config.contains(field) && !m_config.at(field).is_null();
    }

    // A positive integer of at most `most`, checked as it is read: the
    // config's sizes are multiplied together before the zoo checks its knobs.
    std::int64_t positive(const std::string &field, std::int64_t most = zoo::kMaxKnob) const
    {
        if (!has(field))
            fail(field, "missing field (a positive integer)");
        const json &v = m_config.at(field);
        if (!v.is_number_integer())
            fail(field, "expected a positive integer, got " + describe(v));
        const auto n = v.get<std::int64_t>();
        if (n <= 0)
            fail(field, "expected a positive integer, got " + std::to_string(n));
        if (n > most)
            fail(field, field + "=" + std::to_string(n) + " exceeds " + std::to_string(most) +
                            ", the most Tapestry builds");
        return n;
    }

    // Optional field: absent or null gives `fallback`.
    std::int64_t positiveOr(const std::string &field, std::int64_t fallback) const
    {
        return has(field) ? positive(field) : fallback;
    }

    bool booleanOr(const std::string &field, bool fallback) const
    {
        if (!has(field))
            return fallback;
        const json &v = m_config.at(field);
        if (!v.is_boolean())
            fail(field, "expected true or false, got " + describe(v));
        return v.get<bool>();
    }

    std::string stringOr(const std::string &field, const std::string &fallback) const
    {
        if (!has(field))
            return fallback;
        const json &v = m_config.at(field);
        if (!v.is_string())
            fail(field, "expected a string, got " + describe(v));
        return v.get<std::string>();
    }

private:
    static std::string describe(const json &v)
    {
        std::string text = v.dump();
        if (text.size() > 40)
            text = text.substr(0, 37) + "...";
        return std::string(v.type_name()) + " " + text;
    }

    const json &m_config;
    const std::string &m_input;
    std::string m_prefix;
};

// A config's sizes as zoo knobs, and for each knob the config field it came
// from, so that a knob error names the field the user has to fix. A decoder
// family carries its wiring; an encoder its pre-training heads.
struct ConfigKnobs {
    std::string family;
    zoo::Knobs knobs;
    std::vector<std::pair<std::string, std::string>> fields;  // knob, field
    std::int64_t context = 0;                                // 0: no context length
    std::optional<zoo::DecoderArch> decoder;
    std::optional<zoo::EncoderHead> encoder;
};

void set(ConfigKnobs &c, const std::string &knob, const std::string &field, std::int64_t value)
{
    c.knobs[knob] = value;
    c.fields.emplace_back(knob, field);
}

void take(ConfigKnobs &c, const ConfigFields &f, const std::string &knob, const std::string &field)
{
    set(c, knob, field, f.positive(field, zoo::knobLimit(knob)));
}

// The first of `fields` the config has, as `knob`.
void takeAny(ConfigKnobs &c, const ConfigFields &f, const std::string &knob,
             std::initializer_list<const char *> fields)
{
    take(c, f, knob, f.firstOf(fields));
}

void tied(ConfigKnobs &c, const ConfigFields &f, bool fallback)
{
    set(c, "tied_embeddings", "tie_word_embeddings", f.booleanOr("tie_word_embeddings", fallback) ? 1 : 0);
}

zoo::Activation activation(const ConfigFields &f, const std::string &field, const std::string &fallback)
{
    const std::string name = f.stringOr(field, fallback);
    if (name == "silu" || name == "swish")
        return zoo::Activation::Silu;
    if (name == "gelu")
        return zoo::Activation::Gelu;
    if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast" || name == "gelu_approximate")
        return zoo::Activation::GeluTanh;
    if (name == "relu")
        return zoo::Activation::Relu;
    f.fail(field, "activation '" + name + "' is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh, relu)");
}

ConfigKnobs gpt2(const ConfigFields &f)
{
    ConfigKnobs c{"gpt2", {}, {}, 0, {}, {}};
    take(c, f, "layers", "n_layer");
    take(c, f, "hidden", "n_embd");
    take(c, f, "heads", "n_head");
    take(c, f, "vocab", "vocab_size");
    take(c, f, "positions", "n_positions");
    // n_inner is null in the published configs: 4 x n_embd.
    set(c, "ffn", "n_inner", f.positiveOr("n_inner", 4 * c.knobs["hidden"]));
    c.context = c.knobs["positions"];
    return c;
}

ConfigKnobs bert(const ConfigFields &f, zoo::EncoderHead head)
{
    ConfigKnobs c{"bert", {}, {}, 0, {}, head};
    take(c, f, "layers", "num_hidden_layers");
    take(c, f, "hidden", "hidden_size");
    take(c, f, "heads", "num_attention_heads");
    take(c, f, "ffn", "intermediate_size");
    take(c, f, "vocab", "vocab_size");
    take(c, f, "positions", "max_position_embeddings");
    take(c, f, "type_vocab", "type_vocab_size");
    if (head == zoo::EncoderHead::Discriminator) {
        if (f.arrayHolds("architectures", "ElectraForMaskedLM"))
            f.fail("architectures", "ELECTRA's generator (ElectraForMaskedLM) is not built; its discriminator "
                                    "(ElectraForPreTraining) is");
        set(c, "embedding", "embedding_size", f.positiveOr("embedding_size", c.knobs["hidden"]));
    }
    c.context = c.knobs["positions"];
    if (head == zoo::EncoderHead::MaskedLm && c.context > 2)
        c.context -= 2;  // RoBERTa's positions start after the padding index: 514 rows, 512 tokens
    return c;
}

ConfigKnobs t5(const ConfigFields &f)
{
    const std::string ffnKind = f.stringOr("feed_forward_proj", "relu");
    if (ffnKind != "relu" && ffnKind != "gated-gelu")
        f.fail("feed_forward_proj", "'" + ffnKind + "' is not supported ('relu' of T5 v1.0, 'gated-gelu' of "
                                                    "T5 v1.1, Flan-T5 and mT5)");
    ConfigKnobs c{"t5", {}, {}, 0, {}, {}};
    take(c, f, "layers", "num_layers");
    set(c, "decoder_layers", "num_decoder_layers", f.positiveOr("num_decoder_layers", c.knobs["layers"]));
    take(c, f, "hidden", "d_model");
    take(c, f, "ffn", "d_ff");
    take(c, f, "heads", "num_heads");
    take(c, f, "head_dim", "d_kv");
    take(c, f, "vocab", "vocab_size");
    if (ffnKind == "gated-gelu")
        set(c, "gated", "feed_forward_proj", 1);
    if (!f.booleanOr("tie_word_embeddings", true))
        set(c, "tied_embeddings", "tie_word_embeddings", 0);
    return c;
}

// BART's post-LayerNorm encoder-decoder. Its pre-LayerNorm relatives
// (mBART: normalize_before, add_final_layer_norm) are other graphs.
ConfigKnobs bart(const ConfigFields &f)
{
    for (const char *field : {"normalize_before", "add_final_layer_norm"})
        if (f.booleanOr(field, false))
            f.fail(field, "a pre-LayerNorm BART (mBART's) is not built; BART's post-LayerNorm one is");
    const std::string act = f.stringOr("activation_function", "gelu");
    if (act != "gelu")
        f.fail("activation_function", "activation '" + act + "' is not supported (BART's gelu is)");
    ConfigKnobs c{"bart", {}, {}, 0, {}, {}};
    take(c, f, "layers", "encoder_layers");
    take(c, f, "decoder_layers", "decoder_layers");
    take(c, f, "hidden", "d_model");
    take(c, f, "heads", "encoder_attention_heads");
    take(c, f, "ffn", "encoder_ffn_dim");
    take(c, f, "vocab", "vocab_size");
    take(c, f, "positions", "max_position_embeddings");
    // One size for both stacks, as every published BART has.
    for (const auto &[field, knob] : {std::pair<const char *, const char *>{"decoder_attention_heads", "heads"},
                                      {"decoder_ffn_dim", "ffn"}})
        if (f.positiveOr(field, c.knobs[knob]) != c.knobs[knob])
            f.fail(field, std::string(field) + " differs from the encoder's; one size for both stacks is built");
    if (f.booleanOr("scale_embedding", false))
        set(c, "scale_embedding", "scale_embedding", 1);
    c.context = c.knobs["positions"];
    return c;
}

// The sizes every LLaMA-like config names alike.
ConfigKnobs llamaSizes(const ConfigFields &f, const std::string &family, bool tiedByDefault)
{
    ConfigKnobs c{family, {}, {}, 0, zoo::DecoderArch{}, {}};
    take(c, f, "layers", "num_hidden_layers");
    take(c, f, "hidden", "hidden_size");
    take(c, f, "heads", "num_attention_heads");
    set(c, "kv_heads", "num_key_value_heads", f.positiveOr("num_key_value_heads", c.knobs["heads"]));
    if (f.has("head_dim"))
        take(c, f, "head_dim", "head_dim");
    take(c, f, "ffn", "intermediate_size");
    take(c, f, "vocab", "vocab_size");
    c.context = f.positive("max_position_embeddings");
    tied(c, f, tiedByDefault);
    c.decoder->epsilon = f.fractionOr(f.firstOf({"rms_norm_eps", "layer_norm_eps"}), 1e-5);
    return c;
}

// LLaMA and the decoders built like it. The fields that change the
// parameters are read; those that change values only (rope scaling,
// sliding windows, logit soft-capping, Granite's multipliers) leave the
// graph as it is.
ConfigKnobs llama(const ConfigFields &f, const std::string &family)
{
    const bool gemma = family == "gemma" || family == "gemma2";
    ConfigKnobs c = llamaSizes(f, family, gemma);
    zoo::DecoderArch &a = *c.decoder;
    a.qkvBias = a.outBias = f.booleanOr("attention_bias", false);
    a.mlpBias = f.booleanOr("mlp_bias", false);
    a.activation = activation(f, f.firstOf({"hidden_act", "hidden_activation"}), gemma ? "gelu_pytorch_tanh" : "silu");
    if (gemma) {
        // Gemma's hidden_act "gelu" is the tanh form in its reference code.
        a.activation = zoo::Activation::GeluTanh;
        a.scaleEmbedding = true;
        if (family == "gemma2")
            a.block = zoo::BlockKind::Sandwich;
    } else if (family == "qwen2") {
        a.qkvBias = true;
    } else if (family == "qwen3") {
        a.qkNorm = true;
    } else if (family == "phi3") {
        a.attention = zoo::AttentionKind::Fused;
        a.mlp = zoo::MlpKind::GatedFused;
    } else if (family == "olmo") {
        a.norm = zoo::NormKind::Parameterless;
        a.qkvBias = a.outBias = false;
    } else if (family == "internlm2") {
        a.attention = zoo::AttentionKind::Fused;
        a.qkvBias = a.outBias = f.booleanOr("bias", false);
        auto &n = a.names;
        n.embed = "tok_embeddings";
        n.attention = "attention";
        n.qkv = "wqkv";
        n.o = "wo";
        n.inputNorm = "attention_norm";
        n.postNorm = "ffn_norm";
        n.mlp = "feed_forward";
        n.gate = "w1";
        n.up = "w3";
        n.down = "w2";
        n.head = "output";
    } else if (family == "starcoder2") {
        a.norm = zoo::NormKind::Layer;
        a.epsilon = f.fractionOr("norm_epsilon", 1e-5);
        a.qkvBias = a.outBias = a.mlpBias = f.booleanOr("use_bias", true);
        a.mlp = zoo::MlpKind::Plain;
        a.activation = activation(f, "hidden_act", "gelu_pytorch_tanh");
        a.names.up = "c_fc";
        a.names.down = "c_proj";
        c.knobs["tied_embeddings"] = f.booleanOr("tie_word_embeddings", true) ? 1 : 0;
    }
    return c;
}

// Mixtures of experts on the LLaMA decoder.
ConfigKnobs mixtral(const ConfigFields &f, const std::string &family)
{
    ConfigKnobs c = llamaSizes(f, family, false);
    zoo::DecoderArch &a = *c.decoder;
    a.moe = zoo::MoeKind::Routed;
    a.names.mlp = "block_sparse_moe";
    a.names.gate = "w1";
    a.names.up = "w3";
    a.names.down = "w2";
    take(c, f, "experts", "num_local_experts");
    set(c, "top_k", "num_experts_per_tok", f.positiveOr("num_experts_per_tok", 2));
    return c;
}

void qwenExperts(ConfigKnobs &c, const ConfigFields &f)
{
    zoo::DecoderArch &a = *c.decoder;
    if (f.positiveOr("decoder_sparse_step", 1) != 1)
        f.fail("decoder_sparse_step", "only a mixture in every layer (1) is supported");
    if (f.nonEmptyArray("mlp_only_layers"))
        f.fail("mlp_only_layers", "only a mixture in every layer is supported");
    take(c, f, "experts", "num_experts");
    take(c, f, "top_k", "num_experts_per_tok");
    take(c, f, "ffn", "moe_intermediate_size");
    a.renormaliseTopK = f.booleanOr("norm_topk_prob", false);
}

ConfigKnobs qwenMoe(const ConfigFields &f, const std::string &family)
{
    ConfigKnobs c = llama(f, family == "qwen2_moe" ? "qwen2" : "qwen3");
    c.family = family;
    c.knobs.erase("ffn");
    qwenExperts(c, f);
    zoo::DecoderArch &a = *c.decoder;
    if (family == "qwen2_moe") {
        a.moe = zoo::MoeKind::SharedGated;
        take(c, f, "shared_ffn", "shared_expert_intermediate_size");
    } else {
        a.moe = zoo::MoeKind::Routed;
    }
    return c;
}

// DeepSeek V2 and V3: multi-head latent attention, the first layers dense,
// the rest routed experts beside shared ones.
ConfigKnobs deepseek(const ConfigFields &f, const std::string &family)
{
    ConfigKnobs c = llamaSizes(f, family, false);
    zoo::DecoderArch &a = *c.decoder;
    a.attention = zoo::AttentionKind::Latent;
    a.moe = zoo::MoeKind::Shared;
    a.names.sharedExpert = "shared_experts";
    a.renormaliseTopK = f.booleanOr("norm_topk_prob", false);
    a.sigmoidRouter = f.stringOr("scoring_func", "softmax") == "sigmoid";
    a.routerBias = f.stringOr("topk_method", "greedy") == "noaux_tc";
    if (f.positiveOr("moe_layer_freq", 1) != 1)
        f.fail("moe_layer_freq", "only a mixture in every layer after the dense ones (1) is supported");
    c.knobs.erase("ffn");
    c.knobs.erase("head_dim");
    set(c, "dense_ffn", "intermediate_size", f.positive("intermediate_size"));
    take(c, f, "ffn", "moe_intermediate_size");
    take(c, f, "experts", "n_routed_experts");
    take(c, f, "top_k", "num_experts_per_tok");
    set(c, "shared_ffn", "n_shared_experts",
        f.positive("n_shared_experts", zoo::kMaxExperts) * c.knobs["ffn"]);
    if (f.has("first_k_dense_replace"))
        take(c, f, "dense_layers", "first_k_dense_replace");
    take(c, f, "kv_lora", "kv_lora_rank");
    if (f.has("q_lora_rank"))
        take(c, f, "q_lora", "q_lora_rank");
    take(c, f, "rope_dim", "qk_rope_head_dim");
    take(c, f, "head_dim", "qk_nope_head_dim");
    take(c, f, "v_head_dim", "v_head_dim");
    return c;
}

// GPT-NeoX (Pythia): parallel attention and MLP with a norm each, fused
// q/k/v per head, rotary on a fraction of each head, an untied embed_out.
ConfigKnobs gptNeox(const ConfigFields &f)
{
    ConfigKnobs c{"gpt_neox", {}, {}, 0, zoo::DecoderArch{}, {}};
    take(c, f, "layers", "num_hidden_layers");
    take(c, f, "hidden", "hidden_size");
    take(c, f, "heads", "num_attention_heads");
    take(c, f, "ffn", "intermediate_size");
    take(c, f, "vocab", "vocab_size");
    c.context = f.positive("max_position_embeddings");
    tied(c, f, false);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::Layer;
    a.epsilon = f.fractionOr("layer_norm_eps", 1e-5);
    a.attention = zoo::AttentionKind::Fused;
    a.qkvBias = a.outBias = f.booleanOr("attention_bias", true);
    a.mlpBias = true;
    a.block = f.booleanOr("use_parallel_residual", true) ? zoo::BlockKind::ParallelTwo : zoo::BlockKind::Sequential;
    a.mlp = zoo::MlpKind::Plain;
    a.activation = activation(f, "hidden_act", "gelu");
    const std::int64_t headDim = c.knobs["hidden"] / c.knobs["heads"];
    const auto rotary = static_cast<std::int64_t>(static_cast<double>(headDim) * f.fractionOr("rotary_pct", 1.0));
    if (rotary < headDim)
        set(c, "rotary_dim", "rotary_pct", std::max<std::int64_t>(2, rotary - rotary % 2));
    auto &n = a.names;
    n.root = {"gpt_neox"};
    n.embed = "embed_in";
    n.attention = "attention";
    n.qkv = "query_key_value";
    n.o = "dense";
    n.up = "dense_h_to_4h";
    n.down = "dense_4h_to_h";
    n.finalNorm = "final_layer_norm";
    n.head = "embed_out";
    return c;
}

// GPT-J: one norm feeding attention and MLP in parallel, rotary on the
// leading rotary_dim dims of each head, an LM head with a bias.
ConfigKnobs gptj(const ConfigFields &f)
{
    ConfigKnobs c{"gptj", {}, {}, 0, zoo::DecoderArch{}, {}};
    take(c, f, "layers", "n_layer");
    take(c, f, "hidden", "n_embd");
    take(c, f, "heads", "n_head");
    take(c, f, "vocab", "vocab_size");
    set(c, "ffn", "n_inner", f.positiveOr("n_inner", 4 * c.knobs["hidden"]));
    if (f.has("rotary_dim"))
        take(c, f, "rotary_dim", "rotary_dim");
    c.context = f.positive("n_positions");
    tied(c, f, false);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::Layer;
    a.epsilon = f.fractionOr("layer_norm_epsilon", 1e-5);
    a.block = zoo::BlockKind::ParallelShared;
    a.mlp = zoo::MlpKind::Plain;
    a.mlpBias = true;
    a.headBias = true;
    a.activation = activation(f, "activation_function", "gelu_new");
    auto &n = a.names;
    n.root = {"transformer"};
    n.embed = "wte";
    n.layer = "h.";
    n.inputNorm = "ln_1";
    n.attention = "attn";
    n.o = "out_proj";
    n.up = "fc_in";
    n.down = "fc_out";
    n.finalNorm = "ln_f";
    return c;
}

// OPT: learned positions (two rows past the context), pre-norm layers with
// biases everywhere, ReLU MLP, tied head.
ConfigKnobs opt(const ConfigFields &f)
{
    ConfigKnobs c{"opt", {}, {}, 0, zoo::DecoderArch{}, {}};
    take(c, f, "layers", "num_hidden_layers");
    take(c, f, "hidden", "hidden_size");
    take(c, f, "heads", "num_attention_heads");
    take(c, f, "ffn", "ffn_dim");
    take(c, f, "vocab", "vocab_size");
    take(c, f, "positions", "max_position_embeddings");
    c.context = c.knobs["positions"];
    if (f.positiveOr("word_embed_proj_dim", c.knobs["hidden"]) != c.knobs["hidden"])
        f.fail("word_embed_proj_dim", "an embedding narrower than hidden_size (OPT-350m's project_in/out) "
                                      "is not supported");
    if (!f.booleanOr("do_layer_norm_before", true))
        f.fail("do_layer_norm_before", "post-norm OPT layers are not supported");
    tied(c, f, true);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::Layer;
    a.positions = zoo::PositionKind::Learned;
    a.positionOffset = 2;
    a.qkvBias = a.outBias = a.mlpBias = f.booleanOr("enable_bias", true);
    a.mlp = zoo::MlpKind::Plain;
    a.activation = activation(f, "activation_function", "relu");
    auto &n = a.names;
    n.root = {"model", "decoder"};
    n.inputNorm = "self_attn_layer_norm";
    n.o = "out_proj";
    n.postNorm = "final_layer_norm";
    n.mlp = "";
    n.up = "fc1";
    n.down = "fc2";
    n.finalNorm = "final_layer_norm";
    return c;
}

// The module names BLOOM and Falcon share (Falcon grew out of BLOOM's code).
zoo::DecoderNames bloomNames()
{
    zoo::DecoderNames n;
    n.root = {"transformer"};
    n.embed = "word_embeddings";
    n.layer = "h.";
    n.attention = "self_attention";
    n.qkv = "query_key_value";
    n.o = "dense";
    n.up = "dense_h_to_4h";
    n.down = "dense_4h_to_h";
    n.finalNorm = "ln_f";
    return n;
}

// BLOOM: ALiBi in place of positions, a norm after the embedding, fused
// q/k/v per head, tied head.
ConfigKnobs bloom(const ConfigFields &f)
{
    ConfigKnobs c{"bloom", {}, {}, 0, zoo::DecoderArch{}, {}};
    takeAny(c, f, "layers", {"n_layer", "num_hidden_layers"});
    takeAny(c, f, "hidden", {"hidden_size", "n_embed"});
    takeAny(c, f, "heads", {"n_head", "num_attention_heads"});
    take(c, f, "vocab", "vocab_size");
    set(c, "ffn", "hidden_size", 4 * c.knobs["hidden"]);
    tied(c, f, true);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::Layer;
    a.epsilon = f.fractionOr("layer_norm_epsilon", 1e-5);
    a.positions = zoo::PositionKind::Alibi;
    a.embeddingNorm = true;
    a.attention = zoo::AttentionKind::Fused;
    a.qkvBias = a.outBias = a.mlpBias = true;
    a.mlp = zoo::MlpKind::Plain;
    a.activation = zoo::Activation::GeluTanh;
    a.names = bloomNames();
    a.names.embedNorm = "word_embeddings_layernorm";
    return c;
}

// Falcon: fused q/k/v with one key/value head (7B) or grouped ones (the new
// decoder architecture of 40B and 180B), attention and MLP in parallel.
ConfigKnobs falcon(const ConfigFields &f)
{
    ConfigKnobs c{"falcon", {}, {}, 0, zoo::DecoderArch{}, {}};
    takeAny(c, f, "layers", {"num_hidden_layers", "n_layer"});
    take(c, f, "hidden", "hidden_size");
    takeAny(c, f, "heads", {"num_attention_heads", "n_head"});
    take(c, f, "vocab", "vocab_size");
    set(c, "ffn", "ffn_hidden_size", f.positiveOr("ffn_hidden_size", 4 * c.knobs["hidden"]));
    const bool newArchitecture = f.booleanOr("new_decoder_architecture", false);
    if (newArchitecture)
        set(c, "kv_heads", "num_kv_heads", f.positiveOr("num_kv_heads", c.knobs["heads"]));
    else if (f.booleanOr("multi_query", true))
        set(c, "kv_heads", "multi_query", 1);
    if (f.booleanOr("alibi", false))
        f.fail("alibi", "Falcon with ALiBi is not supported (rotary only)");
    c.context = f.positiveOr("max_position_embeddings", 2048);
    tied(c, f, true);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::Layer;
    a.epsilon = f.fractionOr("layer_norm_epsilon", 1e-5);
    a.attention = zoo::AttentionKind::Fused;
    a.qkvBias = a.outBias = a.mlpBias = f.booleanOr("bias", false);
    a.mlp = zoo::MlpKind::Plain;
    a.activation = zoo::Activation::Gelu;
    const bool parallel = f.booleanOr("parallel_attn", true);
    a.block = !parallel ? zoo::BlockKind::Sequential
              : newArchitecture ? zoo::BlockKind::ParallelTwo
                                : zoo::BlockKind::ParallelShared;
    a.names = bloomNames();
    if (newArchitecture) {
        a.names.inputNorm = "ln_attn";
        a.names.postNorm = "ln_mlp";
    }
    return c;
}

// GPT-BigCode (SantaCoder, StarCoder 1): GPT-2 with multi-query attention
// (c_attn holds all queries, then the one key and value).
ConfigKnobs gptBigcode(const ConfigFields &f)
{
    ConfigKnobs c{"gpt_bigcode", {}, {}, 0, zoo::DecoderArch{}, {}};
    take(c, f, "layers", "n_layer");
    take(c, f, "hidden", "n_embd");
    take(c, f, "heads", "n_head");
    take(c, f, "vocab", "vocab_size");
    take(c, f, "positions", "n_positions");
    set(c, "ffn", "n_inner", f.positiveOr("n_inner", 4 * c.knobs["hidden"]));
    if (f.booleanOr("multi_query", true))
        set(c, "kv_heads", "multi_query", 1);
    c.context = c.knobs["positions"];
    tied(c, f, true);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::Layer;
    a.epsilon = f.fractionOr("layer_norm_epsilon", 1e-5);
    a.positions = zoo::PositionKind::Learned;
    a.attention = zoo::AttentionKind::Fused;
    a.qkvBias = a.outBias = a.mlpBias = true;
    a.mlp = zoo::MlpKind::Plain;
    a.activation = activation(f, "activation_function", "gelu_pytorch_tanh");
    auto &n = a.names;
    n.root = {"transformer"};
    n.embed = "wte";
    n.positions = "wpe";
    n.layer = "h.";
    n.inputNorm = "ln_1";
    n.attention = "attn";
    n.qkv = "c_attn";
    n.o = "c_proj";
    n.postNorm = "ln_2";
    n.up = "c_fc";
    n.down = "c_proj";
    n.finalNorm = "ln_f";
    return c;
}

// DBRX: fused q/k/v, LayerNorms without bias, 16 experts of which 4 route
// each token; the sizes sit in attn_config and ffn_config.
ConfigKnobs dbrx(const ConfigFields &f)
{
    ConfigKnobs c{"dbrx", {}, {}, 0, zoo::DecoderArch{}, {}};
    take(c, f, "layers", "n_layers");
    take(c, f, "hidden", "d_model");
    take(c, f, "heads", "n_heads");
    take(c, f, "vocab", "vocab_size");
    c.context = f.positive("max_seq_len");
    const ConfigFields attn = f.nested("attn_config"), ffn = f.nested("ffn_config");
    set(c, "kv_heads", "attn_config.kv_n_heads", attn.positiveOr("kv_n_heads", c.knobs["heads"]));
    set(c, "ffn", "ffn_config.ffn_hidden_size", ffn.positive("ffn_hidden_size"));
    set(c, "experts", "ffn_config.moe_num_experts", ffn.positive("moe_num_experts", zoo::kMaxExperts));
    set(c, "top_k", "ffn_config.moe_top_k", ffn.positiveOr("moe_top_k", 1));
    tied(c, f, false);
    zoo::DecoderArch &a = *c.decoder;
    a.norm = zoo::NormKind::LayerNoBias;
    a.attention = zoo::AttentionKind::Fused;
    a.moe = zoo::MoeKind::Routed;
    auto &n = a.names;
    n.root = {"transformer"};
    n.embed = "wte";
    n.layer = "blocks.";
    n.inputNorm = "norm_attn_norm.norm_1";
    n.attention = "norm_attn_norm.attn";
    n.qkv = "Wqkv";
    n.o = "out_proj";
    n.postNorm = "norm_attn_norm.norm_2";
    n.mlp = "ffn";
    n.router = "router.layer";
    n.experts = "experts.mlp.";
    n.gate = "w1";
    n.up = "v1";
    n.down = "w2";
    n.finalNorm = "norm_f";
    return c;
}

using Reader = std::function<ConfigKnobs(const ConfigFields &, const std::string &type)>;

struct Architecture {
    const char *modelType;  // config.json "model_type"
    const char *prefix;     // of an "architectures" entry: GPT2LMHeadModel, BertForMaskedLM, ...
    std::int64_t longestDefaultSeq;
    Reader read;
};

const std::vector<Architecture> &architectures()
{
    using zoo::EncoderHead;
    auto as = [](auto reader) { return Reader([reader](const ConfigFields &f, const std::string &) { return reader(f); }); };
    auto llamaLike = Reader([](const ConfigFields &f, const std::string &type) { return llama(f, type); });
    static const std::vector<Architecture> kArchitectures{
        // LLaMA-like decoders
        {"llama", "Llama", 8192, llamaLike},
        {"mistral", "Mistral", 8192, llamaLike},
        {"qwen2", "Qwen2", 8192, llamaLike},
        {"qwen3", "Qwen3", 8192, llamaLike},
        {"gemma", "Gemma", 8192, llamaLike},
        {"gemma2", "Gemma2", 8192, llamaLike},
        {"phi3", "Phi3", 4096, llamaLike},
        {"olmo", "Olmo", 4096, llamaLike},
        {"internlm2", "InternLM2", 8192, llamaLike},
        {"granite", "Granite", 4096, llamaLike},
        {"starcoder2", "Starcoder2", 4096, llamaLike},
        // GPT-like decoders
        {"gpt2", "GPT2", 1024, as(gpt2)},
        {"gpt_neox", "GPTNeoX", 2048, as(gptNeox)},
        {"gptj", "GPTJ", 2048, as(gptj)},
        {"opt", "OPT", 2048, as(opt)},
        {"bloom", "Bloom", 2048, as(bloom)},
        {"falcon", "Falcon", 2048, as(falcon)},
        {"gpt_bigcode", "GPTBigCode", 2048, as(gptBigcode)},
        // encoders and encoder-decoders
        {"bert", "Bert", 512, as([](const ConfigFields &f) { return bert(f, EncoderHead::NextSentence); })},
        {"roberta", "Roberta", 512, as([](const ConfigFields &f) { return bert(f, EncoderHead::MaskedLm); })},
        {"electra", "Electra", 512, as([](const ConfigFields &f) { return bert(f, EncoderHead::Discriminator); })},
        {"t5", "T5", 512, as(t5)},
        {"mt5", "MT5", 512, as(t5)},
        {"bart", "Bart", 1024, as(bart)},
        // mixtures of experts
        {"mixtral", "Mixtral", 4096, Reader(mixtral)},
        {"qwen2_moe", "Qwen2Moe", 4096, Reader(qwenMoe)},
        {"qwen3_moe", "Qwen3Moe", 4096, Reader(qwenMoe)},
        {"deepseek_v2", "DeepseekV2", 4096, Reader(deepseek)},
        {"deepseek_v3", "DeepseekV3", 4096, Reader(deepseek)},
        {"dbrx", "Dbrx", 4096, as(dbrx)},
    };
    return kArchitectures;
}

std::string supported()
{
    std::string s;
    for (const auto &a : architectures())
        s += (s.empty() ? "" : ", ") + std::string(a.modelType);
    return s;
}

// The longest prefix match of an "architectures" entry: Qwen2Moe before
// Qwen2, Gemma2 before Gemma.
const Architecture *byClassName(const std::string &name)
{
    const Architecture *best = nullptr;
    for (const auto &a : architectures())
        if (name.rfind(a.prefix, 0) == 0 && (!best || std::strlen(a.prefix) > std::strlen(best->prefix)))
            best = &a;
    return best;
}

// A config's architecture, and the note to give when it was not read by
// its own model_type.
std::pair<const Architecture *, std::string> architecture(const json &config, const ConfigFields &f)
{
    std::string type;
    if (config.contains("model_type")) {
        type = f.stringOr("model_type", "");
        for (const auto &a : architectures())
            if (type == a.modelType)
                return {&a, {}};
    }
    std::vector<std::string> classes;
    if (config.contains("architectures")) {
        const json &names = config.at("architectures");
        if (!names.is_array())
            f.fail("architectures", "expected an array of class names");
        for (const auto &name : names) {
            if (!name.is_string())
                f.fail("architectures", "expected an array of class names");
            classes.push_back(name.get<std::string>());
        }
    }
    for (const auto &name : classes)
        if (const Architecture *a = byClassName(name))
            return {a, type.empty() ? std::string()
                                    : "model_type '" + type + "' is not one Tapestry knows; read as " +
                                          a->modelType + " from architectures " + name};
    // A causal LM that names its sizes as LLaMA does is tried as LLaMA.
    static constexpr std::array<const char *, 6> kLlamaFields{
        "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "rms_norm_eps", "vocab_size"};
    const bool llamaShaped =
        !classes.empty() &&
        std::all_of(classes.begin(), classes.end(), [](const std::string &n) { return n.ends_with("ForCausalLM"); }) &&
        std::all_of(kLlamaFields.begin(), kLlamaFields.end(), [&](const char *k) { return f.has(k); });
    if (llamaShaped)
        return {&architectures().front(),
                "model_type '" + type + "' (" + classes.front() +
                    ") is not one Tapestry knows; its fields are LLaMA's, so it is read as llama: "
                    "check the parameter count"};
    if (!type.empty() || classes.empty())
        f.fail("model_type", "unsupported model_type '" + type + "' (supported: " + supported() + ")");
    f.fail("architectures", "no supported architecture in " + config.at("architectures").dump() + " (supported: " +
                                supported() + ")");
}

// "heads=5 does not divide hidden=768" -> "num_attention_heads=5 does not
// divide hidden_size=768": the user edits fields, not knobs.
std::string inFieldNames(const std::string &problem, const ConfigKnobs &c)
{
    std::istringstream words(problem);
    std::string word, out;
    while (words >> word) {
        const auto eq = word.find('=');
        if (eq != std::string::npos)
            for (const auto &[knob, field] : c.fields)
                if (word.compare(0, eq, knob) == 0 && eq == knob.size()) {
                    word = field + word.substr(eq);
                    break;
                }
        out += (out.empty() ? "" : " ") + word;
    }
    return out;
}

std::string fieldOf(const std::string &knob, const ConfigKnobs &c)
{
    for (const auto &[k, field] : c.fields)
        if (k == knob)
            return field;
    return knob;
}

} // namespace

bool isHfConfig(const std::string &text)
{
    const json top = json::parse(
        text,
        [](int depth, json::parse_event_t event, json &parsed) {
            if (depth != 1 || event != json::parse_event_t::key)
                return true;
            const auto &key = parsed.get_ref<const std::string &>();
            return key == "format" || key == "model_type" || key == "architectures";
        },
        false);
    return top.is_object() && !top.contains("format") &&
           (top.contains("model_type") || top.contains("architectures"));
}

ir::Graph readHfConfig(const std::string &text, const std::string &input, const LoadOptions &options)
{
    json config;
    try {
        config = json::parse(text);
    } catch (const json::exception &e) {  // a syntax error, or a number past a double's range (1e999)
        throw TapestryError(Error{input, {}, std::string("invalid JSON: ") + e.what()});
    }
    if (!config.is_object() || !(config.contains("model_type") || config.contains("architectures")))
        throw TapestryError(Error{input, {}, "not a Hugging Face config.json (no model_type or architectures)"});
    const ConfigFields fields(config, input);
    const auto [arch, note] = architecture(config, fields);
    const std::string type = fields.stringOr("model_type", "");
    ConfigKnobs c = arch->read(fields, arch->modelType);
    if (!note.empty() && options.note)
        options.note(note);
    const std::int64_t context = c.context ? std::min(c.context, arch->longestDefaultSeq)
                                           : arch->longestDefaultSeq;
    set(c, "batch", "--batch", options.batch.value_or(8));
    set(c, "seq", "--seq", options.seq.value_or(context));
    // A usual target length (config.json has none), within BART's positions.
    if (c.family == "t5" || c.family == "bart")
        c.knobs["target_seq"] = std::min<std::int64_t>(128, c.context ? c.context : 128);
    const std::string name = fields.stringOr("_name_or_path", input);
    zoo::Builder builder;
    if (c.decoder)
        builder = [decoder = *c.decoder](const std::string &n, const zoo::Knobs &k) {
            return zoo::buildDecoder(n, decoder, k);
        };
    else if (c.encoder)
        builder = [head = *c.encoder](const std::string &n, const zoo::Knobs &k) {
            return zoo::buildEncoder(n, head, k);
        };
    try {
        return builder ? zoo::buildChecked(name.empty() ? input : name, c.knobs, builder)
                       : zoo::buildFamily(c.family, name.empty() ? input : name, c.knobs);
    } catch (const TapestryError &e) {
        throw TapestryError(
            Error{input, fieldOf(e.error().where, c), inFieldNames(e.error().problem, c)});
    }
}

ir::Graph loadHfConfig(const std::string &path, const LoadOptions &options)
{
    return readHfConfig(readFile(path), path, options);
}

} // namespace tapestry::io
