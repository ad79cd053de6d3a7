#pragma once

#include "tensorview.h"

#include <cstdint>
#include <span>
#include <string_view>

namespace tapestry::exec {

// Deterministic tensor contents from a seed, keyed by tensor name and element
// index. The generator is counter-based (a hash of seed, name and the
// element's index in the *full* tensor), so any rank can build its shard of
// a weight without generating the rest, and the shards concatenate to exactly
// the tensor a single process builds.

enum class InitKind {
    Zeros,       // biases
    Ones,        // norm scales
    Constant,    // every element `scale` (the attention scale input)
    Normal,      // weights: N(0, scale²)
    Uniform,     // float inputs: U(−scale, scale)
    CausalMask,  // attention mask inputs: 0 where col ≤ row in the last two dims, −1e9 above
    RotaryCos,   // rotary tables [.., seq, d]: cos/sin(row·θ_j), θ_j = 10000^(−2j/d),
    RotarySin,   // j = col mod d/2 (the two halves repeat, as rotate_half expects)
};

struct InitRule {
    InitKind kind = InitKind::Normal;
    float scale = 1.0f;
};

// The rule the executor uses for a parameter or float input of the graph:
// rank ≥ 2 parameters N(0, 1/fan_in) with fan_in the second-last dim (the
// input dim of an [in, out] weight); rank-1 parameters named "*bias" zero,
// norm scales one, others N(0, 0.02²). Float inputs by the zoo's names:
// "*mask*" causal, "*cos*"/"*sin*" rotary tables, a scalar "*scale*"
// 1/√d with d the contraction dim of the q·kᵀ it scales; others U(−1, 1).
InitRule initRuleFor(const ir::Graph &graph, ir::TensorId tensor);

// Integer inputs: ids uniform in [0, range), range being the smallest table
// (Gather) or class count (loss) among the tensor's readers; inputs named
// "*position*" count 0, 1, ... along their last dim instead.
struct IndexRule {
    std::int64_t range = 0;  // 0: no kernel reads the tensor
    bool positions = false;
    std::int64_t period = 1;  // last dim, for positions
};
IndexRule indexRuleFor(const ir::Graph &graph, ir::TensorId tensor);

// The stream of one tensor under one seed.
std::uint64_t streamKey(std::uint64_t seed, std::string_view tensorName);
// Element `index` of a stream: uniform in [0, 1), and standard normal.
double uniformAt(std::uint64_t key, std::uint64_t index);
double normalAt(std::uint64_t key, std::uint64_t index);

// Fills `block`, the block of the full tensor `fullShape` that starts at
// `offset` (one entry per dim), with its elements under `rule`.
void initializeBlock(const TensorView &block, std::span<const std::int64_t> offset,
                     const ir::Shape &fullShape, std::uint64_t key, InitRule rule);

// Token ids, labels or positions: elements [first, first + count) of the
// flattened tensor (a rank's batch rows are such a range).
void initializeIndices(std::int64_t *out, std::int64_t count, std::int64_t first,
                       std::uint64_t key, const IndexRule &rule);

} // namespace tapestry::exec
