#pragma once

#include "ir/graph.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::plan {

// What a mesh axis is for. An axis named after a role (`--axes data,model`)
// asks the search to use it for that role only; what a plan then does with
// each axis is read back from its specs (axisCarries).
//   Data:     the batch is split over the axis, weights are whole on it and
//             their gradients are all-reduced over it.
//   Tensor:   weights are split over the axis (Megatron's column and row
//             splits, heads, vocabulary), activations as the rules derive.
//   Sequence: activations are split over the sequence, weights are whole.
// Expert parallelism has no role: the IR keeps each expert of a mixture
// (mixtral's experts.0 ... experts.N) as weights of their own, with no
// stacked expert dim a spec could split, so no plan places whole experts
// on devices; expert weights are split like any other (Tensor).
enum class AxisRole { Data, Tensor, Sequence };
std::string_view toString(AxisRole role);

// The role an axis name asks for: data, dp, batch -> Data; model, tensor,
// tp, mp -> Tensor; sequence, seq, sp, cp, context -> Sequence; anything
// else (x, pp, ...) none, and the axis is free. Case-insensitive.
std::optional<AxisRole> axisRoleFromName(std::string_view name);
// Names that ask for a role the plan space does not have (expert, experts,
// ep): an axis so named cannot be honoured.
bool isExpertAxisName(std::string_view name);

// What one mesh axis carries in a plan, by the bytes of the tensors it
// splits (see axisCarries for the rule), with the shares behind it.
struct AxisCarries {
    bool data = false;
    bool tensor = false;
    bool sequence = false;
    double weightShare = 0;    // of all parameter bytes, those split on the axis
    double batchShare = 0;     // of all activation bytes, those split on the batch dim on it
    double sequenceShare = 0;  // of [batch, sequence, ...] activation bytes, those split on the sequence dim on it

    bool has(AxisRole role) const;
    bool none() const { return !data && !tensor && !sequence; }
    // "data", "tensor", "tensor+sequence", "data+tensor", "replicated"
    std::string toString() const;
    // Reads toString()'s form back (the shares stay 0); nothing for other text.
    static std::optional<AxisCarries> fromString(std::string_view text);
    friend bool operator==(const AxisCarries &, const AxisCarries &) = default;
};

// The share of bytes past which an axis counts as carrying a role.
inline constexpr double kCarriesThreshold = 0.05;

// What each axis of `mesh` carries under `specs` (by tensor id). Per axis:
// - tensor:   at least 5% of the parameter bytes are split on it;
// - data:     at least 5% of the activation bytes (every tensor that is not
//             a parameter) are split on dim 0, the batch, on it;
// - sequence: at least 5% of the bytes of [batch, sequence, ...]
//             activations (rank 3, or rank-2 token ids) are split on dim 1,
//             the sequence, on it;
// several of these make a combination ("tensor+sequence": Megatron's
// sequence parallelism); none, "replicated". Heads split in [b, heads, s, d]
// attention tensors are not a sequence split: rank-4 tensors count for the
// batch only.
std::vector<AxisCarries> axisCarries(const ir::Graph &graph, const sharding::Mesh &mesh,
                                     const std::vector<sharding::ShardingSpec> &specs);

// Whether `carries` is what an axis named `name` allows: an axis named
// after a role carries nothing else (tensor may come with sequence,
// Megatron's sequence parallelism on the tensor-parallel axis; replicated
// matches any name); an axis whose name names no role matches anything.
bool carriesMatchName(const AxisCarries &carries, std::string_view name);

} // namespace tapestry::plan
