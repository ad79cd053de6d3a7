#pragma once

#include "io/zoo/graphbuilder.h"

#include <cstdint>
#include <optional>

namespace tapestry::io::zoo {

// Rotary position embedding tables, inputs of shape [1, 1, seq, headDim].
struct Rotary {
    ir::TensorId cos;
    ir::TensorId sin;
};

// How the attention core of one layer is shaped. kvHeads < heads is grouped-
// query attention: each k/v head serves heads/kvHeads query heads.
struct AttentionSpec {
    std::int64_t heads = 1;
    std::int64_t kvHeads = 1;
    std::int64_t headDim = 1;    // of queries and keys
    std::int64_t valueDim = 0;   // of values; 0: headDim (multi-head latent attention's differ)
    std::int64_t rotaryDim = 0;  // leading dims of a head the rotary embedding turns; 0: all
    std::optional<ir::TensorId> scale;  // scalar the scores are multiplied by (T5 has none)
    ir::TensorId mask;                  // added to the scores; broadcasts to [b, heads, sq, skv]
    std::optional<Rotary> rotary;       // applied to q and k (LLaMA, Mixtral); tables [1, 1, s, rotaryDim]
};

// The attention core as separate ops, in the current scope, after the q/k/v
// projections and before the output projection: split heads (Reshape,
// Transpose), rotary, k/v head expansion, q·kᵀ, scale, mask, Softmax, ·v,
// merge heads. q: [b, sq, heads·d]; k: [b, skv, kvHeads·d]; v: [b, skv,
// kvHeads·valueDim]. Returns [b, sq, heads·valueDim].
ir::TensorId attentionCore(GraphBuilder &g, ir::TensorId q, ir::TensorId k, ir::TensorId v,
                           const AttentionSpec &spec);

} // namespace tapestry::io::zoo
