#pragma once

#include "ir/graph.h"
#include "plan/plan.h"
#include "search/searchresult.h"

#include <string>

namespace tapestry::search {

// --keep-pins (and the studio's re-derive around pins): the plan the pins
// came from is itself one way to fill in the rest around them. Where it
// beats the search's plan (cost::Objective), costed on the search's mesh
// and memory techniques, it is the answer, as it is, with a line in the
// plan's search warnings saying so: a user who pins a weight and searches
// again never gets a plan worse than the one they pinned. Returns whether
// it was kept. A plan for another mesh shape, or one that does not fit the
// model (planSpecs refuses it), is left aside.
bool keepPinnedPlanIfBetter(SearchResult &result, const plan::Plan &pinned, const ir::Graph &graph,
                            const std::string &pinnedInput);

} // namespace tapestry::search
