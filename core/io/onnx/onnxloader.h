#pragma once

#include "io/loadoptions.h"
#include "ir/graph.h"

#include <cstdint>
#include <span>
#include <string>

namespace tapestry::io {

// The ONNX opsets the loader reads; files outside are rejected.
inline constexpr int kMinOnnxOpset = 11;
inline constexpr int kMaxOnnxOpset = 17;

// Loads the structure of an ONNX model: ops named after their nodes, tensors
// with concrete shapes (symbolic batch/sequence dims bound by `options`),
// parameters with their shapes. Weight bytes are never read: the file is
// memory-mapped and initializer data skipped, and external data files are
// never opened. Shape-computing subgraphs are folded away. The result is
// validated. Throws TapestryError naming the file and the problem.
ir::Graph loadOnnx(const std::string &path, const LoadOptions &options = {});

// The same from bytes in memory; `input` names them in errors.
ir::Graph loadOnnxFromBuffer(std::span<const std::uint8_t> bytes, const std::string &input,
                             const LoadOptions &options = {});

} // namespace tapestry::io
