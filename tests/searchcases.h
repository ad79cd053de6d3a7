#pragma once

#include "cost/costoptions.h"

#include "ir/graph.h"
#include "search/axisconstraint.h"
#include "sharding/mesh.h"
#include "sharding/meshprofile.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::searchdiff {

// How much device memory a case gives: the profile's (everything small
// fits), a limit between the plan that needs least memory and the
// replicated plan, or a limit below any plan.
enum class MemoryLimit { Loose, Tight, Impossible };
std::string_view toString(MemoryLimit limit);

// The pins of a case: none; weights pinned to the specs they have in a base
// plan (the plan itself is the pinned input); or pinned to another legal
// spec, the base plan with those specs changed being the pinned input.
enum class PinKind { None, Kept, Moved };
std::string_view toString(PinKind kind);

// A weight pinned: to `spec`, or, when it has none, to the spec the base
// plan gives it.
struct Pin {
    std::string tensor;
    std::optional<sharding::ShardingSpec> spec;
};

// One case of the differential test: a model, a mesh, a memory limit and
// pins, drawn from (seed, index). The limit is given as a draw and the base
// plan of the pins by name: the plans they are measured from are made when
// the case is run.
struct SearchCase {
    std::uint64_t seed = 0;
    std::size_t index = 0;
    std::string family;  // gpt2, gpt3, bert, t5, llama, llama-gqa, mixtral, mlp, abc, mlp-stack, conv-stack
    // "zoo:NAME?knob=..." for zoo models; "gen:mlp-stack?..." for graphs
    // built here, which the CLI reads from their tapestry.model file.
    std::string source;
    ir::Graph graph;
    bool built = false;
    sharding::MeshProfile profile;
    // The profile's node size was changed, so that the mesh's axes run on
    // different links: the CLI reads it from its tapestry.mesh-profile file.
    bool customProfile = false;
    sharding::Mesh mesh;  // the profile's device memory
    bool overlap = false;  // cost::CostOptions::overlap
    // The memory techniques every plan of the case uses, fixed (the
    // generator leaves them none; bench_searchdiff --techniques draws them).
    cost::Techniques techniques;
    MemoryLimit memory = MemoryLimit::Loose;
    // Tight: where between the least-memory and the replicated plan's
    // memory; Impossible: the share of the least memory given.
    double memoryFraction = 1;
    PinKind pins = PinKind::None;
    std::string pinBase;  // the plan pins are taken from: tap, exact, megatron, megatron-sp, dp, replicate
    bool pinEveryInstance = false;  // a weight pinned in every layer (and expert), not in one
    std::vector<Pin> pinned;

    // "#17 llama-gqa zoo:llama3-8b?... on 2x2 dgx-h100, tight 0.31, pins moved from dp (1 weight)"
    std::string describe() const;
};

// The roles the case's axis names ask for, as the CLI reads them from the
// mesh its replay commands give (sharding::meshText): default names leave
// every axis free, names given constrain the axes they name.
search::AxisRoles rolesOf(const sharding::Mesh &mesh);

// Case `index` of the stream `seed`: the same pair always gives the same case.
SearchCase generateCase(std::uint64_t seed, std::size_t index);

} // namespace tapestry::searchdiff
