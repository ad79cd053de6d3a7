#pragma once

#include "ir/graph.h"
#include "plan/plan.h"

#include <string>

namespace tapestry::exports {

// The text of a framework export as `tapestry-cli export` writes it and the
// studio saves it: "torch" (a Python module applying the plan with
// parallelize_module, FSDP and checkpointing), "jax" (a Python module: the
// mesh, NamedShardings per Flax parameter, activation constraints) or
// "megatron" (Megatron-LM's arguments on one line). Throws TapestryError naming `planInput` (or the format) when the
// plan cannot be expressed in that framework.
std::string exportPlanText(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput,
                           const std::string &format);

} // namespace tapestry::exports
