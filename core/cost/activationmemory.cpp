#include "cost/activationmemory.h"

#include "sharding/strategy.h"

#include <algorithm>
#include <cctype>
#include <map>
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

std::int64_t microBatchOf(std::int64_t localBatch, int microBatches)
{
    const std::int64_t m = std::max(1, microBatches);
    return (localBatch + m - 1) / m;
}

std::int64_t korthikantiBytes(const TransformerLayerShape &l, const Techniques &techniques)
{
    const double b = static_cast<double>(microBatchOf(l.b, techniques.microBatches));
    const double s = static_cast<double>(l.s), h = static_cast<double>(l.h), a = static_cast<double>(l.a);
    const double sbh = s * b * h;
    const double t = static_cast<double>(l.t);
    if (techniques.recompute == Recompute::Full)
        return std::llround(l.sequenceParallel ? 2 * sbh / t : 2 * sbh);
    double bytes = 34 * sbh;
    if (l.t > 1)
        bytes = l.sequenceParallel ? 34 * sbh / t : 10 * sbh + 24 * sbh / t;
    if (techniques.flashAttention)
        bytes += 4 * a * s * b / t;
    else if (techniques.recompute != Recompute::Selective)
        bytes += 5 * a * s * s * b / t;
    return std::llround(bytes);
}

std::int64_t layerActivationBytes(const TransformerLayerShape &layer, const CostOptions &options)
{
    Techniques t = options.techniques;
    if (!t.recomputeLayers.empty())
        t.recompute = recomputeOf(t, layerKind(layer.softmaxOp));
    const std::int64_t bytes = korthikantiBytes(layer, t);
    return options.activationBytes == 2 ? bytes
                                        : std::llround(static_cast<double>(bytes) * options.activationBytes / 2);
}

std::int64_t recomputeWorkingBytes(const TransformerLayerShape &layer, const CostOptions &options, double share)
{
    if (share <= 0 || recomputeOf(options.techniques, layerKind(layer.softmaxOp)) != Recompute::Full)
        return 0;
    CostOptions kept = options;
    kept.techniques.recompute = Recompute::None;
    kept.techniques.recomputeLayers.clear();
    return std::llround(static_cast<double>(layerActivationBytes(layer, kept)) * share);
}

std::int64_t backwardWorkingBytes(const TransformerLayerShape &l, const CostOptions &options, double share)
{
    if (share <= 0)
        return 0;
    const double b = static_cast<double>(microBatchOf(l.b, options.techniques.microBatches));
    const double s = static_cast<double>(l.s), h = static_cast<double>(l.h), a = static_cast<double>(l.a);
    const double t = static_cast<double>(l.t), sbh = s * b * h;
    // Elements: the gradients of the layer's output, its input and the
    // residual branch, each [s, b, h] (on sequence shards with sequence
    // parallelism), and the largest intermediate gradient: the MLP's
    // [s, b, 4h] split over t, or the attention probabilities' [b, a, s, s]
    // over t where they are materialised (no flash attention).
    const double stream = 3 * (l.sequenceParallel ? sbh / t : sbh);
    const double intermediate =
        std::max(4 * sbh / t, options.techniques.flashAttention ? 0.0 : a * s * s * b / t);
    return std::llround((stream + intermediate) * options.activationBytes * share);
}

std::int64_t layerWorkingBytes(const TransformerLayerShape &layer, const CostOptions &options, double share)
{
    return recomputeWorkingBytes(layer, options, share) + backwardWorkingBytes(layer, options, share);
}

std::int64_t savedBytes(const ir::Tensor &tensor, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh,
                        int microBatches)
{
    const std::int64_t bytes = spec.localElements(tensor.shape, mesh) * ir::byteSize(tensor.dtype);
    if (microBatches <= 1 || tensor.shape.empty() || tensor.shape[0] <= 0)
        return bytes;
    const std::int64_t local = tensor.shape[0] / spec.splitFactor(0, mesh);
    if (local <= 1)
        return bytes;
    return bytes / local * microBatchOf(local, microBatches);
}

namespace {

// The ops of the attention core around `softmax`: the scores' chain back to
// the q·kᵀ MatMul, and forward to the MatMul with v. Empty when the
// Softmax is not over [b, a, s, s] scores of such a MatMul.
struct AttentionCore {
    std::vector<ir::OpId> score;
    std::vector<ir::OpId> context;
};
AttentionCore attentionCore(const ir::Graph &graph, ir::OpId softmax)
{
    static const std::set<std::string> kScoreOps{"Add", "Sub", "Mul", "Div", "Where"};
    static const std::set<std::string> kBetween{"Dropout", "Cast", "Identity"};
    AttentionCore core;
    const ir::Op &op = graph.op(softmax);
    if (op.type != "Softmax" || op.inputs.empty() || op.outputs.empty() ||
        graph.tensor(op.inputs[0]).shape.size() != 4)
        return core;
    core.score.push_back(softmax);
    ir::OpId p = graph.tensor(op.inputs[0]).producer;
    for (int depth = 0; depth < 4 && p.valid() && kScoreOps.count(graph.op(p).type); ++depth) {
        core.score.push_back(p);
        p = graph.tensor(graph.op(p).inputs[0]).producer;
    }
    if (!p.valid() || graph.op(p).type != "MatMul") {
        core.score.clear();
        return core;
    }
    core.score.push_back(p);
    ir::TensorId t = op.outputs[0];
    for (int depth = 0; depth < 3; ++depth) {
        const auto &readers = graph.tensor(t).consumers;
        if (readers.size() != 1)
            break;
        const ir::Op &next = graph.op(readers[0]);
        core.context.push_back(readers[0]);
        if (next.type == "MatMul" || !kBetween.count(next.type) || next.outputs.empty())
            break;
        t = next.outputs[0];
    }
    if (core.context.empty() || graph.op(core.context.back()).type != "MatMul")
        core.context.clear();
    return core;
}

} // namespace

