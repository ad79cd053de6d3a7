#pragma once

#include "cli/command.h"

namespace tapestry::cli {

// plan MODEL --devices N [--topology NODESxPER_NODE]: the shapes of the
// cluster (pipeline x data x tensor) ranked by step time among those that
// fit (search::searchShapes), with what each costs, so that a user sees
// why the first wins.
int runShapes(const Args &args);

} // namespace tapestry::cli
