#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "passes/subgraphclasses.h"

#include <string_view>

namespace tapestry::passes {

// TAP's graph pruning (Algorithm 1, PRUNEGRAPH): finds the unique subgraphs
// a network repeats, so the plan search runs once per class.
//
// Scopes are grouped by their longest common name prefix (h.0, h.1, ... under
// h); a group whose members match structurally (op types, attributes, shapes
// and internal edges, never names) at least minDuplicate times becomes
// classes, one per distinct structure among its members. Of nested repeats the
// outermost level that still repeats wins (a transformer layer, not the
// experts inside it), the result Algorithm 1 reaches walking depths from deep
// to shallow and stopping when the count drops below minDuplicate. Where names
// carry no hierarchy, repeated chains of coarse nodes are found from
// structure alone.
//
// Walking a graph, the work beyond reading it is linear in its size: every
// op's label is written into its block's form once per scope level above it,
// candidates are bucketed by signature and verified by comparing forms.
// Pruning does not read the graph itself: links, topological order, op
// labels and the scope tree come from the coarse graph's flat index
// (GraphIndex), which coarsening builds in one sweep over the graph's
// tensors and ops.
//
// A coarse graph stamped from a reduced graph (Coarsen, repeats.h) is pruned
// through it: the reduced graph, seven copies of a run of layers, is pruned,
// and the classes' instances in its template copy are stamped onto every
// copy between. That needs each copy to be a scope of its own (pruning reads
// scopes) and the seven kept copies to be enough to count as repeated
// (minDuplicate up to 7); otherwise the graph is walked. Either way the
// classes are the same, instance for instance.
class Prune {
public:
    explicit Prune(int minDuplicate = 2, Repeats repeats = Repeats::Stamp)
        : m_minDuplicate(minDuplicate), m_repeats(repeats)
    {
    }
    static constexpr std::string_view name() { return "prune"; }
    // An analysis pass: the graphs are left as they are and the classes are
    // the result.
    SubgraphClasses run(const ir::Graph &graph, const CoarseGraph &coarse) const { return run(graph.arrays(), coarse); }
    // The same on a graph's arrays alone (a reduced graph has no records).
    SubgraphClasses run(const ir::GraphArrays &graph, const CoarseGraph &coarse) const;

private:
    int m_minDuplicate;
    Repeats m_repeats;
};

} // namespace tapestry::passes
