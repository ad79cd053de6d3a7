#pragma once

#include "ir/attribute.h"

#include "onnx/onnx_pb.h"

#include <optional>

namespace tapestry::io::onnximport {

// The values of a tensor whose data is present and consistent with its dims,
// as an attribute: a scalar for a rank-0 tensor, a list otherwise. Nothing
// for tensors without data or of types other than integer, bool, float and
// double.
std::optional<ir::Attribute> tensorValue(const ::onnx::TensorProto &tensor);

// The integer values of such a tensor (integer and bool types only).
std::optional<std::vector<std::int64_t>> tensorInts(const ::onnx::TensorProto &tensor);

} // namespace tapestry::io::onnximport
