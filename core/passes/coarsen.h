#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "passes/repeats.h"

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
//
// A run of like layers (repeats.h) is coarsened on its first four and last
// three copies, and the nodes of its fourth copy are stamped onto the copies
// between, so the work follows the unique layers and not their number. The
// result is the one walking every op gives (Repeats::Walk), node for node
// and edge for edge.
class Coarsen {
public:
    explicit Coarsen(Repeats repeats = Repeats::Stamp, std::int32_t minCopies = ReducedGraph::kMinCopies)
        : m_repeats(repeats), m_minCopies(minCopies)
    {
    }
    static constexpr std::string_view name() { return "coarsen"; }
    CoarseGraph run(const ir::Graph &graph) const { return run(graph.arrays()); }
    // The same on a graph's arrays alone (a reduced graph has no records).
    CoarseGraph run(const ir::GraphArrays &graph) const;

private:
    Repeats m_repeats;
    std::int32_t m_minCopies;  // the fewest copies a run is stamped from (tests go lower)
};

} // namespace tapestry::passes
