#include "sharding/oprule.h"

#include <set>

namespace tapestry::sharding {

// Elementwise ops keep every split: each output dim is a loop dim, and each
// input dim maps to it right-aligned, unless it is a size-1 dim broadcast.
std::optional<DimMap> elementwiseRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &y = graph.tensor(op.outputs[0]).shape;
    DimMap m = emptyDimMap(op);
    for (std::size_t d = 0; d < y.size(); ++d)
        m.outputs[0].push_back(m.addLoop());
    // Dropout's mask and friends have the output's shape too.
    for (std::size_t o = 1; o < op.outputs.size(); ++o) {
        const ir::Shape &s = graph.tensor(op.outputs[o]).shape;
        if (s != y)
            return std::nullopt;
        m.outputs[o] = m.outputs[0];
    }
    // Clip's bounds and Dropout's ratio / training flag are scalars, not data.
    const bool scalarsOnly = op.type == "Clip" || op.type == "Dropout";
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        const ir::Shape &s = graph.tensor(op.inputs[i]).shape;
        if (scalarsOnly && i > 0) {
            m.ignored[i] = true;
            m.inputs[i].assign(s.size(), -1);
            continue;
        }
        if (s.size() > y.size())
            return std::nullopt;
        for (std::size_t d = 0; d < s.size(); ++d) {
            const std::size_t yd = y.size() - s.size() + d;
            m.inputs[i].push_back(s[d] == y[yd] ? m.outputs[0][yd] : -1);
        }
    }
    static const std::set<std::string> kSums{"Add", "Sub"};
    static const std::set<std::string> kUnaryLinear{"Neg", "Dropout", "Identity", "Cast"};
    static const std::set<std::string> kTranscendental{"Gelu", "FastGelu", "Silu", "Tanh", "Sigmoid", "Erf",
                                                       "Exp", "Pow", "Softplus", "Sqrt"};
    if (kSums.count(op.type))
        m.partial = PartialRule::AllOperands;
    else if (op.type == "Mul")
        m.partial = PartialRule::OneOperand;
    else if (op.type == "Div")
        m.partial = PartialRule::FirstOperand;
    else if (kUnaryLinear.count(op.type))
        m.partial = PartialRule::Unary;
    // FLOPs per element: a handful for transcendental functions, one otherwise.
    m.forwardFlops = static_cast<double>(elementCount(y)) * (kTranscendental.count(op.type) ? 4.0 : 1.0);
    return m;
}

} // namespace tapestry::sharding
