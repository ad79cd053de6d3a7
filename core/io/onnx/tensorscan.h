#pragma once

#include "io/onnx/wirecursor.h"

#include "onnx/onnx_pb.h"

namespace tapestry::io::onnximport {

// Tensors of at most this many elements are read whole: they are the shape,
// index and scalar constants that shape inference needs (Reshape targets,
// Resize scales, pads), never weights worth skipping.
inline constexpr std::int64_t kSmallTensorElements = 16;

// Reads one TensorProto from the file without its data: name, dims and
// data_type only. Data fields (raw_data, float_data, ...) are stepped over by
// their length, never copied or touched. Small tensors (kSmallTensorElements)
// are parsed whole. A tensor whose data was left behind is marked
// data_location EXTERNAL, so that anything trying to read its values fails
// instead of seeing an empty tensor. Returns whether the data was kept.
bool scanTensor(Bytes message, std::uint64_t base, ::onnx::TensorProto &tensor);

} // namespace tapestry::io::onnximport
