#pragma once

#include "cost/costoptions.h"
#include "cost/plancost.h"
#include "ir/graph.h"
#include "passes/subgraphclasses.h"
#include "sharding/mesh.h"
#include "sharding/shardingspec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::cost {

// How a pipeline runs its micro-batches (Narayanan et al., "Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
// SC'21, section 2.2): GPipe runs every forward, then every backward;
// 1F1B alternates them once the pipeline is full; interleaved 1F1B gives
// each device several chunks of layers (virtual stages), which shortens
// the bubble by their count.
enum class Schedule { GPipe, OneFOneB, Interleaved };
std::string_view toString(Schedule s);  // "gpipe", "1f1b", "interleaved"
std::optional<Schedule> scheduleFromString(std::string_view s);

// A plan's pipeline: the model cut into `stages` runs of consecutive layers
// (the copies of its repeated classes, TAP's unit), each on its own group of
// devices, the micro-batches (CostOptions' techniques.microBatches) passed
// from stage to stage over `link`.
struct Pipeline {
    int stages = 1;
    Schedule schedule = Schedule::OneFOneB;
    int virtualStages = 1;  // chunks of layers per device (interleaved)
    sharding::LinkProfile link;  // between consecutive stages
    // The first layer of each stage after the first (stages - 1 cuts,
    // rising); empty: balanced by the stages' costs (balanceStages).
    std::vector<int> cuts;
};

// The layers a pipeline cuts between: the copies of the model's repeated
// classes in graph order (an instance nested in another counts as the
// outer one). Per op (by op id): its layer, -1 before the first (the
// embeddings) and ops after a layer outside every class go with the layer
// before them (a final norm, the head, the loss go with the last).
struct ModelLayers {
    int count = 0;
    std::vector<int> layerOf;  // by op id
};
ModelLayers modelLayers(const ir::Graph &graph, const passes::SubgraphClasses &classes);
// Per op (by op id): the chunk it runs in, the chunks cut before the layers
// in `cuts` (rising): 0 up to the first cut, and so on.
std::vector<int> chunkOfOps(const ModelLayers &layers, const std::vector<int> &cuts);

struct StageCost {
    int firstLayer = 0;  // layers [firstLayer, firstLayer + layers)
    int layers = 0;
    double microBatch = 0;  // forward and backward of one micro-batch, s
    double perStep = 0;     // once a step: gradient synchronisation, ZeRO, the optimizer, s
    std::int64_t modelStates = 0;   // parameters, gradients and optimizer state, bytes per device
    std::int64_t activations = 0;   // the micro-batches it keeps at once, bytes per device
    double inFlight = 0;            // how many micro-batches' activations that is
    std::int64_t memory() const { return modelStates + activations; }
};

struct PipelineCost {
    std::vector<StageCost> stages;
    double stepTime = 0;
    double bubble = 0;        // s of the step no stage computes in, on the slowest stage
    double bubbleFraction = 0;  // bubble / step
    double p2p = 0;           // s: the activation and gradient sends on the step's critical path
    std::int64_t p2pBytes = 0;  // one send: one micro-batch's boundary activation, per device
    std::int64_t peakMemory = 0;  // the largest stage's
    std::int64_t memoryCapacity = 0;
    bool fitsMemory = true;
    std::vector<int> cuts;  // the first layer of each stage after the first
};

// The cost of a step of `pipeline` where every stage runs the plan `specs`
// on `stageMesh` (the devices of one stage: data and tensor axes), costed
// whole as `cost` (with breakdowns: PlanCoster::cost) under `options`,
// whose micro-batches are the pipeline's. Per micro-batch, a stage takes
// its ops' forward and backward time over the micro-batches; its
// parameters' gradient collectives and its share of the optimizer once a
// step. The step: (m + p - 1) slots of the slowest stage for GPipe and
// 1F1B, (m + (p - 1) / v) for interleaved, each slot with the sends in and
// out of the stage (v per direction interleaved); memory per stage: its
// model states and, for 1F1B, min(p - i, m) micro-batches' activations on
// stage i (x (1 + (p - 1) / (p v)) interleaved; GPipe: all m).
PipelineCost pipelineCost(const ir::Graph &graph, const ModelLayers &layers, const PlanCost &cost,
                          const std::vector<sharding::ShardingSpec> &specs, const sharding::Mesh &stageMesh,
                          const CostOptions &options, const Pipeline &pipeline);

// One stage's work in a step, in time order: the forward or the backward
// of a micro-batch on one of its chunks.
struct PipelineSlot {
    bool backward = false;
    int microBatch = 0;
    int chunk = 0;  // of the stage's chunks (interleaved), 0 otherwise
    double start = 0, end = 0;
};
struct PipelineTimeline {
    std::vector<std::vector<PipelineSlot>> stages;  // per stage, in time order
    double makespan = 0;  // the last slot's end
};
// The step as the schedule runs it: each stage takes its slots in the
// schedule's order (GPipe: every forward, then every backward; 1F1B: p - i
// - 1 forwards, then one forward and one backward in turn, then the
// backwards left; interleaved as Megatron-LM orders its chunks), each as
// soon as the stage is free and its input has come: the forward from the
// chunk before (after `send` seconds), the backward from the chunk after.
// Per stage, `microBatch` (StageCost) split `forwardShare` to forward, the
// rest to backward, and by the stage's chunks alike.
PipelineTimeline pipelineTimeline(const PipelineCost &cost, Schedule schedule, int virtualStages, int microBatches,
                                  double forwardShare, double send);

// The cuts that minimise the slowest stage's time per micro-batch, each
// stage at least one layer; `layerTime[j]` a layer's time, `before` and
// `after` the ops before the first layer and after the last.
std::vector<int> balanceStages(const std::vector<double> &layerTime, double before, double after, int stages);

} // namespace tapestry::cost
