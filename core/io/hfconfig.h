#pragma once

#include "io/loadoptions.h"
#include "ir/graph.h"

#include <string>

namespace tapestry::io {

// Hugging Face config.json files (GPT-2, BERT, T5 v1.0, LLaMA, Mixtral), chosen
// by "model_type" or, without it, by "architectures". The sizes come from the
// config; the graph is the zoo family's training graph. Batch is
// options.batch or 8; seq is options.seq or the config's context length,
// capped at the zoo family's default (a 32k-context Mixtral trains on 4k).
// Errors name the file and the field: missing, wrong type, a value that makes
// no model, an unsupported model_type.

// Whether `text` is a config.json: a JSON object with "model_type" or
// "architectures" and no "format" (tapestry.model files have one). Cheap: the
// values of other top-level keys are not built.
bool isHfConfig(const std::string &text);

ir::Graph readHfConfig(const std::string &text, const std::string &input, const LoadOptions &options);
ir::Graph loadHfConfig(const std::string &path, const LoadOptions &options);

} // namespace tapestry::io
