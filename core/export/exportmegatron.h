#pragma once

#include "export/exportaxis.h"

#include <string>
#include <vector>

namespace tapestry::exports {

// Megatron-LM's parallelism arguments for a plan that is Megatron-shaped:
// every parameter stored as Megatron-LM stores it (column- and
// row-parallel linears by module name, vocabulary-parallel embedding, the
// rest replicated) on one tensor-parallel axis, the other axes data
// parallel; or no parameter split at all (data parallel).
struct MegatronArguments {
    int tensorParallel = 1;
    int dataParallel = 1;
    bool sequenceParallel = false;  // norms compute on sequence shards
    std::vector<std::string> arguments() const;  // {"--tensor-model-parallel-size", "8", ...}
};

// Throws TapestryError naming `planInput` and the first parameter whose
// spec breaks Megatron's shape, with the spec Megatron-LM would give it.
MegatronArguments megatronArguments(const ExportInput &in, const std::string &planInput);

} // namespace tapestry::exports
