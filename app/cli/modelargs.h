#pragma once

#include "cli/command.h"
#include "ir/graph.h"

#include <string>

namespace tapestry::cli {

// Loads MODEL with the --batch/--seq bindings from the command line.
ir::Graph loadModelFromArgs(const std::string &model, const Args &args);
std::string shapeString(const ir::Shape &shape);

} // namespace tapestry::cli
