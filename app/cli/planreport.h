#pragma once

#include "cli/command.h"
#include "plan/plan.h"
#include "sharding/mesh.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <vector>

namespace tapestry::cli {

// --mesh SHAPE [--axes a,b] [--mesh-profile NAME|FILE] as a mesh.
sharding::Mesh meshFromArgs(const Args &args);
std::vector<OptionSpec> meshOptions();

// The readable summary of a costed plan: step time, compute/communication
// split, memory per device against capacity, collectives by kind, the five
// costliest ops, warnings.
void printPlanReport(const plan::Plan &plan, std::ostream &out);
// The same as one JSON object.
nlohmann::ordered_json planReportJson(const plan::Plan &plan);

} // namespace tapestry::cli
