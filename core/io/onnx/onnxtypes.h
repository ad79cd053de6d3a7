#pragma once

#include "ir/graph.h"

#include "onnx/onnx_pb.h"

#include <optional>
#include <string>

namespace tapestry::io::onnximport {

// The IR's dtype for an ONNX element type; nothing for the types Tapestry
// does not model (strings, complex, unsigned 16-64 bit, int16).
std::optional<ir::DType> dtypeFromOnnx(int elemType);

// "FLOAT", "STRING", ... or the number when it is not a known element type.
std::string onnxTypeName(int elemType);

// Concrete shape of a tensor type, or the problem: not a tensor, no shape,
// a dim still symbolic or unknown, a negative dim.
struct ShapeResult {
    ir::Shape shape;
    std::string problem;
};
ShapeResult concreteShape(const ::onnx::TypeProto &type);

} // namespace tapestry::io::onnximport
