#pragma once

#include <cstdint>
#include <optional>

namespace tapestry::io {

// Values the user binds at load time: symbolic ONNX dims, zoo batch/sequence.
struct LoadOptions {
    std::optional<std::int64_t> batch;
    std::optional<std::int64_t> seq;
};

} // namespace tapestry::io
