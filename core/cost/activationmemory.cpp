#include "cost/activationmemory.h"

#include "sharding/strategy.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <cmath>
#include <set>

namespace tapestry::cost {

namespace {

// The ops from a score Softmax back through its scale and mask to the
// q·kᵀ MatMul, Softmax first and the MatMul last; empty where the chain
// ends elsewhere. A mask's Where reads the scores as its second operand
// (Hugging Face's GPT-2: where(causal, scores, min)), an Add or a Mul
// the operand of the scores' own shape.
std::vector<ir::OpId> scoreChain(const ir::Graph &graph, ir::OpId softmax)
{
    static const std::set<std::string, std::less<>> kScoreOps{"Add", "Sub", "Mul", "Div", "Where"};
    const ir::Op &op = graph.op(softmax);
    if (op.type != "Softmax" || op.inputs.empty() || graph.tensor(op.inputs[0]).shape.size() != 4)
        return {};
    std::vector<ir::OpId> chain{softmax};
    ir::OpId p = graph.tensor(op.inputs[0]).producer;
    for (int depth = 0; depth < 4 && p.valid() && kScoreOps.count(graph.op(p).type); ++depth) {
        chain.push_back(p);
        const ir::Op &step = graph.op(p);
        const std::size_t first = step.type == "Where" ? 1 : 0;
        ir::OpId next;
        for (std::size_t i = first; i < step.inputs.size() && i < first + 2 && !next.valid(); ++i) {
            const ir::Tensor &x = graph.tensor(step.inputs[i]);
            if (x.producer.valid() && !step.outputs.empty() && x.shape == graph.tensor(step.outputs[0]).shape)
                next = x.producer;
        }
        p = next;
    }
    if (!p.valid() || graph.op(p).type != "MatMul")
        return {};
    chain.push_back(p);
    return chain;
}

} // namespace

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
                                                     bool sequenceParallel, const LayerWidths *widths)
{
    // Back through scale and mask to the q·kᵀ MatMul for the head dim.
    const std::vector<ir::OpId> chain = scoreChain(graph, softmax);
    if (chain.empty())
        return std::nullopt;
    const ir::Op &op = graph.op(softmax);
    const ir::Tensor &scores = graph.tensor(op.inputs[0]);
    const ir::OpId p = chain.back();
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
    const LayerWidths found = widths ? LayerWidths{} : layerWidths(graph, softmax);
    const LayerWidths &w = widths ? *widths : found;
    l.ffn = w.ffn;
    l.gated = w.gated;
    l.kv = w.kv > 0 && w.kv < l.h ? w.kv : 0;
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
    // What tensor parallelism leaves whole (the two norms' inputs, the
    // inputs of the q/k/v and first MLP linears, the dropout masks) and
    // what it splits (see above): 10 and 24 s·b·h in the paper's layer.
    const double f = static_cast<double>(l.ffn > 0 ? l.ffn : 4 * l.h);
    const double kv = static_cast<double>(l.kv > 0 ? l.kv : l.h);
    const double whole = 10 * sbh;
    const double split = 4 * sbh + 4 * s * b * kv + (l.gated ? 8 : 4) * s * b * f;
    double bytes = whole + split;
    if (l.t > 1)
        bytes = l.sequenceParallel ? (whole + split) / t : whole + split / t;
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
    // [s, b, f] (two of them, gated) split over t, or the attention
    // probabilities' [b, a, s, s] over t where they are materialised (no
    // flash attention).
    const double stream = 3 * (l.sequenceParallel ? sbh / t : sbh);
    const double f = static_cast<double>(l.ffn > 0 ? l.ffn : 4 * l.h);
    const double mlp = (l.gated ? 2 : 1) * s * b * f / t;
    const double intermediate = std::max(mlp, options.techniques.flashAttention ? 0.0 : a * s * s * b / t);
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
    static const std::set<std::string> kBetween{"Dropout", "Cast", "Identity"};
    AttentionCore core;
    const ir::Op &op = graph.op(softmax);
    if (op.outputs.empty())
        return core;
    core.score = scoreChain(graph, softmax);
    if (core.score.empty())
        return core;
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

// A linear layer: a MatMul or Gemm of an activation by a 2-D parameter.
bool isLinear(const ir::Graph &graph, const ir::Op &op)
{
    if ((op.type != "MatMul" && op.type != "Gemm") || op.inputs.size() < 2 || op.outputs.empty())
        return false;
    const ir::Tensor &w = graph.tensor(op.inputs[1]);
    return w.role == ir::Role::Parameter && w.shape.size() == 2;
}

// A linear's output, past the bias Add that may follow it.
ir::TensorId linearOutput(const ir::Graph &graph, const ir::Op &linear)
{
    ir::TensorId out = linear.outputs[0];
    const auto &readers = graph.tensor(out).consumers;
    if (readers.size() == 1) {
        const ir::Op &next = graph.op(readers[0]);
        if (next.type == "Add" && next.inputs.size() == 2 && !next.outputs.empty() &&
            graph.tensor(next.inputs[next.inputs[0] == out ? 1 : 0]).role == ir::Role::Parameter)
            out = next.outputs[0];
    }
    return out;
}

bool isActivation(const std::string &type)
{
    static const std::set<std::string, std::less<>> kActivations{
        "Gelu", "FastGelu", "QuickGelu", "Relu", "Silu", "Sigmoid", "Tanh", "Erf", "Elu", "LeakyRelu", "Softplus",
        "Mish", "HardSigmoid", "HardSwish", "Selu", "Celu"};
    return kActivations.count(type) > 0;
}

// Whether an activation reads `t` within `depth` ops of pointwise arithmetic
// (an exported GELU divides by √2 before its Erf, cubes before its Tanh).
bool reachesActivation(const ir::Graph &graph, ir::TensorId t, int depth)
{
    for (ir::OpId r : graph.tensor(t).consumers) {
        const ir::Op &op = graph.op(r);
        if (isActivation(op.type))
            return true;
        if (depth > 1 && (op.type == "Div" || op.type == "Mul" || op.type == "Pow") && !op.outputs.empty() &&
            reachesActivation(graph, op.outputs[0], depth - 1))
            return true;
    }
    return false;
}

// The tensors computed from `t` by at most `depth` ops, `t` among them.
void downstream(const ir::Graph &graph, ir::TensorId t, int depth, std::set<std::int32_t> &out)
{
    if (!out.insert(t.value).second || depth == 0)
        return;
    for (ir::OpId r : graph.tensor(t).consumers)
        for (ir::TensorId o : graph.op(r).outputs)
            downstream(graph, o, depth - 1, out);
}

} // namespace

