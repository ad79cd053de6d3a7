#pragma once

#include "ir/graph.h"
#include "passes/coarsegraph.h"
#include "search/searchoptions.h"
#include "search/searchresult.h"
#include "sharding/mesh.h"

#include <string>

namespace tapestry::search {

// The whole coarse graph as one integer program in Alpa's intra-op form,
// solved with CBC: the yardstick tap is measured against.
//
// Per coarse node, one-hot variables over its strategies: a spec for each
// of its weights (per mesh axis replicated or one dim split), a stored spec
// for each tensor it reads from another node, and, for each tensor it writes
// for another node, either the spec its ops produce or an activation layout
// (replicated, batch or sequence split per axis); biases and norm scales are
// stored as their consumer computes on them, as in tap. Each strategy is
// costed with the cost model (compute, collectives, optimizer update,
// per-device memory). Resharding between nodes is charged where the cost
// model charges it -- to the consumer, from the stored spec to the one it
// computes on -- so the edge terms of Alpa's form become consistency
// constraints: the producer's and every consumer's choice of spec for a
// shared tensor agree, through one-hot variables per shared tensor that
// linearise the products of their strategy variables. Subject to the sum of
// chosen memory <= the device's capacity, minimise step time (and, for the
// least-communication plan, communication).
//
// The node costs overcount a reshard two nodes both need of one tensor
// (the cost model makes it once) and count a tensor read by two nodes in
// each one's memory; both err upwards, so a plan the program accepts fits.
// Work grows with the graph, not with its unique classes: that is the
// point of comparing it with tap. stats.optimal says whether CBC proved
// optimality within options.timeLimitSeconds (shared by both solves).
// Throws TapestryError naming `modelSource` when no strategy fits or CBC
// finds no solution in time.
SearchResult exactSearch(const ir::Graph &graph, const passes::CoarseGraph &coarse, const std::string &modelSource,
                         const sharding::Mesh &mesh, const SearchOptions &options);

} // namespace tapestry::search
