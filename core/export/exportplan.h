#pragma once

#include "ir/graph.h"
#include "plan/plan.h"

#include <string>

namespace tapestry::exports {

// The text of a framework export as `tapestry-cli export` writes it and the
// studio saves it: "torch" (a parallelize_module plan in Python), "jax"
// (PartitionSpecs per parameter) or "megatron" (Megatron-LM arguments on one
// line). Throws TapestryError naming `planInput` (or the format) when the
// plan cannot be expressed in that framework.
std::string exportPlanText(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput,
                           const std::string &format);

} // namespace tapestry::exports
