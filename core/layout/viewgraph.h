#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "passes/subgraphclasses.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tapestry::layout {

// What the graph view draws: the coarse graph with each run of chained
// instances of a repeated class folded into one block ("h.* ×12"). Never the
// whole op graph at once: a 1000-layer model folds to a handful of nodes.
struct ViewNode {
    enum class Kind { Coarse, Block };
    Kind kind = Kind::Coarse;
    passes::NodeId node;                // Kind::Coarse: the coarse node
    passes::ClassId cls;                // the class it belongs to (invalid: none)
    std::vector<std::size_t> instances; // Kind::Block: instance indices it folds; Coarse in a class: its instance
    std::string title;
    std::string subtitle;
    int repeat = 1;                     // instances folded (Kind::Block)
    int chunk = -1;                     // the pipeline chunk its ops run in (-1: no pipeline)
};

struct ViewEdge {
    int from = 0;
    int to = 0;
    ir::TensorId tensor;  // the first tensor flowing along it
    int tensors = 1;      // how many distinct tensors it stands for
    std::string label;    // "8×1024×768"
};

struct ViewGraph {
    std::vector<ViewNode> nodes;
    std::vector<ViewEdge> edges;
};

// An expanded run is named by its class and the index of the run's first
// instance.
using ExpandedRuns = std::set<std::pair<int, std::size_t>>;

// `chunkOfOp` (by op id; empty: no pipeline): the pipeline chunk each op
// runs in, consecutive layers from 0 (a stage, or with virtual stages one
// of a stage's chunks). A run of copies is folded per chunk, so that each
// block lies in one, and every view node says its chunk.
ViewGraph buildViewGraph(const ir::Graph &graph, const passes::CoarseGraph &coarse,
                         const passes::SubgraphClasses &classes, const ExpandedRuns &expanded = {},
                         const std::vector<int> &chunkOfOp = {});

// "8×1024×768"
std::string shapeLabel(const ir::Shape &shape);
// A count in a few figures, as class blocks and the class list show it:
// 218112000 -> "218.1M".
std::string countLabel(std::int64_t n);
// The common pattern of instance scopes: "transformer/h.0" ... "transformer/h.11" → "transformer/h.*";
// numbered in steps of more than one, by their numbers: "features.5.0", "features.5.2", "features.5.4"
// → "features.5.{0,2,4}" (five or more: "{1,3,…,11}").
std::string scopePattern(const std::vector<std::string> &scopes);

} // namespace tapestry::layout
