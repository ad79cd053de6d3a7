#include "io/onnx/onnxattributes.h"

namespace tapestry::io::onnximport {

ir::Attributes convertAttributes(const ::onnx::NodeProto &node)
{
    ir::Attributes attrs;
    for (const auto &a : node.attribute()) {
        switch (a.type()) {
        case ::onnx::AttributeProto_AttributeType_INT:
            attrs.emplace(a.name(), static_cast<std::int64_t>(a.i()));
            break;
        case ::onnx::AttributeProto_AttributeType_FLOAT:
            attrs.emplace(a.name(), static_cast<double>(a.f()));
            break;
        case ::onnx::AttributeProto_AttributeType_STRING:
            attrs.emplace(a.name(), a.s());
            break;
        case ::onnx::AttributeProto_AttributeType_INTS:
            attrs.emplace(a.name(), std::vector<std::int64_t>(a.ints().begin(), a.ints().end()));
            break;
        case ::onnx::AttributeProto_AttributeType_FLOATS:
            attrs.emplace(a.name(), std::vector<double>(a.floats().begin(), a.floats().end()));
            break;
        case ::onnx::AttributeProto_AttributeType_STRINGS:
            attrs.emplace(a.name(), std::vector<std::string>(a.strings().begin(), a.strings().end()));
            break;
        default:
            break;
        }
    }
    return attrs;
}

} // namespace tapestry::io::onnximport
