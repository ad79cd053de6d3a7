#include "io/onnx/shapefolding.h"

#include "io/onnx/shapeinputs.h"

#include <string>
#include <unordered_set>

namespace tapestry::io::onnximport {

bool isShapeEdge(const ::onnx::NodeProto &node, int slot)
{
    if (!node.domain().empty() && node.domain() != "ai.onnx")
        return false;
    return findShapeInput(node.op_type(), slot) != nullptr;
}

std::vector<bool> foldedNodes(const ::onnx::GraphProto &graph, const KnownValues &values,
                              const std::unordered_set<std::string> &initializers)
{
    std::unordered_set<std::string> outputs;
    for (const auto &out : graph.output())
        outputs.insert(out.name());
    std::unordered_set<std::string> constants(initializers.begin(), initializers.end());
    std::vector<bool> folded(static_cast<std::size_t>(graph.node_size()), false);
    for (int i = 0; i < graph.node_size(); ++i) {
        const auto &node = graph.node(i);
        if ((!node.domain().empty() && node.domain() != "ai.onnx") || node.output_size() != 1 ||
            node.output(0).empty() || outputs.count(node.output(0)))
            continue;
        const std::string &out = node.output(0);
        bool fold = node.op_type() == "Constant" ||
                    (node.op_type() == "Identity" && node.input_size() == 1 && constants.count(node.input(0)));
        if (!fold)
            if (auto it = values.find(out); it != values.end()) {
                std::int64_t n = 1;
                for (auto d : it->second.dims())
                    n *= d;
                fold = n == 1;
            }
        if (fold) {
            folded[static_cast<std::size_t>(i)] = true;
            constants.insert(out);
        }
    }
    return folded;
}

std::vector<bool> computeNodes(const ::onnx::GraphProto &graph, const std::vector<bool> &folded)
{
    std::unordered_set<std::string> needed;
    for (const auto &out : graph.output())
        needed.insert(out.name());
    // Consumers come after producers, so one backward pass decides every
    // node after all of its readers.
    std::vector<bool> keep(static_cast<std::size_t>(graph.node_size()), false);
    for (int i = graph.node_size() - 1; i >= 0; --i) {
        const auto &node = graph.node(i);
        bool used = false;
        for (const auto &out : node.output())
            used = used || (!out.empty() && needed.count(out));
        if (!used)
            continue;
        keep[static_cast<std::size_t>(i)] = true;
        if (folded[static_cast<std::size_t>(i)])
            continue;
        for (int slot = 0; slot < node.input_size(); ++slot)
            if (!node.input(slot).empty() && !isShapeEdge(node, slot))
                needed.insert(node.input(slot));
    }
    return keep;
}

} // namespace tapestry::io::onnximport
