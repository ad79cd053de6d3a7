#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"

#include <string_view>

namespace tapestry::passes {

// Groups the ops of a graph into coarse nodes that serve one function: a
// MatMul/Gemm with its bias add, activation, reshapes and transposes; a
// LayerNorm or RMSNorm, also when ONNX decomposes it into
// ReduceMean/Sub/Pow/Add/Sqrt/Div/Mul; an attention core (scores MatMul,
// scale, mask, softmax, context MatMul); an embedding Gather. Constant
// subgraphs (weight transposes, shape arithmetic) join the node that reads
// them. Grouping looks at op types, roles and edges only, never at names, so
// a graph with opaque op names coarsens the same way.
//
// An analysis pass: the op graph is left as it is and the coarse graph is the
// result, so run() returns it rather than a changed flag.
class Coarsen {
public:
    static constexpr std::string_view name() { return "coarsen"; }
    CoarseGraph run(const ir::Graph &graph) const;
};

} // namespace tapestry::passes
