#include "cost/activationmemory.h"

#include "sharding/strategy.h"

#include <cmath>
#include <set>

namespace tapestry::cost {

std::vector<TransformerLayerShape> transformerLayers(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                     const std::vector<sharding::ShardingSpec> &specs)
{
    // Sequence parallel: the norms run on sequence shards ([b, s, h] split on s).
    bool sequenceParallel = false;
    for (const auto &op : graph.ops())
        if (!op.inputs.empty() && normOnSequenceShards(graph, mesh, op, specs[op.inputs[0].index()]))
            sequenceParallel = true;
    std::vector<TransformerLayerShape> layers;
    for (std::size_t o = 0; o < graph.opCount(); ++o)
        if (auto l = transformerLayer(graph, mesh, specs, ir::OpId(static_cast<std::int32_t>(o)), sequenceParallel))
            layers.push_back(*l);
    return layers;
}

std::optional<TransformerLayerShape> transformerLayer(const ir::Graph &graph, const sharding::Mesh &mesh,
                                                     const std::vector<sharding::ShardingSpec> &specs, ir::OpId softmax,
                                                     bool sequenceParallel)
{
    static const std::set<std::string> kScoreOps{"Add", "Sub", "Mul", "Div", "Where"};
    const ir::Op &op = graph.op(softmax);
    if (op.type != "Softmax" || op.inputs.empty())
        return std::nullopt;
    const ir::Tensor &scores = graph.tensor(op.inputs[0]);
    if (scores.shape.size() != 4)
        return std::nullopt;
    // Walk back through scale and mask to the q·kᵀ MatMul for the head dim.
    ir::OpId p = scores.producer;
    for (int depth = 0; depth < 4 && p.valid() && kScoreOps.count(graph.op(p).type); ++depth)
        p = graph.tensor(graph.op(p).inputs[0]).producer;
    if (!p.valid() || graph.op(p).type != "MatMul")
        return std::nullopt;
    const ir::Shape &q = graph.tensor(graph.op(p).inputs[0]).shape;
    if (q.size() != 4)
        return std::nullopt;
    const auto &spec = specs[op.inputs[0].index()];
    TransformerLayerShape l;
    l.softmaxOp = op.name;
    l.b = scores.shape[0] / spec.splitFactor(0, mesh);
    l.a = scores.shape[1];
    l.s = scores.shape[2];
    l.h = l.a * q[3];
    l.t = spec.splitFactor(1, mesh);
    l.sequenceParallel = sequenceParallel && l.t > 1;
    return l;
}

std::int64_t korthikantiBytes(const TransformerLayerShape &l)
{
    const double sbh = static_cast<double>(l.s) * static_cast<double>(l.b) * static_cast<double>(l.h);
    const double attention = 5.0 * static_cast<double>(l.a) * static_cast<double>(l.s) * static_cast<double>(l.s) *
                             static_cast<double>(l.b);
    const double t = static_cast<double>(l.t);
    double bytes = 34 * sbh + attention;
    if (l.t > 1)
        bytes = l.sequenceParallel ? (34 * sbh + attention) / t : 10 * sbh + (24 * sbh + attention) / t;
    return std::llround(bytes);
}

bool savesInputs(const ir::Op &op)
{
    // Ops whose backward needs none of their inputs: sums and data movement.
    static const std::set<std::string, std::less<>> kNothingSaved{
        "Add", "Sub", "Neg", "Reshape", "Transpose", "Concat", "Split", "Expand", "Identity", "Cast", "Flatten",
        "Squeeze", "Unsqueeze"};
    return !kNothingSaved.count(op.type);
}

bool normOnSequenceShards(const ir::Graph &graph, const sharding::Mesh &mesh, const ir::Op &op,
                          const sharding::ShardingSpec &input)
{
    return (op.type == "LayerNormalization" || op.type == "RMSNorm") && !op.inputs.empty() &&
           graph.tensor(op.inputs[0]).shape.size() == 3 && input.splitFactor(1, mesh) > 1;
}

std::int64_t savedTensorBytes(const ir::Graph &graph, const sharding::Mesh &mesh,
                              const std::vector<sharding::ShardingSpec> &specs)
{
    const auto order = graph.topologicalOrder();
    if (!order)
        return 0;
    std::vector<bool> needsGrad(graph.tensorCount(), false);
    for (std::size_t t = 0; t < graph.tensorCount(); ++t)
        needsGrad[t] = graph.tensors()[t].role == ir::Role::Parameter && sharding::isFloat(graph.tensors()[t].dtype);
    std::set<std::size_t> saved;
    for (ir::OpId id : *order) {
        const ir::Op &op = graph.op(id);
        bool flows = false;
        for (auto t : op.inputs)
            flows = flows || needsGrad[t.index()];
        if (!flows)
            continue;
        for (auto t : op.outputs)
            needsGrad[t.index()] = sharding::isFloat(graph.tensor(t).dtype);
        if (!savesInputs(op))
            continue;
        for (auto t : op.inputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            if (tensor.role != ir::Role::Parameter)
                saved.insert(t.index());
        }
    }
    std::int64_t bytes = 0;
    for (auto t : saved) {
        const ir::Tensor &tensor = graph.tensors()[t];
        bytes += specs[t].localElements(tensor.shape, mesh) * ir::byteSize(tensor.dtype);
    }
    return bytes;
}

} // namespace tapestry::cost
