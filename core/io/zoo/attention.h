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
    std::int64_t headDim = 1;
    std::optional<ir::TensorId> scale;  // scalar the scores are multiplied by (T5 has none)
    ir::TensorId mask;                  // added to the scores; broadcasts to [b, heads, sq, skv]
    std::optional<Rotary> rotary;       // applied to q and k (LLaMA, Mixtral)
};

// The attention core as separate ops, in the current scope, after the q/k/v
// projections and before the output projection: split heads (Reshape,
// Transpose), rotary, k/v head expansion, q·kᵀ, scale, mask, Softmax, ·v,
// merge heads. q: [b, sq, heads·d]; k, v: [b, skv, kvHeads·d]. Returns
// [b, sq, heads·d].
ir::TensorId attentionCore(GraphBuilder &g, ir::TensorId q, ir::TensorId k, ir::TensorId v,
                           const AttentionSpec &spec);

} // namespace tapestry::io::zoo
