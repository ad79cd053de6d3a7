#include "sharding/batchflow.h"

#include "sharding/oprule.h"

#include <deque>

namespace tapestry::sharding {

namespace {

bool isInteger(ir::DType d)
{
    return d == ir::DType::I64 || d == ir::DType::I32;
}

// The model's main input: the token ids (indices of the largest parameter
// table a Gather reads), else the largest float input of rank >= 2.
std::optional<ir::TensorId> mainInput(const ir::Graph &graph)
{
    std::optional<ir::TensorId> best;
    std::int64_t bestTable = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Input)) {
        const ir::Tensor &ids = graph.tensor(t);
        if (!isInteger(ids.dtype) || ids.shape.empty())
            continue;
        for (ir::OpId c : ids.consumers) {
            const ir::Op &op = graph.op(c);
            if (op.type != "Gather" || op.inputs.size() < 2 || op.inputs[1] != t)
                continue;
            const ir::Tensor &table = graph.tensor(op.inputs[0]);
            if (table.role == ir::Role::Parameter && table.elementCount() > bestTable) {
                bestTable = table.elementCount();
                best = t;
            }
        }
    }
    if (best)
        return best;
    std::int64_t most = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Input)) {
        const ir::Tensor &x = graph.tensor(t);
        if (!isInteger(x.dtype) && x.shape.size() >= 2 && x.elementCount() > most) {
            most = x.elementCount();
            best = t;
        }
    }
    return best;
}

// Follows a split of `dim` of `start` through every op it reaches; the
// graph inputs it reaches, by their dim, or nothing where it fails.
std::optional<std::map<ir::TensorId, int>> follow(const ir::Graph &graph, ir::TensorId start, int dim)
{
    std::map<ir::TensorId, int> reached{{start, dim}}, inputs{{start, dim}};
    std::deque<ir::TensorId> pending{start};
    auto reach = [&](ir::TensorId t, int d) {
        const auto [it, fresh] = reached.emplace(t, d);
        if (fresh)
            pending.push_back(t);
        return it->second == d;
    };
    while (!pending.empty()) {
        const ir::TensorId t = pending.front();
        pending.pop_front();
        const int d = reached.at(t);
        for (ir::OpId c : graph.tensor(t).consumers) {
            const ir::Op &op = graph.op(c);
            const auto m = opRule(graph, op);
            if (!m)
                return std::nullopt;
            int loop = -1;
            bool shapeOnly = true;
            for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                if (op.inputs[i] != t || m->ignored[i])
                    continue;
                shapeOnly = false;
                const int l = m->inputs[i][static_cast<std::size_t>(d)];
                if (l < 0 || (loop >= 0 && l != loop))
                    return std::nullopt;
                loop = l;
            }
            if (shapeOnly)
                continue;  // read as a shape: carries no data
            if (!m->splittable[static_cast<std::size_t>(loop)])
                return std::nullopt;
            bool carried = false;
            for (std::size_t o = 0; o < op.outputs.size(); ++o)
                carried = carried || m->outputDim(o, loop) >= 0;
            if (!carried) {
                // Only the loss may reduce the batch, to a scalar.
                for (auto out : op.outputs)
                    if (!graph.tensor(out).shape.empty())
                        return std::nullopt;
                continue;
            }
            for (std::size_t i = 0; i < op.inputs.size(); ++i) {
                const ir::TensorId in = op.inputs[i];
                if (in == t || m->ignored[i])
                    continue;
                const int di = m->inputDim(i, loop);
                if (di < 0)
                    continue;
                const ir::Tensor &other = graph.tensor(in);
                if (other.role == ir::Role::Parameter)
                    return std::nullopt;  // a weight holds no batch
                if (other.role == ir::Role::Input && other.shape[static_cast<std::size_t>(di)] > 1) {
                    inputs.emplace(in, di);
                    if (!reach(in, di))
                        return std::nullopt;
                }
            }
            for (std::size_t o = 0; o < op.outputs.size(); ++o) {
                const int od = m->outputDim(o, loop);
                if (od >= 0 && !reach(op.outputs[o], od))
                    return std::nullopt;
            }
        }
    }
    return inputs;
}

} // namespace

std::optional<BatchFlow> batchByDataFlow(const ir::Graph &graph)
{
    const auto input = mainInput(graph);
    if (!input)
        return std::nullopt;
    const ir::Shape &shape = graph.tensor(*input).shape;
    for (std::size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] <= 1)
            continue;
        auto inputs = follow(graph, *input, static_cast<int>(d));
        if (!inputs)
            continue;
        // Inputs the main input's batch does not reach hold it too where
        // a dim of the batch's size passes as it does (T5's decoder ids,
        // read by their own embedding lookup); a buffer of that size (a
        // norm's running statistics over as many channels) does not pass.
        for (auto t : graph.tensorsWithRole(ir::Role::Input)) {
            const ir::Shape &other = graph.tensor(t).shape;
            if (inputs->count(t) || other.size() <= d || other[d] != shape[d])
                continue;
            if (auto more = follow(graph, t, static_cast<int>(d)))
                inputs->insert(more->begin(), more->end());
        }
        return BatchFlow{*input, static_cast<int>(d), shape[d], std::move(*inputs)};
    }
    return std::nullopt;
}

} // namespace tapestry::sharding
