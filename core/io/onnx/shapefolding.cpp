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

std::vector<bool> computeNodes(const ::onnx::GraphProto &graph)
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
        for (int slot = 0; slot < node.input_size(); ++slot)
            if (!node.input(slot).empty() && !isShapeEdge(node, slot))
                needed.insert(node.input(slot));
    }
    return keep;
}

} // namespace tapestry::io::onnximport
