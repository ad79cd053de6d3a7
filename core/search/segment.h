#pragma once

#include "ir/graph.h"
#include "sharding/shardingspec.h"

#include <string>
#include <utility>
#include <vector>

namespace tapestry::search {

// A part of the graph searched as one unit: a block of the representative
// instance of a subgraph class (its plan then serves every instance), or a
// block of the ops outside every class. Blocks are cut at residual-stream
// tensors, so a transformer layer is searched as its attention half and its
// MLP half with the layout of the tensor between them as the link.
struct Segment {
    std::string name;      // "transformer/h.0 [1/2]", "(rest) [1/1]"
    int classIndex = -1;   // the subgraph class, -1 for the ops outside classes
    int instances = 1;     // copies the plan is reused for
    std::vector<ir::OpId> ops;            // in topological order
    std::vector<ir::TensorId> weights;    // parameters of rank >= 2: the choices searched
    std::vector<ir::TensorId> derived;    // smaller parameters (biases, norm scales): stored as their first
                                          // consumer computes on them
    // Derived parameters the user pinned (--keep-pins): stored as pinned,
    // their consumers costed on that spec, not on the one they would derive.
    std::vector<std::pair<ir::TensorId, sharding::ShardingSpec>> held;
    std::vector<ir::TensorId> inputs;     // read here, written elsewhere (activations and graph inputs)
    std::vector<ir::TensorId> outputs;    // written here, read elsewhere or graph outputs
    // Inputs other copies of the class read too (an attention mask, a
    // position bias computed once): the whole plan reshards such a tensor
    // once per spec its readers need, so each copy carries its share of
    // those reshards (this copy's readers over all copies' readers).
    std::vector<std::pair<ir::TensorId, double>> readShare;
    // The weights' choices: per weight, its legal specs (per mesh axis
    // replicate or one split dim), the replicated one first.
    std::vector<std::vector<sharding::ShardingSpec>> choices;
    // Per weight: the earlier weight whose choice it shares, or -1. Numbered
    // sibling modules inside one block (a mixture of experts'
    // experts.0 ... experts.7) are repeats nested in the class, and as TAP
    // reuses one plan for a class' instances, they take one choice: the
    // weights that play the same part in each are tied to the first one's.
    std::vector<int> tiedTo;
    // Tensors one coarse node writes and another reads inside the segment
    // (a column-parallel matmul's activation before the row-parallel one,
    // the attention scores): each may be stored as produced or in any
    // allowed activation layout, the freedom exact has at every coarse
    // node's output; and graph inputs the segment alone reads, stored as
    // the boundary gives them (replicated) or in any layout. Per such
    // tensor its layouts' specs, distinct; a choice (WeightChoice::choice,
    // after the weights') of 0 stores it as produced (or given), k > 0 as
    // storedChoices[j][k - 1].
    std::vector<ir::TensorId> stored;
    std::vector<std::vector<sharding::ShardingSpec>> storedChoices;
};

} // namespace tapestry::search
