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
// What the graph's colours and edge labels mean, as one line of rich text
// for the legend under the graph: the nodes' colouring (0 class, 1
// sharding, 2 cost, 3 difference, as StudioWindow::Colouring) and, with a
// plan shown, how an edge reads.
QString colouringLegend(int colouring, bool planShown);

} // namespace tapestry::views
