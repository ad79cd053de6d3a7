#include "io/hfconfig.h"

#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <sstream>
#include <utility>
#include <vector>

namespace tapestry::io {

namespace {

using nlohmann::json;

// Reads typed fields of one config, failing with the file and the field.
class ConfigFields {
public:
    ConfigFields(const json &config, const std::string &input) : m_config(config), m_input(input) {}

    [[noreturn]] void fail(const std::string &field, const std::string &problem) const
    {
        throw TapestryError(Error{m_input, field, problem});
    }

    bool has(const std::string &field) const
    {
        return m_config.contains(field) && !m_config.at(field).is_null();
    }

    // A positive integer of at most `most`, checked as it is read: the
    // config's sizes are multiplied together before the zoo checks its knobs.
    std::int64_t positive(const std::string &field, std::int64_t most = zoo::kMaxKnob) const
    {
        if (!m_config.contains(field))
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
};

// A config's sizes as zoo knobs, and for each knob the config field it came
// from, so that a knob error names the field the user has to fix.
struct ConfigKnobs {
    std::string family;
    zoo::Knobs knobs;
    std::vector<std::pair<std::string, std::string>> fields;  // knob, field
    std::int64_t context = 0;                                // 0: no context length
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

ConfigKnobs gpt2(const ConfigFields &f)
{
    ConfigKnobs c{"gpt2", {}, {}, 0};
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

ConfigKnobs bert(const ConfigFields &f)
{
    ConfigKnobs c{"bert", {}, {}, 0};
    take(c, f, "layers", "num_hidden_layers");
    take(c, f, "hidden", "hidden_size");
    take(c, f, "heads", "num_attention_heads");
    take(c, f, "ffn", "intermediate_size");
    take(c, f, "vocab", "vocab_size");
    take(c, f, "positions", "max_position_embeddings");
    take(c, f, "type_vocab", "type_vocab_size");
    c.context = c.knobs["positions"];
    return c;
}

ConfigKnobs t5(const ConfigFields &f)
{
    const std::string ffnKind = f.stringOr("feed_forward_proj", "relu");
    if (ffnKind != "relu")
        f.fail("feed_forward_proj", "'" + ffnKind + "' is not supported (T5 v1.0's 'relu' only)");
    ConfigKnobs c{"t5", {}, {}, 0};
    take(c, f, "layers", "num_layers");
    set(c, "decoder_layers", "num_decoder_layers", f.positiveOr("num_decoder_layers", c.knobs["layers"]));
    take(c, f, "hidden", "d_model");
    take(c, f, "ffn", "d_ff");
    take(c, f, "heads", "num_heads");
    take(c, f, "head_dim", "d_kv");
    take(c, f, "vocab", "vocab_size");
    return c;
}

ConfigKnobs llama(const ConfigFields &f, const std::string &family)
{
    ConfigKnobs c{family, {}, {}, 0};
    take(c, f, "layers", "num_hidden_layers");
    take(c, f, "hidden", "hidden_size");
    take(c, f, "heads", "num_attention_heads");
    set(c, "kv_heads", "num_key_value_heads", f.positiveOr("num_key_value_heads", c.knobs["heads"]));
    take(c, f, "ffn", "intermediate_size");
    take(c, f, "vocab", "vocab_size");
    c.context = f.positive("max_position_embeddings");
    set(c, "tied_embeddings", "tie_word_embeddings", f.booleanOr("tie_word_embeddings", false) ? 1 : 0);
    if (family == "mixtral") {
        take(c, f, "experts", "num_local_experts");
        set(c, "top_k", "num_experts_per_tok", f.positiveOr("num_experts_per_tok", 2));
    }
    return c;
}

struct Architecture {
    const char *modelType;  // config.json "model_type"
    const char *prefix;     // of an "architectures" entry: GPT2LMHeadModel, BertForMaskedLM, ...
    const char *family;     // zoo family
    std::int64_t longestDefaultSeq;
};

constexpr std::array<Architecture, 5> kArchitectures{{
    {"gpt2", "GPT2", "gpt2", 1024},
    {"bert", "Bert", "bert", 512},
    {"t5", "T5", "t5", 512},
    {"llama", "Llama", "llama", 8192},
    {"mixtral", "Mixtral", "mixtral", 4096},
}};

std::string supported()
{
    std::string s;
    for (const auto &a : kArchitectures)
        s += (s.empty() ? "" : ", ") + std::string(a.modelType);
    return s;
}

const Architecture &architecture(const json &config, const ConfigFields &f)
{
    if (config.contains("model_type")) {
        const std::string type = f.stringOr("model_type", "");
        for (const auto &a : kArchitectures)
            if (type == a.modelType)
                return a;
        f.fail("model_type", "unsupported model_type '" + type + "' (supported: " + supported() + ")");
    }
    const json &names = config.at("architectures");
    if (!names.is_array())
        f.fail("architectures", "expected an array of class names");
    for (const auto &name : names) {
        if (!name.is_string())
            f.fail("architectures", "expected an array of class names");
        const auto s = name.get<std::string>();
        for (const auto &a : kArchitectures)
            if (s.rfind(a.prefix, 0) == 0)
                return a;
    }
    f.fail("architectures", "no supported architecture in " + names.dump() + " (supported: " +
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
    const Architecture &arch = architecture(config, fields);
    const std::string family = arch.family;
    ConfigKnobs c = family == "gpt2" ? gpt2(fields)
                    : family == "bert" ? bert(fields)
                    : family == "t5"   ? t5(fields)
                                       : llama(fields, family);
    const std::int64_t context = c.context ? std::min(c.context, arch.longestDefaultSeq)
                                           : arch.longestDefaultSeq;
    set(c, "batch", "--batch", options.batch.value_or(8));
    set(c, "seq", "--seq", options.seq.value_or(context));
    if (family == "t5")
        c.knobs["target_seq"] = 128;  // T5's usual target length; config.json has none
    const std::string name = fields.stringOr("_name_or_path", input);
    try {
        return zoo::buildFamily(family, name.empty() ? input : name, c.knobs);
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
