#pragma once

#include "onnx/onnx_pb.h"

#include <string>

namespace tapestry::io::onnximport {

// Prepares the top-level graph for inference and for the IR, which both need
// a well-formed DAG: names unnamed nodes after their op type and position
// ("MatMul_12") and makes node names unique; checks that every value a node
// reads has exactly one source (a node, a graph input or an initializer) and
// that every graph output is computed; sorts the nodes topologically (stable:
// ONNX files list them in order already, but need not). Throws TapestryError
// naming `input` and the node or value.
void orderGraph(::onnx::GraphProto &graph, const std::string &input);

} // namespace tapestry::io::onnximport
