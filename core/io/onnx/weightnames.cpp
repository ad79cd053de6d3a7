#include "io/onnx/weightnames.h"

#include <optional>

namespace tapestry::io::onnximport {

namespace {

// The bias a linear adds: a Gemm's C, or a parameter of rank 1 the one Add
// reading a MatMul's output adds.
std::optional<ir::TensorId> biasOf(const ir::Graph &graph, const ir::Op &op)
{
    if (op.type == "Gemm")
        return op.inputs.size() > 2 && graph.tensor(op.inputs[2]).role == ir::Role::Parameter
                   ? std::optional<ir::TensorId>(op.inputs[2])
                   : std::nullopt;
    const auto &readers = graph.tensor(op.outputs.at(0)).consumers;
    if (readers.size() != 1 || graph.op(readers[0]).type != "Add")
        return std::nullopt;
    for (ir::TensorId in : graph.op(readers[0]).inputs)
        if (graph.tensor(in).role == ir::Role::Parameter && graph.tensor(in).shape.size() == 1)
            return in;
    return std::nullopt;
}

// "/layers.0/linear1/MatMul" -> "layers.0.linear1"; "" without a scope.
std::string moduleOf(const std::string &opName)
{
    std::string path = opName;
    while (!path.empty() && path.front() == '/')
        path.erase(path.begin());
    const auto last = path.rfind('/');
    if (last == std::string::npos)
        return {};
    path.resize(last);
    for (char &c : path)
        if (c == '/')
            c = '.';
    return path;
}

} // namespace

std::vector<std::pair<std::string, std::string>> nameFoldedWeights(ir::Graph &graph)
{
    std::vector<std::pair<std::string, std::string>> renamed;
    for (std::size_t i = 0; i < graph.tensorCount(); ++i) {
        const ir::TensorId t(static_cast<std::int32_t>(i));
        const ir::Tensor &w = graph.tensor(t);
        if (w.role != ir::Role::Parameter || !w.name.starts_with("onnx::") || w.consumers.size() != 1)
            continue;
        const ir::Op &op = graph.op(w.consumers[0]);
        if ((op.type != "MatMul" && op.type != "Gemm") || op.inputs.size() < 2 || op.inputs[1] != t ||
            op.outputs.empty())
            continue;
        std::string name;
        if (const auto bias = biasOf(graph, op); bias && graph.tensor(*bias).name.ends_with("bias")) {
            name = graph.tensor(*bias).name;
            name.replace(name.size() - 4, 4, "weight");
        } else if (const std::string module = moduleOf(op.name); !module.empty()) {
            name = module + ".weight";
        }
        if (name.empty() || name.starts_with("onnx::") || graph.findTensor(name))
            continue;
        renamed.emplace_back(w.name, name);
        graph.renameTensor(t, name);
    }
    return renamed;
}

} // namespace tapestry::io::onnximport
