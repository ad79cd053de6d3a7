#pragma once

#include "ir/attribute.h"

#include "onnx/onnx_pb.h"

namespace tapestry::io::onnximport {

// A node's attributes of the kinds the IR holds: INT, FLOAT, STRING, INTS,
// FLOATS, STRINGS. Tensor, graph and type attributes are left out: a
// Constant's value is folded by the loader and subgraph bodies are not part
// of the planned graph.
ir::Attributes convertAttributes(const ::onnx::NodeProto &node);

} // namespace tapestry::io::onnximport
