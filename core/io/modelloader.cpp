#include "io/modelloader.h"

#include "io/hfconfig.h"
#include "io/files.h"
#include "io/jsonmodel.h"
#include "io/onnx/onnxloader.h"
#include "io/zoo/zoo.h"
#include "ir/error.h"
#include "ir/validate.h"

#include <nlohmann/json.hpp>

namespace tapestry::io {

namespace {

bool endsWith(const std::string &s, const std::string &suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

ir::Graph loadModel(const std::string &model, const LoadOptions &options)
{
    ir::Graph graph;
    if (model.rfind("zoo:", 0) == 0) {
        graph = zoo::build(model.substr(4), options);
    } else if (endsWith(model, ".onnx")) {
        graph = loadOnnx(model, options);
    } else if (endsWith(model, ".json")) {
        const std::string text = readFile(model);
        graph = isHfConfig(text) ? readHfConfig(text, model, options) : readModelJson(text, model);
    } else {
        throw TapestryError(Error{model, {}, "unknown model kind (expected zoo:NAME, .json or .onnx)"});
    }
    if (auto problem = ir::validate(graph, model))
        throw TapestryError(*problem);
    return graph;
}

} // namespace tapestry::io
