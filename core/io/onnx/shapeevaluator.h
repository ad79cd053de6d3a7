#pragma once

#include "onnx/onnx_pb.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace tapestry::io::onnximport {

// Tensor values known at load time, by value name: initializers read whole,
// Constants, and what evaluateNode computed.
using KnownValues = std::unordered_map<std::string, ::onnx::TensorProto>;

// Tensors larger than this are not evaluated: shape arithmetic works on a
// handful of integers; anything bigger is data.
inline constexpr std::int64_t kMaxEvaluatedElements = 4096;

// Computes the outputs of one node when they are small tensors that follow
// from known inputs and from the shapes inference already gave: the
// Shape -> Gather/Slice -> Add/Mul/Div/Mod -> Unsqueeze -> Concat arithmetic
// PyTorch exports to size Reshapes, Slices and Ranges, and the float factors
// it derives from shapes (Shape -> Cast -> Sqrt -> Div for attention's
// scale). Their values feed the inference of later nodes (ONNX 1.12 infers
// a Reshape, Slice or Range output only from known input data), become
// attributes where the loader cuts shape edges, and let the loader fold
// single-element values into constants (shapefolding.h). `inputTypes` and
// `outputTypes` hold the node's inferred types, null where unknown.
void evaluateNode(const ::onnx::NodeProto &node, const std::vector<const ::onnx::TypeProto *> &inputTypes,
                  const std::vector<const ::onnx::TypeProto *> &outputTypes, KnownValues &values);

} // namespace tapestry::io::onnximport
