#pragma once

#include "cost/costoptions.h"
#include "cost/pipeline.h"
#include "ir/graph.h"
#include "passes/subgraphclasses.h"
#include "plan/plan.h"
#include "sharding/mesh.h"
#include "sharding/meshprofile.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tapestry::search {

// The cluster a shape is chosen for.
struct ShapeOptions {
    int devices = 0;
    int devicesPerNode = 0;  // 0: the profile's intra_node_devices
    // Techniques every shape is costed with (flash attention, the bytes
    // per parameter, ...); the recomputation is chosen per shape, ZeRO-1
    // shards the optimizer state over the data axis (Megatron's
    // distributed optimizer) and the micro-batches are the pipeline's.
    cost::CostOptions cost;
    // Shapes held to these degrees where set (0: any).
    int pipeline = 0, tensor = 0;
    // The recomputation held to this where set; else none or full, chosen.
    std::optional<cost::Recompute> recompute;
    // Flash attention where the model has attention (Dao et al.; default),
    // or never.
    bool flashAttention = true;
    std::function<void(std::size_t, std::size_t)> progress;
    std::function<bool()> cancelled;
};

// One way to lay the cluster out: `pipeline` stages of `data` x `tensor`
// devices each (the tensor axis innermost, inside a node where it fits),
// the stages' plan Megatron's (column/row-parallel pairs with sequence
// parallelism on the tensor axis, the batch split on the data axis), run as
// `cost.stages` say.
struct ShapeCandidate {
    int pipeline = 1, data = 1, tensor = 1;
    cost::Schedule schedule = cost::Schedule::OneFOneB;
    int virtualStages = 1;
    int microBatches = 1;
    cost::Recompute recompute = cost::Recompute::None;
    sharding::Mesh stageMesh;   // one stage's devices: (data, model), axes of one left out
    std::string pipelineLink;   // the link between stages
    cost::PipelineCost cost;
    double tokensPerSecond = 0;
    double modelFlopsPerDevice = 0;  // per second: the model's FLOPs of a step (6 x parameters x tokens), per device
    cost::CostOptions options;  // the stages' techniques, the pipeline's micro-batches
    cost::Pipeline pipelineOptions;  // as costed, cuts included
    std::string shape() const;  // "pipeline 16 x data 8 x tensor 8"
};

struct ShapeSearchResult {
    // Best first: those that fit by step time, then the others by memory.
    std::vector<ShapeCandidate> ranked;
    std::vector<std::string> skipped;  // shapes that cannot apply, each with its reason
    int layers = 0;                    // the model's, as the pipeline cuts them
    std::int64_t batch = 0;            // the global batch of a step
    double seconds = 0;
};

// Every factorisation of the devices into pipeline x data x tensor (tensor
// dividing a node's devices, the stages at most the model's layers, data
// dividing the batch), each with 1F1B and, where the stages' layers and the
// micro-batches allow it, interleaved 1F1B of two chunks; recomputation
// none or full; micro-batches of one sample per data replica where there
// are stages, else none or as many (gradient accumulation).
// The plan of one shape: the stages' plan on its stage mesh, costed, with
// the pipeline and what it costs.
plan::Plan shapePlan(const ir::Graph &graph, const std::string &modelSource, const ShapeCandidate &shape);

ShapeSearchResult searchShapes(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                               const std::string &modelSource, const sharding::MeshProfile &profile,
                               const ShapeOptions &options);

} // namespace tapestry::search
