#include "io/zoo/zoo.h"

#include "io/zoo/families.h"
#include "ir/error.h"
#include "ir/sizes.h"

#include <algorithm>
#include <functional>
#include <set>

namespace tapestry::io::zoo {

const std::vector<Preset> &presets()
{
    // Sizes as published; batch 8 and seq the model's usual training context.
    static const std::vector<Preset> kPresets = [] {
        auto gpt = [](std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t positions) {
            return Knobs{{"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"ffn", 4 * hidden},
                         {"vocab", 50257}, {"positions", positions}, {"batch", 8}, {"seq", positions}};
        };
        auto bert = [](std::int64_t layers, std::int64_t hidden, std::int64_t heads) {
            return Knobs{{"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"ffn", 4 * hidden},
                         {"vocab", 30522}, {"positions", 512}, {"type_vocab", 2}, {"batch", 8},
                         {"seq", 512}};
        };
        auto t5 = [](std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t ffn) {
            return Knobs{{"layers", layers}, {"decoder_layers", layers}, {"hidden", hidden},
                         {"heads", heads}, {"head_dim", 64}, {"ffn", ffn}, {"vocab", 32128},
                         {"batch", 8}, {"seq", 512}, {"target_seq", 128}};
        };
        auto llama = [](std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t kvHeads,
                        std::int64_t ffn, std::int64_t vocab, std::int64_t seq) {
            return Knobs{{"layers", layers}, {"hidden", hidden}, {"heads", heads}, {"kv_heads", kvHeads},
                         {"ffn", ffn}, {"vocab", vocab}, {"batch", 8}, {"seq", seq}};
        };
        Knobs mixtral = llama(32, 4096, 32, 8, 14336, 32000, 4096);
        mixtral["experts"] = 8;
        mixtral["top_k"] = 2;

        return std::vector<Preset>{
            {"mlp", "mlp", "two-layer MLP relu(X·A)·B of the sharding tutorials",
             {{"batch", 8}, {"hidden", 4}, {"ffn", 8}}},
            {"abc", "abc", "two chained matmuls Y = X·B·C",
             {{"batch", 8}, {"hidden", 4}, {"ffn", 8}}},
            {"gpt2", "gpt2", "GPT-2 small, 124M, fp32", gpt(12, 768, 12, 1024)},
            {"gpt2-medium", "gpt2", "GPT-2 medium, 355M, fp32", gpt(24, 1024, 16, 1024)},
            {"gpt2-large", "gpt2", "GPT-2 large, 774M, fp32", gpt(36, 1280, 20, 1024)},
            {"gpt2-xl", "gpt2", "GPT-2 XL, 1.56B, fp32", gpt(48, 1600, 25, 1024)},
            {"gpt3-6.7b", "gpt3", "GPT-3 6.7B, bf16", gpt(32, 4096, 32, 2048)},
            {"gpt3-175b", "gpt3", "GPT-3 175B, bf16", gpt(96, 12288, 96, 2048)},
            {"bert-base", "bert", "BERT base uncased, pre-training heads, 110M, fp32", bert(12, 768, 12)},
            {"bert-large", "bert", "BERT large uncased, pre-training heads, 336M, fp32", bert(24, 1024, 16)},
            {"t5-base", "t5", "T5 v1.0 base encoder-decoder, 223M, fp32", t5(12, 768, 12, 3072)},
            {"t5-large", "t5", "T5 v1.0 large encoder-decoder, 738M, fp32", t5(24, 1024, 16, 4096)},
            {"llama2-7b", "llama", "Llama 2 7B, 6.74B, bf16", llama(32, 4096, 32, 32, 11008, 32000, 4096)},
            {"llama2-70b", "llama", "Llama 2 70B, grouped-query attention, 69.0B, bf16",
             llama(80, 8192, 64, 8, 28672, 32000, 4096)},
            {"llama3-8b", "llama", "Llama 3 8B, grouped-query attention, 8.03B, bf16",
             llama(32, 4096, 32, 8, 14336, 128256, 8192)},
            {"llama3-70b", "llama", "Llama 3 70B, grouped-query attention, 70.6B, bf16",
             llama(80, 8192, 64, 8, 28672, 128256, 8192)},
            {"mixtral-8x7b", "mixtral", "Mixtral 8x7B, 8 experts, top-2 routing, 46.7B, bf16", mixtral},
        };
    }();
    return kPresets;
}

const Preset *findPreset(const std::string &name)
{
    for (const auto &p : presets())
        if (p.name == name)
            return &p;
    return nullptr;
}

std::int64_t knobLimit(const std::string &knob)
{
    if (knob == "layers" || knob == "decoder_layers" || knob == "dense_layers")
        return kMaxLayers;
    return knob == "experts" ? kMaxExperts : kMaxKnob;
}

namespace {

// Refuses a model of more than ir::kMaxOps ops before building it. A stack
// repeats its layer, so its op count is affine in the layer count: the same
// model built with one and with two layers gives it (an encoder-decoder's
// two stacks are counted as deep as the deeper one, an upper bound).
void checkOpCount(const Builder &builder, const std::string &name, const Knobs &knobs)
{
    std::int64_t layers = 0;
    Knobs one = knobs, two = knobs;
    for (const char *knob : {"layers", "decoder_layers"})
        if (auto it = knobs.find(knob); it != knobs.end()) {
            layers = std::max(layers, it->second);
            one[knob] = 1;
            two[knob] = 2;
        }
    // Leading dense layers are lighter than the mixture layers after them:
    // the estimate counts every layer as a mixture.
    one.erase("dense_layers");
    two.erase("dense_layers");
    if (layers <= 2)
        return;  // built whole within the builders' own op limit
    std::int64_t base = 0, perLayer = 0;
    try {
        base = static_cast<std::int64_t>(builder(name, one).opCount());
        perLayer = static_cast<std::int64_t>(builder(name, two).opCount()) - base;
    } catch (const TapestryError &) {
        return;  // the model asked for says why it cannot be built
    }
    const std::int64_t ops = base + (layers - 1) * perLayer;
    if (ops > ir::kMaxOps)
        throw TapestryError(Error{"zoo:" + name, {},
                                  "the model would have about " + std::to_string(ops) + " ops (" +
                                      std::to_string(perLayer) + " a layer); Tapestry plans at most " +
                                      std::to_string(ir::kMaxOps)});
}

} // namespace

ir::Graph buildChecked(const std::string &name, const Knobs &knobs, const Builder &builder)
{
    // Checked before anything is built: a billion layers would take the
    // machine's memory, and with every knob at most 2^24 the builders'
    // products of two knobs cannot overflow (the tensors they make are then
    // checked against ir::kMaxModelBytes as they are added).
    for (const auto &[knob, value] : knobs) {
        const std::int64_t limit = knobLimit(knob);
        if (value > limit)
            throw TapestryError(Error{"zoo:" + name, knob,
                                      knob + "=" + std::to_string(value) + " exceeds " + std::to_string(limit) +
                                          ", the most Tapestry builds"});
    }
    checkOpCount(builder, name, knobs);
    return builder(name, knobs);
}

ir::Graph buildFamily(const std::string &family, const std::string &name, const Knobs &knobs)
{
    static const std::map<std::string, Builder> kFamilies = {
        {"mlp", buildMlp},
        {"abc", buildAbc},
        {"gpt2", buildGpt2},
        {"gpt3", buildGpt3},
        {"bert", buildBert},
        {"t5", buildT5},
        {"bart", buildBart},
        {"llama", buildLlama},
        {"mixtral", buildMixtral},
    };
    auto it = kFamilies.find(family);
    if (it == kFamilies.end())
        throw TapestryError(Error{"zoo:" + name, {}, "unknown model family '" + family + "'"});
    return buildChecked(name, knobs, it->second);
}

namespace {

// A preset resized by `hidden` alone keeps its shape: the width of a head,
// the ratio of the MLP to the hidden size and the number of query heads per
// key/value head stay the preset's, so `gpt2?hidden=256` is a narrow GPT-2
// (4 heads of 64, MLP 1024) rather than a model whose 12 heads do not divide
// its width. Knobs the user gave are kept as given; T5's heads have their
// own head_dim knob and are left alone.
void scaleWithHidden(const Knobs &preset, const std::set<std::string> &given, Knobs &knobs)
{
    auto has = [&](const char *k) { return preset.count(k) != 0; };
    auto free = [&](const char *k) { return has(k) && !given.count(k); };
    if (!has("hidden") || (!given.count("hidden") && !given.count("heads")))
        return;
    const std::int64_t hidden = knobs.at("hidden"), presetHidden = preset.at("hidden");
    if (given.count("hidden") && free("ffn") && preset.at("ffn") * hidden % presetHidden == 0)
        knobs["ffn"] = preset.at("ffn") * hidden / presetHidden;
    if (!has("heads") || has("head_dim"))
        return;
    const std::int64_t presetHeads = preset.at("heads");
    if (given.count("hidden") && free("heads") && presetHidden % presetHeads == 0) {
        const std::int64_t headDim = presetHidden / presetHeads;
        if (hidden % headDim == 0)
            knobs["heads"] = hidden / headDim;
    }
    if (free("kv_heads") && presetHeads % preset.at("kv_heads") == 0) {
        const std::int64_t group = presetHeads / preset.at("kv_heads"), heads = knobs.at("heads");
        knobs["kv_heads"] = heads % group == 0 ? heads / group : heads;
    }
}

} // namespace

ir::Graph build(const std::string &spec, const LoadOptions &options)
{
    const std::string input = "zoo:" + spec;
    const auto q = spec.find('?');
    const std::string name = spec.substr(0, q);
    const Preset *preset = findPreset(name);
    if (!preset) {
        std::string known;
        for (const auto &p : presets())
            known += (known.empty() ? "" : ", ") + p.name;
        throw TapestryError(Error{input, {}, "unknown zoo preset '" + name + "' (known: " + known + ")"});
    }
    Knobs knobs = preset->defaults;
    std::set<std::string> given;
    if (q != std::string::npos) {
        std::string rest = spec.substr(q + 1);
        std::size_t pos = 0;
        while (pos <= rest.size()) {
            auto amp = rest.find('&', pos);
            std::string pair = rest.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
            pos = amp == std::string::npos ? rest.size() + 1 : amp + 1;
            if (pair.empty())
                continue;
            auto eq = pair.find('=');
            if (eq == std::string::npos)
                throw TapestryError(Error{input, pair, "expected knob=value"});
            std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
            if (!knobs.count(key)) {
                std::string known;
                for (const auto &[k, _] : preset->defaults)
                    known += (known.empty() ? "" : ", ") + k;
                throw TapestryError(
                    Error{input, key, "unknown knob for " + name + " (knobs: " + known + ")"});
            }
            std::int64_t v = 0;
            try {
                std::size_t used = 0;
                v = std::stoll(value, &used);
                if (used != value.size())
                    throw std::invalid_argument(value);
            } catch (const std::exception &) {
                throw TapestryError(Error{input, key, "expects a positive integer, got '" + value + "'"});
            }
            if (v <= 0)
                throw TapestryError(Error{input, key, "expects a positive integer, got " + value});
            knobs[key] = v;
            given.insert(key);
        }
    }
    scaleWithHidden(preset->defaults, given, knobs);
    if (options.batch && knobs.count("batch"))
        knobs["batch"] = *options.batch;
    if (options.seq && knobs.count("seq"))
        knobs["seq"] = *options.seq;
    try {
        return buildFamily(preset->family, name, knobs);
    } catch (const TapestryError &e) {
        // Builders name the preset; the user typed the whole spec.
        Error error = e.error();
        error.input = input;
        throw TapestryError(std::move(error));
    }
}

} // namespace tapestry::io::zoo
