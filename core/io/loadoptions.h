#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace tapestry::io {

// Values the user binds at load time: symbolic ONNX dims, zoo batch/sequence.
struct LoadOptions {
    std::optional<std::int64_t> batch;
    std::optional<std::int64_t> seq;
    // ONNX: a fused projection's weight ([in, k x m], its output sliced into
    // k parts) held as its parts stacked, [k, in, m], so that plans can
    // split every part by heads (onnx/fusedprojections.h).
    bool stackFusedProjections = true;
    // ONNX: weights an export's constant folding renamed (onnx::MatMul_N)
    // named after their modules again (onnx/weightnames.h).
    bool nameFoldedWeights = true;
    // Told, one line each, what the loader guessed on the user's behalf (a
    // config.json read by another family than its model_type names).
    std::function<void(const std::string &)> note;
};

} // namespace tapestry::io
