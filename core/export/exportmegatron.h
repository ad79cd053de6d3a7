#pragma once

#include "cost/costoptions.h"
#include "export/exportaxis.h"
#include "ir/graph.h"

#include <cstdint>

#include <string>
#include <vector>

namespace tapestry::exports {

// A decoder-only transformer as Megatron-LM's GPT model (pretrain_gpt.py)
// builds it, read from the graph's structure: the attention layers (by
// their score MatMuls), the linears feeding each attention core and the MLP
// beside it, the norms, embeddings and LM head.
struct MegatronModel {
    int layers = 0;
    std::int64_t hidden = 0;
    std::int64_t ffnHidden = 0;
    std::int64_t heads = 0;
    std::int64_t queryGroups = 0;  // key/value heads; == heads without grouping
    std::int64_t kvChannels = 0;   // the head width where it is not hidden / heads; else 0
    std::int64_t vocab = 0;        // the logits' width
    std::int64_t seqLength = 0;
    std::int64_t maxPositions = 0;  // a learned position table's rows, else the sequence
    bool swiglu = false;            // a SiLU-gated MLP (two input linears)
    bool openaiGelu = false;        // GELU by its tanh approximation (GPT-2's)
    std::string normalization;      // "RMSNorm" or "LayerNorm"
    double normEpsilon = 1e-5;
    std::string positionEmbedding;  // "rope", "learned_absolute" or "none"
    bool untiedOutput = false;      // the LM head has a weight of its own
    bool linearBias = true;         // every linear of a layer has a bias (else none has)
    bool dropout = false;           // the graph has Dropout ops
    ir::DType dtype = ir::DType::F32;
};

// Throws TapestryError naming `planInput` (and the op or tensor) where
// pretrain_gpt.py cannot build the graph's model: no attention layers, two
// kinds of layers (an encoder-decoder), layers that normalise after the
// residual add (post-norm), a mixture of experts, an MLP activation
// Megatron-LM has no argument for, biases on some linears only, extra
// embedding tables (token types).
MegatronModel megatronModel(const ir::Graph &graph, const std::string &planInput);

// The arguments of a pretrain_gpt.py job that runs the plan: Megatron-LM's
// parallelism, the model's architecture, the batch, the precision and the
// memory techniques. The plan's parameters must be stored as Megatron-LM
// stores them (column- and row-parallel linears by module name,
// vocabulary-parallel embedding, the rest replicated) on one
// tensor-parallel axis, or not split at all. The axes are mapped by what
// they carry, not by their names: the axis the weights are split on gives
// --tensor-model-parallel-size, every other axis is data parallel
// (Megatron-LM's data-parallel size is what remains of the world).
struct MegatronArguments {
    int tensorParallel = 1;
    int dataParallel = 1;
    int tensorParallelAxis = -1;        // mesh axis index; -1: none
    std::vector<int> dataParallelAxes;  // mesh axis indices
    bool sequenceParallel = false;  // norms compute on sequence shards
    // The plan's pipeline (plan::PlanPipeline): its stages, the layers of a
    // virtual stage where interleaved (0: not), and the layers of the first
    // and the last stage where they differ from the others' (0: alike).
    int pipelineParallel = 1;
    int layersPerVirtualStage = 0;
    int firstStageLayers = 0, lastStageLayers = 0;
    MegatronModel model;
    // The plan's memory techniques (cost::Techniques), as Megatron-LM's
    // arguments: flash attention as the attention backend (else the
    // unfused one, which keeps the scores as the plan charges them),
    // recomputation granularity, ZeRO-1/2 as the distributed optimizer and
    // ZeRO-3 as Megatron-FSDP's parameter sharding, the optimizer offloaded,
    // and the batch: the model's batch is the global batch, each
    // data-parallel rank runs it in micro-batches of
    // global / (data parallel x micro-batches).
    cost::Techniques techniques;
    cost::Recompute recompute = cost::Recompute::None;  // of the decoder layers
    std::int64_t globalBatch = 0;     // 0: the model has no batch
    std::int64_t microBatchSize = 0;
    // What the job must be told besides the arguments, one line each (the
    // tokenizer sets the vocabulary; the rotary base is not in the graph).
    std::vector<std::string> notes;
    std::vector<std::string> arguments() const;  // {"--tensor-model-parallel-size", "8", ...}
};

// Throws TapestryError naming `planInput` and the first tensor the plan
// stores otherwise than Megatron-LM would (with the spec Megatron-LM would
// give it), the batch split on the tensor-parallel axis, an axis besides
// the tensor-parallel one that splits the sequence (Megatron-LM would run
// it data parallel), ZeRO over other axes than the data-parallel ones, a
// batch that the data-parallel ranks and micro-batches do not divide, or a
// model pretrain_gpt.py cannot build (megatronModel).
MegatronArguments megatronArguments(const ExportInput &in, const std::string &planInput);

} // namespace tapestry::exports
