#include "sharding/oprule.h"

namespace tapestry::sharding {

// SoftmaxCrossEntropyLoss(logits, labels): the class dim is ONNX's dim 1
// ([N, C, d...]) or the last dim ([b, s, V], as the zoo builds it). Token dims
// map to the labels and, without reduction, to the output; a mean or sum over
// them leaves partial sums. A split class dim is Megatron's vocab-parallel
// cross-entropy: three all-reduces of one fp32 value per token (max logit,
// sum of exponentials, target logit) inside the op, forward only.
std::optional<DimMap> lossRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() < 2 || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &logits = graph.tensor(op.inputs[0]).shape, &labels = graph.tensor(op.inputs[1]).shape;
    if (logits.size() != labels.size() + 1)
        return std::nullopt;
    std::size_t classDim = logits.size() - 1;
    if (ir::Shape(logits.begin(), logits.end() - 1) != labels) {
        ir::Shape rest = logits;
        rest.erase(rest.begin() + 1);
        if (logits.size() < 2 || rest != labels)
            return std::nullopt;
        classDim = 1;
    }
    DimMap m = emptyDimMap(op);
    const bool reduced = ir::stringAttr(op.attributes, "reduction").value_or("mean") != "none";
    std::vector<int> tokenDims;
    for (std::size_t d = 0; d < labels.size(); ++d)
        m.inputs[1].push_back(m.addLoop(true, reduced));
    const int classes = m.addLoop();
    for (std::size_t d = 0, t = 0; d < logits.size(); ++d) {
        if (d == classDim) {
            m.inputs[0].push_back(classes);
        } else {
            m.inputs[0].push_back(m.inputs[1][t++]);
            tokenDims.push_back(static_cast<int>(d));
        }
    }
    for (std::size_t i = 2; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;  // class weights
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        const ir::Shape &s = graph.tensor(op.outputs[o]).shape;
        if (s == logits)
            m.outputs[o] = m.inputs[0];  // log-probabilities
        else if (s == labels)
            m.outputs[o] = m.inputs[1];
        else if (s.empty())
            m.outputs[o] = {};
        else
            return std::nullopt;
    }
    m.internal[classes] = {InternalCollective{CollectiveKind::AllReduce, 3, 0, tokenDims, 4, false}};
    m.forwardFlops = 5.0 * static_cast<double>(elementCount(logits));
    return m;
}

} // namespace tapestry::sharding
