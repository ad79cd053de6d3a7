#pragma once

#include "io/onnx/shapeinference.h"
#include "ir/graph.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <unordered_set>
#include <vector>

namespace tapestry::io::onnximport {

// Turns the sorted, shape-inferred ONNX graph into the IR: the nodes that
// computeNodes keeps become ops named by their node names; graph inputs
// become Input tensors, initializers and the nodes foldedNodes folds, read
// as data, become Parameters (or constants, below), graph outputs Outputs. Shape edges are cut and their values
// kept as attributes where `values` knows them (a Reshape's `shape` is its
// concrete output shape).
// Ops without a schema at the model's opset keep their domain ("ai.onnx"
// for an unknown op of the standard domain), so they show as opaque.
// Initializers and folded values of one element, integer ones, Constant
// nodes' values and BatchNormalization's running statistics are constants
// (Input role), not trained weights. Graph inputs read only as weights
// (export_params=False) become Parameters; their names go to `weightInputs`.
// Throws TapestryError naming `input` and the tensor whose shape or type
// cannot be had.
ir::Graph buildGraph(const ::onnx::ModelProto &model,
                     const std::unordered_set<std::string> &datalessInitializers,
                     const KnownValues &values, const std::string &input,
                     std::vector<std::string> *weightInputs = nullptr);

} // namespace tapestry::io::onnximport
