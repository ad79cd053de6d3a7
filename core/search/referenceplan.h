#pragma once

#include "cost/costoptions.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "sharding/mesh.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::search {

// The hand-made plans searched plans are measured against.
enum class ReferenceMethod {
    Megatron,   // tensor parallel (Shoeybi et al.): column/row pairs by structure, else by module name;
                // data parallel on the other axes
    DataParallel,  // batch split over every axis, weights replicated, gradients all-reduced
    Replicate,  // everything on every device
};
std::string_view toString(ReferenceMethod method);  // "megatron", "dp", "replicate"
std::optional<ReferenceMethod> referenceMethodFromString(std::string_view s);

struct ReferenceOptions {
    bool sequenceParallel = false;  // megatron: norms, dropout and residuals on sequence shards
    cost::CostOptions cost;
};

// Builds and costs the plan. Megatron uses the mesh's "model" axis (else its
// last) for tensor parallelism and every other axis for data parallelism.
// Throws TapestryError naming `modelSource` when the method cannot apply:
// head counts or weight dims the tensor-parallel axis does not divide, a
// batch the data axes do not divide.
plan::Plan referencePlan(const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
                         ReferenceMethod method, const ReferenceOptions &options = {});

// A reference plan with the name the reports give it: "megatron",
// "megatron-sp" (with sequence parallelism), "dp", "replicate".
struct NamedPlan {
    std::string name;
    plan::Plan plan;
};
// Every reference plan that applies to the model on the mesh, in that
// order: the plans a searched plan is held to (tap is never to be worse
// than any of them under cost::Objective). Methods that cannot apply (see
// referencePlan) are left out.
std::vector<NamedPlan> applicableReferencePlans(const ir::Graph &graph, const std::string &modelSource,
                                                const sharding::Mesh &mesh, const cost::CostOptions &cost = {});

// What Megatron does with a parameter, by the module it belongs to.
enum class MegatronRole {
    None,       // replicated: norms, position embeddings, routers, row-parallel biases
    Column,     // split the output features: q/k/v projections, first MLP linear, LM head
    Row,        // split the input features: attention output projection, second MLP linear
    Embedding,  // vocabulary-parallel embedding table: split the gathered rows
};
std::string_view toString(MegatronRole role);

// The role from a dotted parameter name ("transformer.h.3.attn.q_proj.weight"):
// the module name before "weight"/"bias" (with its parent for BERT's
// "intermediate.dense" / "output.dense").
MegatronRole megatronRole(const std::string &parameterName);

} // namespace tapestry::search
