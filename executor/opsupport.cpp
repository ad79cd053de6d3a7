#include "opsupport.h"

#include "opregistry.h"

#include "ir/error.h"
#include "sharding/strategy.h"

#include <map>

namespace tapestry::exec {

using sharding::isFloat;

namespace {

bool isInteger(ir::DType d)
{
    return d == ir::DType::I64 || d == ir::DType::I32;
}

} // namespace

bool isIndexInput(const std::string &opType, std::size_t index)
{
    const OpDef *def = findOp(opType);
    return def && def->indexInput == index;
}

bool isShapeOperand(const std::string &opType, std::size_t index)
{
    const OpDef *def = findOp(opType);
    return index >= 1 && def && def->shapeOperands;
}

std::optional<std::string> unsupportedReason(const ir::Graph &graph, ir::OpId id)
{
    const ir::Op &op = graph.op(id);
    const OpDef *def = findOp(op.type);
    if (!def)
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
    if (def->refuse)
        return def->refuse(graph, op);
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
