#pragma once

#include "io/onnx/wirecursor.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <unordered_set>

namespace tapestry::io::onnximport {

// What the walk of an ONNX file keeps: the model with its graph's nodes,
// inputs, outputs, value_info, opsets, metadata and initializers, where every
// initializer (and every large tensor inside a node attribute) is reduced to
// name, dims and data type.
struct ScannedModel {
    ::onnx::ModelProto model;
    // Initializers whose data was left in the file (or in external files).
    std::unordered_set<std::string> datalessInitializers;
};

// Walks ModelProto -> GraphProto at the wire level over `file` (a mapped
// file or a buffer of any size, including over 2 GB). Small messages (nodes,
// value infos, opsets) are parsed with the generated classes; initializers
// with scanTensor. Throws WireError.
ScannedModel scanModel(Bytes file);

} // namespace tapestry::io::onnximport
