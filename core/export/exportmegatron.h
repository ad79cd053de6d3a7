#pragma once

#include "cost/costoptions.h"
#include "export/exportaxis.h"

#include <cstdint>

#include <string>
#include <vector>

namespace tapestry::exports {

// Megatron-LM's parallelism arguments for a plan that is Megatron-shaped:
// every parameter stored as Megatron-LM stores it (column- and
// row-parallel linears by module name, vocabulary-parallel embedding, the
// rest replicated) on one tensor-parallel axis, the other axes data
// parallel; or no parameter split at all (data parallel). The axes are
// mapped by what they carry, not by their names: the axis the weights are
// split on gives --tensor-model-parallel-size, every other axis is data
// parallel (Megatron-LM's data-parallel size is what remains of the world).
struct MegatronArguments {
    int tensorParallel = 1;
    int dataParallel = 1;
    int tensorParallelAxis = -1;        // mesh axis index; -1: none
    std::vector<int> dataParallelAxes;  // mesh axis indices
    bool sequenceParallel = false;  // norms compute on sequence shards
    // The plan's memory techniques (cost::Techniques), as Megatron-LM's
    // arguments: flash attention, recomputation granularity, ZeRO-1 as the
    // distributed optimizer and ZeRO-2/3 as Megatron-FSDP's sharding
    // strategies, and the batch: the model's batch is the global batch,
    // each data-parallel rank runs it in micro-batches of
    // global / (data parallel x micro-batches).
    cost::Techniques techniques;
    std::int64_t globalBatch = 0;     // 0: the model has no batch
    std::int64_t microBatchSize = 0;
    std::vector<std::string> arguments() const;  // {"--tensor-model-parallel-size", "8", ...}
};

// Throws TapestryError naming `planInput` and the first parameter whose
// spec breaks Megatron's shape, with the spec Megatron-LM would give it, an
// axis besides the tensor-parallel one that splits the sequence, which
// Megatron-LM would run data parallel, or a batch that the data-parallel
// ranks and micro-batches do not divide.
MegatronArguments megatronArguments(const ExportInput &in, const std::string &planInput);

} // namespace tapestry::exports
