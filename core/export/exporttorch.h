#pragma once

#include "export/exportaxis.h"

#include <map>
#include <string>
#include <vector>

namespace tapestry::exports {

// One entry of a torch tensor-parallel plan: a module name (or a glob over
// the layer index, where every instance shares the entry) and the
// ParallelStyle applied to it, with the layouts on the tensor-parallel mesh
// where they differ from the style's defaults (ColwiseParallel: Replicate()
// in, Shard(-1) out; RowwiseParallel: Shard(-1) in, Replicate() out).
struct TorchModulePlan {
    std::string module;  // "model.layers.*.self_attn.q_proj"
    // "ColwiseParallel", "RowwiseParallel", "SequenceParallel" or
    // "PrepareModuleInput" (a module whose children read one input, gathered
    // once for all of them).
    std::string style;
    std::string inputLayouts;   // "Shard(1)"; empty: the default
    std::string outputLayouts;
    std::string desiredInputLayouts;  // PrepareModuleInput
    // PrepareModuleInput: the keyword the module takes its input by
    // ("hidden_states" for Hugging Face's attention modules); empty: the
    // first positional argument.
    std::string inputKwarg;
    // false: the output stays a DTensor (the vocabulary-split logits
    // loss_parallel reads, a module input its children share).
    bool useLocalOutput = true;
    // Hugging Face's Conv1D (GPT-2's c_attn, c_proj, c_fc: weight [in, out]):
    // the module's own Conv1DColwiseParallel / Conv1DRowwiseParallel.
    bool conv1d = false;
    // A fused projection of this many parts side by side (GPT-2's c_attn:
    // q, k and v), each split by heads.
    int parts = 1;
    friend bool operator==(const TorchModulePlan &, const TorchModulePlan &) = default;
};

// The whole job as torch runs it: the mesh, the tensor-parallel plan, the
// data-parallel axes and how they synchronise, the modules whose local head
// counts change, the modules recomputed, and the collectives the plan costs
// per step, which the exported module issues.
struct TorchPlan {
    std::string meshAxis;  // the tensor-parallel axis' exported name; empty when nothing is split
    int meshAxisSize = 1;
    // The whole mesh: its sizes and its axes named by what each carries
    // (exportAxisNames), with a note per axis.
    std::vector<int> meshShape;
    std::vector<std::string> meshDimNames;
    std::vector<std::string> axisNotes;
    std::vector<TorchModulePlan> modules;  // ordered by module name
    // Axes the batch is split on (graph inputs Shard(0)): gradients are
    // averaged over them, by FSDP (fully_shard) for ZeRO plans, else by an
    // all-reduce per gradient.
    std::vector<std::string> dataAxes;
    int zeroStage = 0;
    // The axes ZeRO shards over (fully_shard's mesh): the plan's ZeRO axes
    // other than the tensor-parallel one.
    std::vector<std::string> fsdpAxes;
    // Modules fully_shard wraps one by one (the repeated layers), the root last.
    std::vector<std::string> shardedModules;
    bool lossParallel = false;
    // Attention modules whose heads are split: their head counts and widths
    // (num_heads, num_key_value_heads, hidden_size, ... where the module has
    // them) are divided by the tensor-parallel size.
    std::vector<std::string> attentionModules;
    // Modules whose forward pass is run again in the backward pass (full
    // recomputation of a kind of layer).
    std::vector<std::string> checkpointModules;
    int microBatches = 1;
    // Parameters one module shares with another (an LM head's weight, the
    // token embedding's): (the sharing module's parameter, the owner's).
    std::vector<std::pair<std::string, std::string>> tiedParameters;
    // What torch does differently from the plan, one line each (a tensor
    // gathered once per reader where the plan gathers it once).
    std::vector<std::string> notes;
    // The plan's collectives per step by phase and kind ("forward" ->
    // "all-gather" -> 4), as the exported module issues them.
    std::map<std::string, std::map<std::string, int>> collectives;
};

// The plan as torch runs it (parallelize_module, loss_parallel, fully_shard,
// activation checkpointing). Weights are [in, out], used as x @ W (and
// embedding tables [vocab, hidden]): a split of dim 1 is ColwiseParallel, of
// dim 0 RowwiseParallel; a norm computing on sequence shards is
// SequenceParallel. Every collective the plan costs must be one torch
// issues: a module's input or output redistributed, a SequenceParallel
// norm's weight gradient, the vocabulary-split loss, the data-parallel
// gradients and ZeRO's gathers. Throws TapestryError naming `planInput` and
// the tensor where torch cannot do what the plan does: parameters split
// over two mesh axes, a split weight read by something other than a
// linear or embedding module, a norm on hidden shards, a reshard between
// modules, the batch split on the tensor-parallel axis, heads split within
// a head, selective recomputation.
TorchPlan torchPlan(const ExportInput &in, const std::string &planInput);

// A Python module a training script imports: `build_mesh(device_type)`
// (init_device_mesh with the plan's axis names), `parallelize(model, mesh)`
// (tensor parallelism, local head counts, activation checkpointing, FSDP or
// gradient averaging on the data axes), `loss_context()` (loss_parallel
// where the vocabulary is split), `batch_slice(mesh)` (this rank's part of
// the global batch) and `plan_collectives`.
std::string torchPlanPython(const TorchPlan &plan, const plan::Plan &source);
// A pipelined plan (plan.pipeline) as torch.distributed.pipelining runs it:
// one rank a stage, each holding its chunks of a LLaMA-shaped model
// (model.embed_tokens, model.layers.N, model.norm, lm_head: Hugging Face's
// LlamaForCausalLM) cut where the plan's cuts say, and the plan's schedule
// (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B) over its
// micro-batches. Refused (TapestryError naming `planInput`) where a stage
// is more than one device or the model is not so shaped.
std::string torchPipelinePython(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput);

} // namespace tapestry::exports
