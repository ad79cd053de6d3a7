#pragma once

#include "io/loadoptions.h"
#include "ir/graph.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tapestry::io::zoo {

// Size knobs of a preset: layers, hidden, heads, kv_heads, ffn, vocab,
// experts, batch, seq, ... Ordered for deterministic printing.
using Knobs = std::map<std::string, std::int64_t>;

struct Preset {
    std::string name;         // "gpt2", "llama3-8b", "mlp"
    std::string family;       // "gpt2", "gpt3", "bert", "t5", "llama", "mixtral", "mlp", "abc"
    std::string description;  // one line for listings
    Knobs defaults;           // every knob the preset takes, with its default
};

const std::vector<Preset> &presets();
const Preset *findPreset(const std::string &name);

// Builds "NAME[?knob=value&...]" (without the "zoo:" prefix). options.batch
// and options.seq override the batch and seq knobs. Unknown presets and knobs,
// and knob values that do not make a model (heads not dividing hidden, ...),
// throw TapestryError naming the spec.
ir::Graph build(const std::string &spec, const LoadOptions &options = {});

// The largest knob values the builders take: layers (each of T5's stacks),
// experts, and every other size (hidden, heads, vocab, batch, seq, ...).
inline constexpr std::int64_t kMaxLayers = 10'000;
inline constexpr std::int64_t kMaxExperts = 1'024;
inline constexpr std::int64_t kMaxKnob = std::int64_t{1} << 24;
// The limit of `knob`: one of the three above.
std::int64_t knobLimit(const std::string &knob);

// Builds a family's graph from complete, positive knobs (the preset's
// defaults merged with the user's overrides). `name` becomes the graph's
// name. Knob values that make no model throw TapestryError with input
// "zoo:NAME" and the knob as the place.
ir::Graph buildFamily(const std::string &family, const std::string &name, const Knobs &knobs);

// What buildFamily does for a builder it is handed (a decoder of a given
// wiring, an encoder of a given head): every knob within its limit and the
// op count within ir::kMaxOps, checked before `builder` builds the model.
using Builder = std::function<ir::Graph(const std::string &name, const Knobs &knobs)>;
ir::Graph buildChecked(const std::string &name, const Knobs &knobs, const Builder &builder);

} // namespace tapestry::io::zoo