LayerWidths layerWidths(const ir::Graph &graph, ir::OpId softmax)
{
    LayerWidths w;
    const AttentionCore core = attentionCore(graph, softmax);
    if (core.score.empty())
        return w;
    // The keys: back from q·kᵀ's second operand through the moves, the
    // rotary embedding and the expansion to the queries' heads, to their
    // projection.
    static const std::set<std::string, std::less<>> kMoves{"Transpose", "Reshape", "Expand", "Unsqueeze", "Squeeze",
                                                           "Mul",       "Add",     "Concat", "Neg",       "Split",
                                                           "Slice",     "Identity", "Cast",  "Tile"};
    const ir::Op &scores = graph.op(core.score.back());
    bool expanded = false;
    ir::OpId p = scores.inputs.size() > 1 ? graph.tensor(scores.inputs[1]).producer : ir::OpId{};
    for (int hops = 0; hops < 24 && p.valid(); ++hops) {
        const ir::Op &op = graph.op(p);
        if (isLinear(graph, op)) {
            if (expanded)
                w.kv = graph.tensor(op.outputs[0]).shape.back();
            break;
        }
        if (!kMoves.count(op.type) || op.inputs.empty())
            break;
        expanded = expanded || op.type == "Expand" || op.type == "Tile";
        p = graph.tensor(op.inputs[0]).producer;
    }
    // The MLP: the linears reached from the residual join after the
    // attention's output projection, through its norm (an op, or spelt out
    // as exports do before opset 17) and before any other join, linear or
    // attention.
    if (core.context.empty())
        return w;
    ir::TensorId at = graph.op(core.context.back()).outputs[0];
    const ir::Op *projection = nullptr;
    for (int hops = 0; hops < 6 && !projection; ++hops) {
        const auto &readers = graph.tensor(at).consumers;
        if (readers.size() != 1)
            return w;
        const ir::Op &op = graph.op(readers[0]);
        if (isLinear(graph, op))
            projection = &op;
        else if (kMoves.count(op.type) && !op.outputs.empty())
            at = op.outputs[0];
        else
            return w;
    }
    if (!projection)
        return w;
    // A stream: computed, or a graph input of rank 2 and up (not a constant).
    auto stream = [&](ir::TensorId t) {
        const ir::Tensor &x = graph.tensor(t);
        return x.role != ir::Role::Parameter && (x.producer.valid() || x.shape.size() >= 2);
    };
    auto join = [&](const ir::Op &op) {
        return op.type == "Add" && op.inputs.size() == 2 && stream(op.inputs[0]) && stream(op.inputs[1]);
    };
    const ir::Op *residual = nullptr;
    for (ir::OpId r : graph.tensor(linearOutput(graph, *projection)).consumers)
        if (join(graph.op(r)) && !graph.op(r).outputs.empty())
            residual = &graph.op(r);
    if (!residual)
        return w;
    std::vector<const ir::Op *> linears;
    std::vector<ir::TensorId> frontier{residual->outputs[0]};
    std::set<std::int32_t> seen;
    for (std::size_t k = 0; k < frontier.size() && k < 48; ++k)
        for (ir::OpId r : graph.tensor(frontier[k]).consumers) {
            const ir::Op &op = graph.op(r);
            if (op.type == "Softmax")
                return w;  // another attention (a decoder's cross-attention) comes first
            if (isLinear(graph, op)) {
                if (std::find(linears.begin(), linears.end(), &op) == linears.end())
                    linears.push_back(&op);
                continue;
            }
            if (join(op))
                continue;
            for (ir::TensorId o : op.outputs)
                if (seen.insert(o.value).second)
                    frontier.push_back(o);
        }
    auto width = [&](const ir::Op *l) { return graph.tensor(l->outputs[0]).shape.back(); };
    // Gated: one linear's output multiplied by what the activation makes of the other's.
    for (const ir::Op *up : linears)
        for (const ir::Op *gate : linears) {
            if (up == gate || width(up) != width(gate))
                continue;
            const ir::TensorId u = linearOutput(graph, *up), g = linearOutput(graph, *gate);
            if (!reachesActivation(graph, g, 2))
                continue;
            std::set<std::int32_t> fromGate;
            downstream(graph, g, 4, fromGate);
            for (ir::OpId r : graph.tensor(u).consumers) {
                const ir::Op &mul = graph.op(r);
                if (mul.type != "Mul" || mul.inputs.size() != 2)
                    continue;
                const ir::TensorId other = mul.inputs[mul.inputs[0] == u ? 1 : 0];
                if (other != g && fromGate.count(other.value)) {
                    w.ffn = width(up);
                    w.gated = true;
                    return w;
                }
            }
        }
    for (const ir::Op *l : linears)
        if (reachesActivation(graph, linearOutput(graph, *l), 2)) {
            w.ffn = width(l);
            break;
        }
    return w;
}

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
