#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "passes/subgraphclasses.h"
#include "search/searchoptions.h"
#include "search/searchresult.h"
#include "sharding/mesh.h"

#include <string>

namespace tapestry::search {

// TAP's plan search (Shi et al.). Each unique subgraph class is searched on
// its representative instance only, block by block (a transformer layer's
// attention and MLP halves, cut at the residual stream): every legal choice
// of its weights (per mesh axis replicated or one dim split), activations
// following by the strategy rules, costed for that one copy and multiplied
// by the instance count, so search time does not grow with layer count.
// Choices whose weights alone overflow device memory are skipped unevaluated.
// Blocks are linked by the layout of the tensor between them and classes by
// the layout of their boundary activations (ActivationLayout); per link a
// dynamic program keeps the plans no other beats in step time,
// communication and memory together, and the best fitting combination wins.
// The ops outside every class (embedding, head, loss) are searched the same
// way with the layout of the first class at their inputs.
SearchResult tapSearch(const ir::Graph &graph, const passes::SubgraphClasses &classes,
                       const std::string &modelSource, const sharding::Mesh &mesh,
                       const SearchOptions &options = {});
// The same with the coarse graph the classes were found on (its nodes'
// outputs inside a block are stored as searched, see Segment::stored);
// the overload above coarsens the graph again.
SearchResult tapSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse,
                       const passes::SubgraphClasses &classes, const std::string &modelSource,
                       const sharding::Mesh &mesh, const SearchOptions &options = {});

} // namespace tapestry::search
