#pragma once

#include "ir/graph.h"

#include <string>
#include <utility>
#include <vector>

namespace tapestry::io::onnximport {

// Module names back on weights an export's constant folding renamed. torch
// folds the transpose of an nn.Linear weight into a new initializer named
// onnx::MatMul_1234, so a plan of the export could not name the module a
// training script splits. A parameter so named that one MatMul or Gemm reads
// as its weight takes the name of that linear's bias with "bias" turned
// "weight" (layers.0.linear1.bias: layers.0.linear1.weight; torch's
// MultiheadAttention in_proj_bias: in_proj_weight), else its op's scope with
// ".weight" (/h.0/attn/c_attn/MatMul: h.0.attn.c_attn.weight), where no
// tensor has that name yet. Held [in, out] as the zoo holds linear weights.
// Returns the renames, old name first.
std::vector<std::pair<std::string, std::string>> nameFoldedWeights(ir::Graph &graph);

} // namespace tapestry::io::onnximport
