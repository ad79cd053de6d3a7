#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

namespace tapestry::cost {

// Activation recomputation (Korthikanti et al.): none; selective (the
// attention core's s x s tensors are recomputed in the backward pass, not
// kept); full (each transformer layer keeps its input only and runs its
// forward again in the backward pass).
enum class Recompute { None, Selective, Full };
std::string_view toString(Recompute r);  // "none", "selective", "full"
std::optional<Recompute> recomputeFromString(std::string_view s);

// The memory techniques of a training job, part of its plan
// (core/cost/README.md has their formulas and sources).
struct Techniques {
    // Attention computed blockwise (FlashAttention): no s x s tensor is
    // kept for the backward pass, only the softmax statistics; the backward
    // pass computes the scores again.
    bool flashAttention = false;
    // For every transformer layer, except the kinds of layer named in
    // `recomputeLayers` (below), which take theirs.
    Recompute recompute = Recompute::None;
    // ZeRO (Rajbhandari et al.): 1 shards optimizer state, 2 also
    // gradients, 3 (FSDP) also parameters, each parameter over the mesh
    // axes it is replicated on.
    int zeroStage = 0;
    // Micro-batches per step (gradient accumulation): the model's batch is
    // the global batch of one optimizer step, run as this many micro-batches
    // of batch / microBatches samples, gradients synchronised once.
    int microBatches = 1;
    // Recomputation by kind of layer (a class of repeated layers by its
    // scope pattern, "decoder/block.*/": cost::layerKind).
    std::map<std::string, Recompute> recomputeLayers = {};
    // The mesh axes (by name) ZeRO shards over, as frameworks shard over
    // their data-parallel group (FSDP's mesh, Megatron's distributed
    // optimizer): set where the axes' names give them roles, to the data
    // axes. Unset: every axis a parameter is replicated on.
    std::optional<std::vector<std::string>> zeroAxes = std::nullopt;
    // ZeRO-Offload (Ren et al.): the optimizer state (fp32 master weights
    // and Adam's moments, as ZeRO shards it) lives in host memory and the
    // update runs on the host; each step sends the gradient shard to the
    // host and the updated parameters back over the host link.
    bool offloadOptimizer = false;
    friend bool operator==(const Techniques &, const Techniques &) = default;
};

// The recomputation of the layers of `kind` (cost::layerKind; empty: outside
// any layer, the plan-wide setting).
Recompute recomputeOf(const Techniques &t, std::string_view kind);

// "flash attention, full recomputation, ZeRO-3, 4 micro-batches", or "none";
// a kind's own recomputation as "full recomputation of decoder/block.*/".
std::string describe(const Techniques &t);

// Knobs of the cost model. Defaults: mixed-precision Adam, 16 bytes per
// parameter (16-bit weight and gradient, fp32 master weight and two moments).
struct CostOptions {
    double parameterBytes = 2;
    double gradientBytes = 2;
    double optimizerBytes = 12;
    // Bytes of one activation element kept for the backward pass in
    // transformer layers: Korthikanti et al.'s table is for 16-bit
    // activations. Not written to plan files; tapestry-exec costs the
    // float32 tensors it holds with 4.
    double activationBytes = 2;
    // Adam's update: a dozen FLOPs per parameter, at float32 peak.
    double optimizerFlopsPerParameter = 12;
    // With the optimizer offloaded: the host link of each device (bytes/s
    // each way; PCIe Gen5 x16 as an H100 has it measures about 50 GB/s),
    // and the parameters the host updates per second for each device (Adam
    // on the CPU is bound by host memory: a DGX H100's two sockets move
    // about 600 GB/s, 75 GB/s per GPU, at about 36 bytes read and written
    // per parameter).
    double hostBandwidth = 50e9;
    double hostOptimizerParametersPerSecond = 2e9;
    // Overlap the backward pass' collectives with its compute (gradient
    // all-reduces run while earlier layers compute): backward time becomes
    // max(compute, communication) instead of their sum.
    bool overlap = false;
    Techniques techniques;

    double bytesPerParameter() const { return parameterBytes + gradientBytes + optimizerBytes; }
    friend bool operator==(const CostOptions &, const CostOptions &) = default;
};

} // namespace tapestry::cost
