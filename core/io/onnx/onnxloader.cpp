#include "io/onnx/onnxloader.h"

#include "io/onnx/fusedprojections.h"
#include "io/onnx/graphorder.h"
#include "io/onnx/irbuild.h"
#include "io/onnx/mappedfile.h"
#include "io/onnx/modelscan.h"
#include "io/onnx/shapeinference.h"
#include "io/onnx/symbolicdims.h"
#include "io/onnx/weightnames.h"
#include "ir/error.h"
#include "ir/validate.h"

namespace tapestry::io {

namespace {

using namespace onnximport;

ScannedModel scan(std::span<const std::uint8_t> bytes, const std::string &input)
{
    try {
        return scanModel(bytes);
    } catch (const WireError &e) {
        const std::string at = " at byte " + std::to_string(e.offset);
        switch (e.kind) {
        case WireError::Truncated:
            throw TapestryError(Error{input, {}, "file is truncated (" + e.problem + at + ")"});
        case WireError::Unsupported:
            throw TapestryError(Error{input, {}, e.problem + at});
        case WireError::Malformed:
            break;
        }
        throw TapestryError(Error{input, {}, "not an ONNX model (" + e.problem + at + ")"});
    }
}

void checkOpset(const ::onnx::ModelProto &model, const std::string &input)
{
    for (const auto &o : model.opset_import()) {
        if (!o.domain().empty() && o.domain() != "ai.onnx")
            continue;
        if (o.version() < kMinOnnxOpset || o.version() > kMaxOnnxOpset)
            throw TapestryError(Error{input, {},
                                      "opset " + std::to_string(o.version()) + " is outside the supported range " +
                                          std::to_string(kMinOnnxOpset) + ".." + std::to_string(kMaxOnnxOpset)});
        return;
    }
    throw TapestryError(Error{input, {}, "no opset_import for the standard ONNX domain"});
}

} // namespace

ir::Graph loadOnnxFromBuffer(std::span<const std::uint8_t> bytes, const std::string &input,
                             const LoadOptions &options)
{
    ScannedModel scanned = scan(bytes, input);
    ::onnx::ModelProto &model = scanned.model;
    checkOpset(model, input);
    orderGraph(*model.mutable_graph(), input);
    bindSymbolicDims(model, options, input);
    const KnownValues values = inferShapes(model, scanned.datalessInitializers, input);
    std::vector<std::string> weightInputs;
    ir::Graph graph = buildGraph(model, scanned.datalessInitializers, values, input, &weightInputs);
    if (const auto renamed = options.nameFoldedWeights ? onnximport::nameFoldedWeights(graph)
                                                       : std::vector<std::pair<std::string, std::string>>{};
        !renamed.empty() && options.note)
        options.note(std::to_string(renamed.size()) + " weight(s) the export had renamed given their modules' names (" +
                     renamed[0].first + " as " + renamed[0].second + (renamed.size() > 1 ? ", ..." : "") + ")");
    if (options.stackFusedProjections) {
        std::vector<onnximport::StackedProjection> stacked;
        graph = onnximport::stackFusedProjections(graph, &stacked);
        if (!stacked.empty() && options.note)
            options.note(std::to_string(stacked.size()) + " fused projection weight(s) (" + stacked[0].weight +
                         (stacked.size() > 1 ? ", ..." : "") + ") held as their " +
                         std::to_string(stacked[0].parts) +
                         " parts stacked, [parts, in, out / parts], so that each part can be split by heads");
    }
    if (!weightInputs.empty() && options.note) {
        std::string names;
        for (std::size_t i = 0; i < weightInputs.size() && i < 3; ++i)
            names += (i ? ", " : "") + weightInputs[i];
        options.note(std::to_string(weightInputs.size()) + " graph input(s) read only as weights (" + names +
                     (weightInputs.size() > 3 ? ", ..." : "") +
                     ") are taken as parameters: the file was exported without its weights");
    }
    if (auto problem = ir::validate(graph, input))
        throw TapestryError(*problem);
    return graph;
}

ir::Graph loadOnnx(const std::string &path, const LoadOptions &options)
{
    const MappedFile file(path);
    return loadOnnxFromBuffer(file.bytes(), path, options);
}

} // namespace tapestry::io
