#pragma once

#include "io/onnx/shapeevaluator.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <unordered_set>

namespace tapestry::io::onnximport {

// Fills the type and shape of every value of the sorted, bound graph into its
// value_info, node by node with ONNX's own inference functions (the per-op
// functions onnx::shape_inference::InferShapes runs, with its contexts, its
// merge with declared shapes and its subgraph inferencer). Between nodes,
// evaluateNode computes the small values of shape arithmetic, so a Reshape,
// Slice or Range whose target or bounds come from Shape ops gets a concrete
// output in the same single pass; InferShapes alone leaves those unknown in ONNX 1.12
// and would need one more run per layer to catch up.
// Every node with a schema is first checked against it, which keeps malformed
// nodes away from the inference functions. Initializers whose data was left
// in the file become typed graph inputs: their shapes are known, their values
// not. Returns the values known at load time. Throws TapestryError naming
// `input` and the failing node.
KnownValues inferShapes(::onnx::ModelProto &model, const std::unordered_set<std::string> &datalessInitializers,
                        const std::string &input);

} // namespace tapestry::io::onnximport
