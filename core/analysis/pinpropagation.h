#pragma once

#include "ir/graph.h"
#include "passes/subgraphclasses.h"
#include "plan/plan.h"
#include "sharding/shardingspec.h"

#include <map>
#include <string>

namespace tapestry::analysis {

// The pins of a plan: its specs marked override, by tensor name. What a
// re-derivation around pins keeps (the studio's Re-derive, the CLI's
// `plan --keep-pins`).
std::map<std::string, sharding::ShardingSpec> pinsOf(const plan::Plan &plan);

// Pins `spec` on `tensor` in `plan`: `changes` (an explanation's
// alternative: the tensor itself and what its coarse node derives from it)
// are applied, the tensor marked override and the rest search, so a
// re-derivation may move them. With `wholeClass`, the same changes go to
// every other instance of the tensor's class, its ops matched with the
// home instance's side by side. The plan's cost is left for the caller to
// recompute.
void pinAcrossClass(plan::Plan &plan, const ir::Graph &graph, const passes::SubgraphClasses &classes,
                    const std::string &tensor, const sharding::ShardingSpec &spec,
                    const std::map<std::string, sharding::ShardingSpec> &changes, bool wholeClass);

} // namespace tapestry::analysis
