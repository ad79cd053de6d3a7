#include "sharding/oprule.h"

#include <utility>

namespace tapestry::sharding {

namespace {

// X[N, C, spatial...]'s loops: batch and channels splittable, each spatial
// dim its own loop that is not (a split would need halos or the map's
// statistics). Returns the batch's and the channels' loops.
std::pair<int, int> batchChannelLoops(DimMap &m, const ir::Shape &x)
{
    const int n = m.addLoop(), c = m.addLoop();
    m.inputs[0] = {n, c};
    for (std::size_t d = 2; d < x.size(); ++d)
        m.inputs[0].push_back(m.addLoop(false));
    return {n, c};
}

} // namespace

// BatchNormalization: Y[N, C, spatial...] normalised per channel over the
// batch and the spatial dims. Channels split freely (the scale, bias and
// running statistics with them). In training the statistics are the
// batch's: a split batch all-reduces each channel's sum and sum of squares
// forward and the two sums of the backward pass, SyncBatchNorm's exchange,
// so that every device normalises by the whole batch as one device does;
// with the running statistics (inference) a split batch costs nothing. The
// spatial dims stay whole, as a convolution's do.
std::optional<DimMap> batchNormRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() < 3 || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape;
    if (x.size() < 2)
        return std::nullopt;
    const bool training = ir::intAttr(op.attributes, "training_mode").value_or(0) != 0 || op.outputs.size() > 1;
    DimMap m = emptyDimMap(op);
    const auto [n, c] = batchChannelLoops(m, x);
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        if (graph.tensor(op.inputs[i]).shape != ir::Shape{x[1]})
            return std::nullopt;
        m.inputs[i] = {c};
    }
    if (graph.tensor(op.outputs[0]).shape != x)
        return std::nullopt;
    m.outputs[0] = m.inputs[0];
    for (std::size_t o = 1; o < op.outputs.size(); ++o) {
        if (graph.tensor(op.outputs[o]).shape != ir::Shape{x[1]})
            return std::nullopt;
        m.outputs[o] = {c};
    }
    if (training)
        // One all-reduce each way of the two sums packed per channel.
        m.internal[n] = {InternalCollective{CollectiveKind::AllReduce, 1, 0, {1}, 8, false},
                         InternalCollective{CollectiveKind::AllReduce, 1, 0, {1}, 8, true}};
    // Rough FLOPs per element: the two sums, subtract, scale, shift.
    m.forwardFlops = (training ? 6.0 : 4.0) * static_cast<double>(elementCount(x));
    m.backwardFactor = 2;
    return m;
}

// MaxPool, AveragePool, LpPool: Y[N, C, out...] from windows of X[N, C,
// in...]: batch and channels split freely, the spatial dims stay whole (a
// split would need the windows' halos). MaxPool's indices output maps as Y.
std::optional<DimMap> poolRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.empty())
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &y = graph.tensor(op.outputs[0]).shape;
    if (x.size() < 3 || y.size() != x.size())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    const auto [n, c] = batchChannelLoops(m, x);
    std::vector<int> out{n, c};
    for (std::size_t d = 2; d < y.size(); ++d)
        out.push_back(m.addLoop(false));
    for (std::size_t o = 0; o < op.outputs.size(); ++o) {
        if (graph.tensor(op.outputs[o]).shape != y)
            return std::nullopt;
        m.outputs[o] = out;
    }
    double window = 1;
    if (auto kernel = ir::intsAttr(op.attributes, "kernel_shape"))
        for (auto k : *kernel)
            window *= static_cast<double>(k);
    if (op.type == "AveragePool")
        m.partial = PartialRule::Unary;
    m.forwardFlops = window * static_cast<double>(elementCount(y));
    return m;
}

// GlobalAveragePool and GlobalMaxPool: Y[N, C, 1...] over all of X's
// spatial dims. Batch and channels split freely; the average is linear, so
// a split spatial dim leaves partial sums (as ReduceMean's rule has it);
// the maximum keeps them whole.
std::optional<DimMap> globalPoolRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() != 1 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &y = graph.tensor(op.outputs[0]).shape;
    if (x.size() < 3 || y.size() != x.size() || y[0] != x[0] || y[1] != x[1])
        return std::nullopt;
    const bool linear = op.type == "GlobalAveragePool";
    DimMap m = emptyDimMap(op);
    const int n = m.addLoop(), c = m.addLoop();
    m.inputs[0] = {n, c};
    m.outputs[0] = {n, c};
    for (std::size_t d = 2; d < x.size(); ++d) {
        m.inputs[0].push_back(m.addLoop(linear, linear));
        m.outputs[0].push_back(-1);
    }
    if (linear)
        m.partial = PartialRule::Unary;
    m.forwardFlops = static_cast<double>(elementCount(x));
    return m;
}

// Pad: the dims it leaves their size map through (and split freely), the
// padded dims stay whole; its pads, value and axes are shape operands.
std::optional<DimMap> padRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.empty() || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape, &y = graph.tensor(op.outputs[0]).shape;
    if (y.size() != x.size())
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t i = 1; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    for (std::size_t d = 0; d < x.size(); ++d) {
        if (x[d] == y[d]) {
            const int loop = m.addLoop();
            m.inputs[0].push_back(loop);
            m.outputs[0].push_back(loop);
        } else {
            m.inputs[0].push_back(m.addLoop(false));
            m.outputs[0].push_back(m.addLoop(false));
        }
    }
    m.forwardFlops = 0;
    return m;
}

// InstanceNormalization: X[N, C, spatial...] normalised per sample and
// channel over the spatial dims (GroupNorm with a group per channel, as
// wav2vec 2.0's feature extractor exports it): batch and channels split
// freely, the scale and bias [C] with the channels, the spatial dims whole.
std::optional<DimMap> instanceNormRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.inputs.size() != 3 || op.outputs.size() != 1)
        return std::nullopt;
    const ir::Shape &x = graph.tensor(op.inputs[0]).shape;
    if (x.size() < 3 || graph.tensor(op.outputs[0]).shape != x)
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    const int c = batchChannelLoops(m, x).second;
    for (std::size_t i = 1; i < 3; ++i) {
        if (graph.tensor(op.inputs[i]).shape != ir::Shape{x[1]})
            return std::nullopt;
        m.inputs[i] = {c};
    }
    m.outputs[0] = m.inputs[0];
    m.forwardFlops = 6.0 * static_cast<double>(elementCount(x));
    m.backwardFactor = 2;
    return m;
}

// ConstantOfShape and Range make a tensor from shape values alone: each
// device writes its own part of it in whatever layout its readers want, at
// no cost, so every dim splits freely; their inputs are shape operands.
std::optional<DimMap> generatorRule(const ir::Graph &graph, const ir::Op &op)
{
    if (op.outputs.size() != 1)
        return std::nullopt;
    DimMap m = emptyDimMap(op);
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        m.ignored[i] = true;
        m.inputs[i].assign(graph.tensor(op.inputs[i]).shape.size(), -1);
    }
    for (std::size_t d = 0; d < graph.tensor(op.outputs[0]).shape.size(); ++d)
        m.outputs[0].push_back(m.addLoop());
    m.forwardFlops = static_cast<double>(elementCount(graph.tensor(op.outputs[0]).shape));
    return m;
}

} // namespace tapestry::sharding
