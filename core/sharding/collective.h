#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tapestry::sharding {

enum class CollectiveKind { AllReduce, AllGather, ReduceScatter, AllToAll };

std::string_view toString(CollectiveKind kind);  // "all-reduce", "all-gather", ...
std::optional<CollectiveKind> collectiveKindFromString(std::string_view s);

// One collective over one mesh axis. `bytes` is the size nccl-tests reports
// for it, per device: the reduced buffer (all-reduce), the gathered output
// (all-gather), the input before scattering (reduce-scatter), the local
// buffer exchanged (all-to-all).
struct Collective {
    CollectiveKind kind = CollectiveKind::AllReduce;
    int axis = 0;
    std::int64_t bytes = 0;
    std::string tensor;  // the tensor (or gradient) it moves
    std::string reason;  // why: "partial sum to replicated", "softmax axis split", ...

    std::string toString(const std::string &axisName) const;
};

} // namespace tapestry::sharding
