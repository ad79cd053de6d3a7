#pragma once

#include "io/zoo/zoo.h"

namespace tapestry::io::zoo {

// One builder per model family, each in its own file. Knobs are complete
// (every key of the preset present) and already checked for sense.
ir::Graph buildMlp(const std::string &name, const Knobs &knobs);
ir::Graph buildAbc(const std::string &name, const Knobs &knobs);

} // namespace tapestry::io::zoo
