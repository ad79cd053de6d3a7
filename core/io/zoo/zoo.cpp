#include "io/zoo/zoo.h"

#include "io/zoo/families.h"
#include "ir/error.h"

#include <functional>

namespace tapestry::io::zoo {

const std::vector<Preset> &presets()
{
    static const std::vector<Preset> kPresets = {
        {"mlp", "mlp", "two-layer MLP relu(X·A)·B of the sharding tutorials",
         {{"batch", 8}, {"hidden", 4}, {"ffn", 8}}},
        {"abc", "abc", "two chained matmuls Y = X·B·C",
         {{"batch", 8}, {"hidden", 4}, {"ffn", 8}}},
    };
    return kPresets;
}

const Preset *findPreset(const std::string &name)
{
    for (const auto &p : presets())
        if (p.name == name)
            return &p;
    return nullptr;
}

ir::Graph buildFamily(const std::string &family, const std::string &name, const Knobs &knobs)
{
    static const std::map<std::string, std::function<ir::Graph(const std::string &, const Knobs &)>>
        kFamilies = {
            {"mlp", buildMlp},
            {"abc", buildAbc},
        };
    auto it = kFamilies.find(family);
    if (it == kFamilies.end())
        throw TapestryError(Error{"zoo:" + name, {}, "unknown model family '" + family + "'"});
    return it->second(name, knobs);
}

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
        }
    }
    if (options.batch && knobs.count("batch"))
        knobs["batch"] = *options.batch;
    if (options.seq && knobs.count("seq"))
        knobs["seq"] = *options.seq;
    return buildFamily(preset->family, name, knobs);
}

} // namespace tapestry::io::zoo
