#include "io/onnx/modelscan.h"

#include "io/onnx/tensorscan.h"

#include <google/protobuf/wire_format_lite.h>

#include <climits>

namespace tapestry::io::onnximport {

namespace {

using google::protobuf::internal::WireFormatLite;

// Messages up to this size are parsed with the generated classes directly:
// whatever tensors they hold are small. Larger nodes and attributes (a
// Constant holding a weight, a subgraph with initializers) are walked field
// by field so their tensor data is skipped too.
constexpr std::size_t kParseWhole = 64 * 1024;
// Nested subgraphs (If/Loop/Scan bodies) deeper than this are rejected
// rather than walked recursively without bound.
constexpr int kMaxDepth = 16;

// Field numbers from onnx.proto.
namespace model {
enum : int { kGraph = 7, kDocString = 6, kTrainingInfo = 20 };
}
namespace graph {
enum : int {
    kNode = 1, kName = 2, kInitializer = 5, kDocString = 10, kInput = 11, kOutput = 12,
    kValueInfo = 13, kSparseInitializer = 15
};
}
namespace node {
enum : int { kAttribute = 5 };
}
namespace attribute {
enum : int { kTensor = 5, kGraph = 6, kTensors = 9, kGraphs = 10 };
}

template <typename Message>
void parseWhole(Bytes bytes, std::uint64_t base, Message &message, const char *what)
{
    if (bytes.size() > INT_MAX)
        throw WireError{std::string(what) + " is larger than 2 GB", base, WireError::Unsupported};
    if (!message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        throw WireError{std::string("malformed ") + what, base};
}

void requireLengthDelimited(const WireField &f, std::uint64_t at, const char *what)
{
    if (f.wireType != WireFormatLite::WIRETYPE_LENGTH_DELIMITED)
        throw WireError{std::string(what) + " field has wire type " + std::to_string(f.wireType), at};
}

void scanGraph(Bytes bytes, std::uint64_t base, ::onnx::GraphProto &graph,
               std::unordered_set<std::string> *dataless, int depth);

void scanAttribute(Bytes bytes, std::uint64_t base, ::onnx::AttributeProto &attr, int depth)
{
    if (bytes.size() <= kParseWhole) {
        parseWhole(bytes, base, attr, "attribute");
        return;
    }
    std::string rest;
    std::vector<std::pair<int, Bytes>> nested;
    std::vector<std::uint64_t> offsets;
    WireCursor cursor(bytes, base);
    while (!cursor.atEnd()) {
        const std::uint64_t at = cursor.fileOffset();
        const WireField f = cursor.next();
        if (f.number == attribute::kTensor || f.number == attribute::kTensors ||
            f.number == attribute::kGraph || f.number == attribute::kGraphs) {
            requireLengthDelimited(f, at, "attribute value");
            nested.emplace_back(f.number, f.payload);
            offsets.push_back(offsetOf(f.payload, bytes, base));
        } else {
            rest.append(reinterpret_cast<const char *>(f.whole.data()), f.whole.size());
        }
    }
    parseWhole(Bytes(reinterpret_cast<const std::uint8_t *>(rest.data()), rest.size()), base, attr,
               "attribute");
    for (std::size_t i = 0; i < nested.size(); ++i) {
        const auto &[number, payload] = nested[i];
        if (number == attribute::kTensor)
            scanTensor(payload, offsets[i], *attr.mutable_t());
        else if (number == attribute::kTensors)
            scanTensor(payload, offsets[i], *attr.add_tensors());
        else if (number == attribute::kGraph)
            scanGraph(payload, offsets[i], *attr.mutable_g(), nullptr, depth + 1);
        else
            scanGraph(payload, offsets[i], *attr.add_graphs(), nullptr, depth + 1);
    }
}

void scanNode(Bytes bytes, std::uint64_t base, ::onnx::NodeProto &node, int depth)
{
    if (bytes.size() <= kParseWhole) {
        parseWhole(bytes, base, node, "node");
        return;
    }
    std::string rest;
    std::vector<::onnx::AttributeProto> attributes;
    WireCursor cursor(bytes, base);
    while (!cursor.atEnd()) {
        const std::uint64_t at = cursor.fileOffset();
        const WireField f = cursor.next();
        if (f.number == node::kAttribute) {
            requireLengthDelimited(f, at, "node attribute");
            scanAttribute(f.payload, offsetOf(f.payload, bytes, base), attributes.emplace_back(), depth);
        } else {
            rest.append(reinterpret_cast<const char *>(f.whole.data()), f.whole.size());
        }
    }
    parseWhole(Bytes(reinterpret_cast<const std::uint8_t *>(rest.data()), rest.size()), base, node,
               "node");
    for (auto &a : attributes)
        *node.add_attribute() = std::move(a);
}

void scanGraph(Bytes bytes, std::uint64_t base, ::onnx::GraphProto &graph,
               std::unordered_set<std::string> *dataless, int depth)
{
    if (depth > kMaxDepth)
        throw WireError{"subgraphs nested deeper than " + std::to_string(kMaxDepth) + " levels", base,
                        WireError::Unsupported};
    WireCursor cursor(bytes, base);
    while (!cursor.atEnd()) {
        const std::uint64_t at = cursor.fileOffset();
        const WireField f = cursor.next();
        if (f.number == graph::kDocString)
            continue;
        if (f.number == graph::kNode || f.number == graph::kName || f.number == graph::kInitializer ||
            f.number == graph::kInput || f.number == graph::kOutput ||
            f.number == graph::kValueInfo || f.number == graph::kSparseInitializer)
            requireLengthDelimited(f, at, "graph");
        auto inner = [&] { return offsetOf(f.payload, bytes, base); };
        switch (f.number) {
        case graph::kNode:
            scanNode(f.payload, inner(), *graph.add_node(), depth);
            break;
        case graph::kName:
            graph.set_name(reinterpret_cast<const char *>(f.payload.data()), f.payload.size());
            break;
        case graph::kInitializer: {
            auto &tensor = *graph.add_initializer();
            if (!scanTensor(f.payload, inner(), tensor) && dataless)
                dataless->insert(tensor.name());
            break;
        }
        case graph::kInput:
            parseWhole(f.payload, inner(), *graph.add_input(), "graph input");
            break;
        case graph::kOutput:
            parseWhole(f.payload, inner(), *graph.add_output(), "graph output");
            break;
        case graph::kValueInfo:
            parseWhole(f.payload, inner(), *graph.add_value_info(), "value_info");
            break;
        case graph::kSparseInitializer:
            throw WireError{"sparse initializers are not supported", at, WireError::Unsupported};
        default:
            // Quantization annotations and fields newer than onnx.proto 1.12
            // say nothing about structure or shapes.
            break;
        }
    }
}

} // namespace

ScannedModel scanModel(Bytes file)
{
    ScannedModel scanned;
    std::string rest;
    std::vector<std::pair<Bytes, std::uint64_t>> graphs;
    WireCursor cursor(file, 0, true);
    while (!cursor.atEnd()) {
        const std::uint64_t at = cursor.fileOffset();
        const WireField f = cursor.next();
        if (f.number == model::kGraph) {
            requireLengthDelimited(f, at, "model graph");
            graphs.emplace_back(f.payload, offsetOf(f.payload, file, 0));
        } else if (f.number != model::kDocString && f.number != model::kTrainingInfo) {
            // ir_version, producer, opset_import, metadata_props, functions:
            // small, parsed whole below. Training info holds its own
            // initializers and says nothing about the inference graph.
            rest.append(reinterpret_cast<const char *>(f.whole.data()), f.whole.size());
        }
    }
    if (graphs.empty())
        throw WireError{"no graph found", 0};
    parseWhole(Bytes(reinterpret_cast<const std::uint8_t *>(rest.data()), rest.size()), 0,
               scanned.model, "model header");
    // A repeated message field merges in protobuf; so do repeated graphs here.
    for (const auto &[bytes, base] : graphs)
        scanGraph(bytes, base, *scanned.model.mutable_graph(), &scanned.datalessInitializers, 0);
    return scanned;
}

} // namespace tapestry::io::onnximport