std::string_view layerScope(std::string_view name)
{
    std::size_t start = name.front() == '/' ? 1 : 0;
    while (start < name.size()) {
        std::size_t end = name.find('/', start);
        if (end == std::string_view::npos)
            return {};  // the op's own name, not a scope
        if (end > start && std::isdigit(static_cast<unsigned char>(name[end - 1])))
            return name.substr(0, end + 1);
        start = end + 1;
    }
    return {};
}

std::string layerKind(std::string_view opName)
{
    std::string p(layerScope(opName));
    if (p.empty())
        return p;
    const std::size_t end = p.size() - 1;  // the trailing '/'
    std::size_t start = end;
    while (start > 0 && std::isdigit(static_cast<unsigned char>(p[start - 1])))
        --start;
    return p.substr(0, start) + "*" + p.substr(end);
}

namespace {

// The score Softmax ops of the attention layers, by kind.
std::map<std::string, std::vector<std::size_t>> attentionLayersByKind(const ir::Graph &graph)
{
    std::map<std::string, std::vector<std::size_t>> kinds;
    for (std::size_t o = 0; o < graph.opCount(); ++o) {
        const ir::OpId id(static_cast<std::int32_t>(o));
        if (graph.op(id).type == "Softmax" && !attentionCore(graph, id).score.empty())
            kinds[layerKind(graph.op(id).name)].push_back(o);
    }
    return kinds;
}

} // namespace

std::vector<Recompute> recomputeModes(const ir::Graph &graph, const Techniques &t)
{
    std::vector<Recompute> modes(graph.opCount(), t.recompute);
    if (t.recomputeLayers.empty())
        return modes;
    for (std::size_t o = 0; o < graph.opCount(); ++o)
        modes[o] = recomputeOf(t, layerKind(graph.op(ir::OpId(static_cast<std::int32_t>(o))).name));
    return modes;
}

std::vector<std::string> attentionLayerKinds(const ir::Graph &graph)
{
    std::vector<std::string> kinds;
    for (const auto &[kind, ops] : attentionLayersByKind(graph))
        if (!kind.empty())
            kinds.push_back(kind);
    return kinds;
}

std::vector<double> layerShares(const ir::Graph &graph)
{
    std::vector<double> shares(graph.opCount(), 0);
    for (const auto &[kind, ops] : attentionLayersByKind(graph))
        for (std::size_t o : ops)
            shares[o] = 1.0 / static_cast<double>(ops.size());
    return shares;
}

std::vector<double> parameterShares(const ir::Graph &graph)
{
    std::vector<double> shares(graph.tensorCount(), 0);
    const auto kinds = attentionLayersByKind(graph);
    for (auto t : graph.tensorsWithRole(ir::Role::Parameter)) {
        const auto &readers = graph.tensor(t).consumers;
        if (readers.empty())
            continue;
        const std::string kind = layerKind(graph.op(readers.front()).name);
        if (auto it = kinds.find(kind); !kind.empty() && it != kinds.end())
            shares[t.index()] = 1.0 / static_cast<double>(it->second.size());
    }
    return shares;
}

std::vector<std::uint8_t> recomputeRoles(const ir::Graph &graph)
{
    std::vector<std::uint8_t> roles(graph.opCount(), 0);
    std::set<std::string_view> layers;
    for (std::size_t o = 0; o < graph.opCount(); ++o) {
        const ir::OpId id(static_cast<std::int32_t>(o));
        if (graph.op(id).type != "Softmax")
            continue;
        const AttentionCore core = attentionCore(graph, id);
        if (core.score.empty())
            continue;
        for (ir::OpId s : core.score)
            roles[s.index()] |= kScore;
        for (ir::OpId c : core.context)
            roles[c.index()] |= kContext;
        if (auto scope = layerScope(graph.op(id).name); !scope.empty())
            layers.insert(scope);
    }
    if (layers.empty())
        return roles;
    for (std::size_t o = 0; o < graph.opCount(); ++o) {
        const std::string_view scope = layerScope(graph.op(ir::OpId(static_cast<std::int32_t>(o))).name);
        if (!scope.empty() && layers.count(scope))
            roles[o] |= kLayer;
    }
    return roles;
}

Recomputed recomputedForward(std::uint8_t role, Recompute mode, bool flashAttention)
{
    Recomputed r;
    if (mode == Recompute::Full && (role & kLayer)) {
        r.compute = 1;
        r.comm = 1;
    } else if (mode == Recompute::Selective && (role & (kScore | kContext))) {
        r.compute = 1;
    }
    if (flashAttention && (role & kScore))
        r.compute += 1;
    return r;
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
    return op.isNorm() && !op.inputs.empty() &&
           graph.tensor(op.inputs[0]).shape.size() == 3 && input.splitFactor(1, mesh) > 1;
}

std::int64_t savedTensorBytes(const ir::Graph &graph, const sharding::Mesh &mesh,
                              const std::vector<sharding::ShardingSpec> &specs, int microBatches)
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
    for (auto t : saved)
        bytes += savedBytes(graph.tensors()[t], specs[t], mesh, microBatches);
    return bytes;
}

} // namespace tapestry::cost
