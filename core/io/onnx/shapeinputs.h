#pragma once

#include <span>
#include <string>

namespace tapestry::io::onnximport {

// An input of a standard ONNX op that carries a shape or a constant (a
// Reshape's target, a Slice's starts, a Clip's bounds) rather than data the
// op computes on. The loader cuts these edges, so the subgraphs that only
// compute shapes fall away, and keeps the value as an attribute.
struct ShapeInput {
    int slot;               // input position in the ONNX node
    const char *attribute;  // attribute the value is kept under
    bool outputShape;       // the attribute is the op's inferred output shape
                            // (concrete, where the input may hold -1 or 0)
};

// The shape inputs of a standard-domain op type; empty for other ops.
std::span<const ShapeInput> shapeInputs(const std::string &opType);
const ShapeInput *findShapeInput(const std::string &opType, int slot);

} // namespace tapestry::io::onnximport
