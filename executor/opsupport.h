#pragma once

#include "ir/graph.h"

#include <optional>
#include <string>

namespace tapestry::exec {

// Which ops the executor can run (the op registry, opregistry.h, plus the
// dtype rules every kernel shares), checked before any work so that a graph
// with an op it cannot run is refused up front rather than failing mid-step.

// Why the executor cannot run `op` (no kernel for its type, or a form of the
// op the kernels do not cover), or nothing when it can.
std::optional<std::string> unsupportedReason(const ir::Graph &graph, ir::OpId op);

// Throws TapestryError naming `input`, every op type that cannot run, how
// many ops of it, the first op's name and the reason.
void checkRunnable(const ir::Graph &graph, const std::string &input);

// True when input `index` of an op of this type is integer data the kernels
// read (Gather's ids, the loss's labels).
bool isIndexInput(const std::string &opType, std::size_t index);
// True when input `index` only restates the output's static shape (ONNX's
// shape, axes and split-size operands of Reshape, Expand, Squeeze, Unsqueeze,
// Split): ignored.
bool isShapeOperand(const std::string &opType, std::size_t index);

} // namespace tapestry::exec
