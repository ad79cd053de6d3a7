#pragma once

#include "layout/viewgraph.h"

#include <QColor>

namespace tapestry::views {

class PlanDocument;

// The graph view's colourings of a document's plan, per view node.
// By sharding: the node's largest weight decides (replicated grey, split
// rows green, split columns blue, split on several axes purple).
QColor shardingColour(const PlanDocument &document, const layout::ViewNode &node);
// By cost: the node's share of the most expensive node's time, as heat.
QColor costColour(const PlanDocument &document, const layout::ViewNode &node);
// By difference: orange where a weight or output differs from the plan
// compared with.
QColor differenceColour(const PlanDocument &document, const layout::ViewNode &node);

} // namespace tapestry::views
