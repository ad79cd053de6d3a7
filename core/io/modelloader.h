#pragma once

#include "io/loadoptions.h"
#include "ir/graph.h"

#include <string>

namespace tapestry::io {

// Loads MODEL as the user names it: "zoo:NAME[?knob=value&...]", a .onnx file,
// a Hugging Face config.json, or a tapestry.model .json file (told apart from
// config.json by its "format" field). The result is validated. Throws
// TapestryError naming the input and the problem.
ir::Graph loadModel(const std::string &model, const LoadOptions &options = {});

} // namespace tapestry::io
