#pragma once

#include "io/onnx/shapeevaluator.h"

#include "onnx/onnx_pb.h"

#include <string>
#include <unordered_set>
#include <vector>

namespace tapestry::io::onnximport {

// Whether input `slot` of `node` carries a shape or constant (shapeinputs.h)
// rather than data; only standard-domain ops have such inputs.
bool isShapeEdge(const ::onnx::NodeProto &node, int slot);

// Which nodes of a topologically sorted graph the loader folds into constant
// tensors instead of ops, where something reads them as data:
// - Constants;
// - an Identity of an initializer or of a folded node: torch.onnx writes one
//   where it merged parameters that merely held equal values (fresh
//   LayerNorm weights, zero biases, cloned layers), so each alias becomes a
//   parameter of its own again, as in the source module;
// - a node whose value `values` knows when it holds one element, such as
//   attention's scale computed from a Shape.
// Folded values become Parameter tensors (the IR has no constant role), so
// larger computed tensors (positions from a Range, masks) stay ops: as
// parameters they would be charged gradients and optimizer state. A node
// that writes a graph output is never folded.
std::vector<bool> foldedNodes(const ::onnx::GraphProto &graph, const KnownValues &values,
                              const std::unordered_set<std::string> &initializers);

// Which nodes of a topologically sorted graph make up the compute graph the
// user sees, folded nodes included (as constants). Shape edges are cut
// first; then a node stays when it computes a graph output or data that a
// staying node reads, and a folded node reads nothing. What goes: Shape,
// Gather, Unsqueeze, Concat chains feeding Reshape targets or folded values,
// Constants read only as shapes, ConstantOfShape and Range on constants that
// only feed shapes, and dead code.
std::vector<bool> computeNodes(const ::onnx::GraphProto &graph, const std::vector<bool> &folded);

} // namespace tapestry::io::onnximport
