#pragma once

#include "ir/graph.h"

#include <optional>
#include <string_view>
#include <vector>

namespace tapestry::ir {

// An Einsum equation ("bhid,bhjd->bhij", ONNX's and numpy's notation:
// letters name dims, "..." the broadcast dims, spaces ignored, no "->" the
// implicit form whose output takes the letters seen once, in alphabetical
// order) resolved against its inputs' shapes: every dim of every operand
// named by one label. A label is a letter, or "...k" for the k-th of the
// ellipsis' dims counted from its right end, the broadcast dims aligned on
// the right as numpy does.
struct EinsumLabels {
    std::vector<std::vector<int>> inputs;  // per input, per dim: the label
    std::vector<int> output;               // per output dim: the label
    std::vector<std::int64_t> sizes;       // per label: its size (the largest where 1 broadcasts)
    int labelCount() const { return static_cast<int>(sizes.size()); }
    // Whether `label` is summed over (named by no output dim).
    bool contracted(int label) const;
};

// Nothing when the equation does not parse or does not fit the shapes (a
// label of two sizes neither 1, a rank other than the operand's).
std::optional<EinsumLabels> parseEinsum(std::string_view equation, const std::vector<Shape> &inputs);

} // namespace tapestry::ir
