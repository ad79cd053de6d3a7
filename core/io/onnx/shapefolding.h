#pragma once

#include "onnx/onnx_pb.h"

#include <vector>

namespace tapestry::io::onnximport {

// Whether input `slot` of `node` carries a shape or constant (shapeinputs.h)
// rather than data; only standard-domain ops have such inputs.
bool isShapeEdge(const ::onnx::NodeProto &node, int slot);

// Which nodes of a topologically sorted graph make up the compute graph the
// user sees. Shape edges are cut first; then a node stays when it computes a
// graph output or data that a staying node reads. What goes: Shape, Gather,
// Unsqueeze, Concat chains feeding Reshape targets, Constants read only as
// shapes, ConstantOfShape and Range on constants that only feed shapes, and
// dead code.
std::vector<bool> computeNodes(const ::onnx::GraphProto &graph);

} // namespace tapestry::io::onnximport
