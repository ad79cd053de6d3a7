#pragma once

#include "ir/error.h"
#include "ir/graph.h"

#include <optional>
#include <string>

namespace tapestry::ir {

// Checks the graph and reports the first problem found, naming the op or
// tensor: dangling tensor references, duplicate names, activations nothing
// produces, cycles, and shape mismatches for ops whose shape rule is known.
// `input` names the model (file or preset) in the error.
std::optional<Error> validate(const Graph &graph, const std::string &input = {});

// Shape check of one op whose rule is known (MatMul, Gemm, elementwise with
// broadcasting, Reshape, Transpose, Softmax, LayerNormalization, RMSNorm,
// Gather, Concat, Split). Returns the problem, or nothing when the shapes fit
// or the op type has no rule.
std::optional<std::string> checkShapes(const Graph &graph, OpId op);

// Numpy-style broadcast of two shapes; nothing when they do not broadcast.
std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b);

std::string shapeToString(const Shape &shape);

} // namespace tapestry::ir
