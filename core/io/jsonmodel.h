#pragma once

#include "ir/graph.h"

#include <string>

namespace tapestry::io {

// tapestry.model v1 (documented in core/io/README.md). Reading validates the
// JSON structure and the graph; errors name `input` and the JSON path.
ir::Graph readModelJson(const std::string &text, const std::string &input);
ir::Graph readModelJsonFile(const std::string &path);

// Deterministic: the same graph always gives the same bytes, and
// writeModelJson(readModelJson(writeModelJson(g))) == writeModelJson(g).
std::string writeModelJson(const ir::Graph &graph);

} // namespace tapestry::io
