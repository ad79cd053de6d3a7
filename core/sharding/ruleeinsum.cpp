#include "ir/einsum.h"
#include "sharding/oprule.h"

#include <algorithm>

namespace tapestry::sharding {

// Einsum is the rule's own notation: each label of the equation is a loop,
// split over every operand dim it names; a label the output does not name
// is summed over (a contraction: the output a partial sum when it is
// split). MaxViT's attention ("B G H I D, B G H J D -> B G H I J") then
// splits by heads as a MatMul's batch dims do. A label named twice by one
// operand (a diagonal, "ii->i") has no rule: the op runs replicated.
std::optional<DimMap> einsumRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const auto equation = ir::stringAttr(op.attributes, "equation");
    if (!equation)
        return std::nullopt;
    std::vector<ir::Shape> shapes;
    for (ir::TensorId t : op.inputs)
        shapes.push_back(graph.tensor(t).shape);
    const auto labels = ir::parseEinsum(*equation, shapes);
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    if (!labels || labels->output.size() != y.size())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (int l = 0; l < labels->labelCount(); ++l)
        m.addLoop(true, labels->contracted(l));
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const auto &dims = labels->inputs[i];
        for (std::size_t d = 0; d < dims.size(); ++d) {
            if (std::count(dims.begin(), dims.end(), dims[d]) > 1)
                return std::nullopt;
            // A dim of size 1 broadcast against a larger one stays whole.
            m.inputs[i].push_back(shapes[i][d] == labels->sizes[static_cast<std::size_t>(dims[d])] ? dims[d] : -1);
        }
    }
    for (std::size_t d = 0; d < y.size(); ++d) {
        const int label = labels->output[d];
        if (y[d] != labels->sizes[static_cast<std::size_t>(label)])
            return std::nullopt;
        m.outputs[0].push_back(label);
    }
    double loops = 1;
    bool contraction = false;
    for (int l = 0; l < labels->labelCount(); ++l) {
        loops *= static_cast<double>(labels->sizes[static_cast<std::size_t>(l)]);
        contraction = contraction || labels->contracted(l);
    }
    const auto operands = static_cast<double>(op.inputs.size());
    // A multiply and an add per point of the loop space and operand pair
    // where something is summed; a multiply (or, alone, an add) otherwise.
    m.forwardFlops = loops * std::max(1.0, operands - 1) * (contraction && operands > 1 ? 2 : 1);
    m.backwardFactor = operands;  // each operand's gradient is an einsum over the same loops
    m.partial = op.inputs.size() == 1 ? PartialRule::Unary : PartialRule::OneOperand;
    return m;
}

} // namespace tapestry::sharding
