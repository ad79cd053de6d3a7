#include "opsupport.h"

#include "ir/error.h"

#include <map>
#include <set>

namespace tapestry::exec {

namespace {

const std::set<std::string> kKernelOps = {
    "MatMul", "Add", "Sub", "Mul", "Div", "Relu", "Gelu", "Silu", "Neg", "Softmax",
    "LayerNormalization", "RMSNorm", "SimplifiedLayerNormalization", "Reshape", "Flatten",
    "Squeeze", "Unsqueeze", "Identity", "Transpose", "Split", "Concat", "Slice", "Expand",
    "Gather", "SoftmaxCrossEntropyLoss"};

bool isFloat(ir::DType d)
{
    return d == ir::DType::F32 || d == ir::DType::F16 || d == ir::DType::BF16 ||
           d == ir::DType::F64;
}

bool isInteger(ir::DType d)
{
    return d == ir::DType::I64 || d == ir::DType::I32;
}

bool lastAxis(const ir::Op &op, std::size_t rank, std::int64_t fallback)
{
    auto axis = ir::intAttr(op.attributes, "axis").value_or(fallback);
    if (axis < 0)
        axis += static_cast<std::int64_t>(rank);
    return axis == static_cast<std::int64_t>(rank) - 1;
}

} // namespace

bool isIndexInput(const std::string &opType, std::size_t index)
{
    return index == 1 && (opType == "Gather" || opType == "SoftmaxCrossEntropyLoss");
}

bool isShapeOperand(const std::string &opType, std::size_t index)
{
    return index >= 1 && (opType == "Reshape" || opType == "Expand" || opType == "Squeeze" ||
                          opType == "Unsqueeze" || opType == "Split");
}

std::optional<std::string> unsupportedReason(const ir::Graph &graph, ir::OpId id)
{
    const ir::Op &op = graph.op(id);
    if (!kKernelOps.count(op.type))
        return std::string("no kernel");
    if (!op.domain.empty() && op.domain != "ai.onnx")
        return "custom domain '" + op.domain + "'";
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const ir::Tensor &t = graph.tensor(op.inputs[i]);
        if (isIndexInput(op.type, i)) {
            if (!isInteger(t.dtype) || t.role != ir::Role::Input)
                return "indices '" + t.name + "' must be an int64 graph input";
        } else if (!isShapeOperand(op.type, i) && !isFloat(t.dtype)) {
            return "input '" + t.name + "' is " + std::string(ir::toString(t.dtype)) +
                   ", the kernels compute in float32";
        }
    }
    for (ir::TensorId o : op.outputs)
        if (!isFloat(graph.tensor(o).dtype))
            return "output '" + graph.tensor(o).name + "' is not a float tensor";
    const auto rankOf = [&](std::size_t i) { return graph.tensor(op.inputs[i]).shape.size(); };
    if (op.type == "MatMul" && (rankOf(0) < 2 || rankOf(1) < 2))
        return std::string("a 1-D operand (vector product)");
    if (op.type == "Softmax" && !lastAxis(op, rankOf(0), -1))
        return std::string("axis is not the last");
    if ((op.type == "LayerNormalization" || op.type == "RMSNorm" ||
         op.type == "SimplifiedLayerNormalization")) {
        if (!lastAxis(op, rankOf(0), -1))
            return std::string("normalises over more than the last axis");
        if (op.outputs.size() != 1 || op.inputs.size() < 2)
            return std::string("expects input and scale, and one output");
        if (op.type != "LayerNormalization" && op.inputs.size() != 2)
            return std::string("RMSNorm takes no bias");
    }
    if (op.type == "Gather") {
        auto axis = ir::intAttr(op.attributes, "axis").value_or(0);
        if (axis != 0)
            return std::string("axis is not 0 (only embedding lookups)");
    }
    if (op.type == "SoftmaxCrossEntropyLoss") {
        if (ir::stringAttr(op.attributes, "reduction").value_or("mean") != "mean")
            return std::string("reduction is not 'mean'");
        if (op.attributes.count("ignore_index"))
            return std::string("ignore_index is not supported");
        if (op.inputs.size() != 2 || op.outputs.size() != 1)
            return std::string("class weights or a log-prob output");
        ir::Shape lead = graph.tensor(op.inputs[0]).shape;
        if (lead.empty())
            return std::string("scalar logits");
        lead.pop_back();
        if (graph.tensor(op.inputs[1]).shape != lead)
            return std::string("classes are not on the last axis of the logits");
    }
    if (op.type == "Slice") {
        if (op.inputs.size() != 1)
            return std::string("starts/ends given as tensors (only as attributes)");
        if (!ir::intsAttr(op.attributes, "starts") || !ir::intsAttr(op.attributes, "ends"))
            return std::string("no starts/ends attributes");
    }
    if (op.type == "Gelu") {
        const auto form = ir::stringAttr(op.attributes, "approximate").value_or("none");
        if (form != "none" && form != "tanh")
            return "approximate='" + form + "'";
    }
    if ((op.type == "Add" || op.type == "Sub" || op.type == "Mul" || op.type == "Div") &&
        op.inputs.size() != 2)
        return std::string("expects two inputs");
    return std::nullopt;
}

void checkRunnable(const ir::Graph &graph, const std::string &input)
{
    struct Refused {
        std::string reason;
        std::string first;
        int count = 0;
    };
    std::map<std::string, Refused> refused;  // by op type, ordered for a stable message
    for (std::size_t i = 0; i < graph.opCount(); ++i) {
        const ir::OpId id(static_cast<std::int32_t>(i));
        if (auto reason = unsupportedReason(graph, id)) {
            Refused &r = refused[graph.op(id).type];
            if (r.count++ == 0) {
                r.reason = *reason;
                r.first = graph.op(id).name;
            }
        }
    }
    if (refused.empty())
        return;
    std::string problem = "the executor cannot run ";
    bool firstType = true;
    for (const auto &[type, r] : refused) {
        problem += firstType ? "" : "; ";
        firstType = false;
        problem += type + " (" + std::to_string(r.count) + (r.count == 1 ? " op" : " ops") +
                   ", first '" + r.first + "'): " + r.reason;
    }
    throw TapestryError(Error{input, {}, problem});
}

} // namespace tapestry::exec
