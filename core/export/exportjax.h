#pragma once

#include "export/exportaxis.h"

#include <string>
#include <vector>

namespace tapestry::exports {

// One parameter as a Flax model holds it.
struct JaxParameter {
    std::string name;                // the plan's (torch-style) name: "model.layers.0.self_attn.q_proj.weight"
    std::vector<std::string> path;   // {"model", "layers", "0", "self_attn", "q_proj", "kernel"}
    std::vector<std::int64_t> shape;
    std::string spec;                // "P(None, 'tensor')"
};

// An activation the plan lays out at a module boundary, for
// jax.lax.with_sharding_constraint.
struct JaxConstraint {
    // "model.layers.*.self_attn:input": a module (layer indices folded into
    // "*" where every layer agrees) and the side of it.
    std::string key;
    std::string tensor;  // the graph's tensor (the first layer's, where folded)
    std::string spec;
    // For a linear's input ("model.layers.*.mlp.gate_proj:input"): the op
    // that reads `tensor` in `spec`, which may differ from the layout the
    // tensor is produced in (an all-gather between them); empty at a
    // module boundary.
    std::string reader;
};

// The plan as JAX runs it: the mesh (axes named by what each carries,
// exportAxisNames), every parameter's PartitionSpec by name and by Flax
// path, the graph inputs', and the activations' at module boundaries.
struct JaxPlan {
    std::vector<int> meshShape;
    std::vector<std::string> meshAxisNames;
    std::vector<std::string> axisNotes;
    std::vector<JaxParameter> parameters;  // in graph order
    std::vector<std::pair<std::string, std::string>> inputs;  // (graph input, spec)
    std::vector<JaxConstraint> constraints;                   // ordered by key
    // Boundary activations left without a constraint: pending sums, which
    // a PartitionSpec cannot say.
    std::vector<std::string> unconstrained;
    // The plan's techniques: the micro-batches of a step (gradient
    // accumulation), the layers recomputed whole (jax.checkpoint /
    // flax.linen.remat, by module glob "model.layers.*"), and what the
    // module leaves to the training script, one line each (ZeRO, selective
    // recomputation, flash attention, offload).
    int microBatches = 1;
    std::vector<std::string> rematModules;
    std::vector<std::string> notes;
};

// Flax paths follow the graph: a table read by a lookup (Gather) is an
// "embedding", a matrix read by a linear a "kernel" ([in, out], as the
// graph's weights are), a LayerNorm's scale "scale", an RMSNorm's
// "weight" (as Hugging Face's Flax RMSNorm modules name it), a bias
// "bias"; modules are the name's dotted atoms, layer indices as string
// keys. Constraints are kept for each attention layer (its residual stream
// in and out), the modules of a layer that hold linears (attention, MLP)
// and the modules outside the layers that hold weights (embeddings, LM
// head), and for each linear its input as the linear reads it
// ("model.layers.*.self_attn.q_proj:input"), so that XLA redistributes
// the activation where the plan does rather than the weight; a PartitionSpec names a dim split over two axes by both, in mesh
// order, as jax.sharding.Mesh lays devices out row-major like the plan.
JaxPlan jaxPlan(const ExportInput &in);

// A Python module a training script imports: `make_mesh(devices=None)`,
// `param_shardings(params, mesh)` (a NamedSharding per leaf of a Flax
// parameter tree), `input_shardings(mesh)`, `activation_constraints` and
// `constrain(x, name, mesh)` (jax.lax.with_sharding_constraint),
// `micro_batches` and `remat_modules`, with the tables they read (`partition_specs` and `input_specs` by the plan's
// names, `flax_paths`, `param_shapes`).
std::string jaxPlanPython(const JaxPlan &plan, const plan::Plan &source);

// jaxPlanPython(jaxPlan(in), in.plan).
std::string jaxPartitionSpecs(const ExportInput &in);

} // namespace tapestry::exports
