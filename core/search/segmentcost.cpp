#include "search/segmentcost.h"

#include "cost/activationmemory.h"
#include "cost/collectivetime.h"
#include "cost/costmodel.h"
#include "sharding/reshard.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tapestry::search {

using sharding::Placement;
using sharding::ShardingSpec;

SegmentCoster::SegmentCoster(const ir::Graph &graph, const sharding::Mesh &mesh, const cost::CostOptions &options)
    : m_graph(graph), m_mesh(mesh), m_options(options), m_flow(cost::gradientFlow(graph)),
      m_specs(graph.tensorCount(), ShardingSpec::replicated(mesh.rank())),
      m_produced(graph.tensorCount(), ShardingSpec::replicated(mesh.rank()))
{
    const std::vector<ShardingSpec> replicated(graph.tensorCount(), ShardingSpec::replicated(mesh.rank()));
    for (std::size_t o = 0; o < graph.opCount() && !m_attention; ++o)
        m_attention = cost::transformerLayer(graph, mesh, replicated, ir::OpId(static_cast<std::int32_t>(o)), false)
                          .has_value();
}

std::int64_t SegmentCoster::weightMemory(const Segment &segment, const std::vector<ShardingSpec> &weights) const
{
    double elements = 0;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        elements += static_cast<double>(weights[w].localElements(m_graph.tensor(segment.weights[w]).shape, m_mesh));
    return std::llround(elements * m_options.bytesPerParameter());
}

SegmentCost SegmentCoster::evaluate(const Segment &segment, const std::map<ir::TensorId, ShardingSpec> &boundary,
                                    const std::vector<ShardingSpec> &weights, bool withBreakdown)
{
    ++m_evaluations;
    const ShardingSpec replicated = ShardingSpec::replicated(m_mesh.rank());
    for (const auto &[t, spec] : boundary)
        m_specs[t.index()] = spec;
    for (std::size_t w = 0; w < segment.weights.size(); ++w)
        m_specs[segment.weights[w].index()] = weights[w];
    std::vector<ir::TensorId> pending(segment.derived.begin(), segment.derived.end());
    auto takePending = [&](ir::TensorId t) {
        auto it = std::find(pending.begin(), pending.end(), t);
        if (it == pending.end())
            return false;
        pending.erase(it);
        return true;
    };
    for (auto t : segment.derived)
        m_specs[t.index()] = replicated;

    std::vector<sharding::OpStrategy> strategies;
    strategies.reserve(segment.ops.size());
    std::vector<ShardingSpec> inputs;
    for (ir::OpId id : segment.ops) {
        const ir::Op &op = m_graph.op(id);
        auto resolve = [&] {
            inputs.clear();
            for (auto t : op.inputs)
                inputs.push_back(m_specs[t.index()]);
            return sharding::resolveStrategy(m_graph, id, inputs, m_mesh);
        };
        sharding::OpStrategy s = resolve();
        bool derivedHere = false;
        for (std::size_t i = 0; i < op.inputs.size(); ++i) {
            if (!takePending(op.inputs[i]) || !s.dataInputs[i])
                continue;
            // A bias or scale is stored the way its consumer computes on it,
            // a pending sum (a row-parallel bias added once) as a replica.
            ShardingSpec spec = s.inputs[i];
            for (auto &p : spec.placements)
                if (p.isPartial())
                    p = Placement::replicate();
            if (!spec.problem(m_graph.tensor(op.inputs[i]).shape, m_mesh) && spec != m_specs[op.inputs[i].index()]) {
                m_specs[op.inputs[i].index()] = spec;
                derivedHere = true;
            }
        }
        if (derivedHere)
            s = resolve();
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::TensorId t = op.outputs[o];
            if (boundary.count(t))
                continue;
            ShardingSpec spec = s.outputs[o];
            for (auto &p : spec.placements)
                if (p.isPartial())
                    p = Placement::replicate();
            m_specs[t.index()] = spec;
        }
        strategies.push_back(std::move(s));
    }

    for (std::size_t k = 0; k < segment.ops.size(); ++k) {
        const ir::Op &op = m_graph.op(segment.ops[k]);
        for (std::size_t o = 0; o < op.outputs.size(); ++o)
            m_produced[op.outputs[o].index()] = strategies[k].outputs[o];
    }

    SegmentCost result;
    cost::PlanCost c;
    if (withBreakdown) {
        c = cost::evaluateOps(m_graph, m_mesh, m_specs, segment.ops, strategies, m_flow);
    } else {
        const auto totals = cost::evaluateOpsTotals(m_graph, m_mesh, m_specs, segment.ops, strategies, m_flow);
        c.compute = totals.compute;
        c.comm = totals.comm;
        c.stepTime = totals.compute + totals.comm;
    }
    double localParameters = 0;
    for (auto t : segment.weights)
        localParameters += static_cast<double>(m_specs[t.index()].localElements(m_graph.tensor(t).shape, m_mesh));
    for (auto t : segment.derived)
        localParameters += static_cast<double>(m_specs[t.index()].localElements(m_graph.tensor(t).shape, m_mesh));
    const double fp32 = m_mesh.device.peak(ir::DType::F32) * m_mesh.device.achievableFraction;
    const double optimizer = fp32 > 0 ? m_options.optimizerFlopsPerParameter * localParameters / fp32 : 0;
    result.time = c.stepTime + optimizer;
    result.comm = c.comm;
    result.parameterMemory = std::llround(localParameters * m_options.bytesPerParameter());

    std::int64_t activations = 0;
    if (m_attention) {
        bool sequenceParallel = false;
        for (ir::OpId id : segment.ops) {
            const ir::Op &op = m_graph.op(id);
            if ((op.type == "LayerNormalization" || op.type == "RMSNorm") && !op.inputs.empty() &&
                m_graph.tensor(op.inputs[0]).shape.size() == 3 &&
                m_specs[op.inputs[0].index()].splitFactor(1, m_mesh) > 1)
                sequenceParallel = true;
        }
        for (ir::OpId id : segment.ops)
            if (auto l = cost::transformerLayer(m_graph, m_mesh, m_specs, id, sequenceParallel))
                activations += cost::korthikantiBytes(*l);
    } else {
        // The saved-tensor model of the cost model, over this segment's ops.
        static const std::set<std::string> kNothingSaved{"Add", "Sub", "Neg", "Reshape", "Transpose", "Concat",
                                                         "Split", "Expand", "Identity", "Cast", "Flatten",
                                                         "Squeeze", "Unsqueeze"};
        std::set<ir::TensorId> saved;
        for (ir::OpId id : segment.ops) {
            const ir::Op &op = m_graph.op(id);
            const bool flows = std::any_of(op.inputs.begin(), op.inputs.end(),
                                           [&](ir::TensorId t) { return m_flow[t.index()]; });
            if (!flows || kNothingSaved.count(op.type))
                continue;
            for (auto t : op.inputs)
                if (m_graph.tensor(t).role != ir::Role::Parameter)
                    saved.insert(t);
        }
        for (auto t : saved)
            activations += m_specs[t.index()].localElements(m_graph.tensor(t).shape, m_mesh) *
                           ir::byteSize(m_graph.tensor(t).dtype);
    }
    result.memory = result.parameterMemory + activations;
    if (withBreakdown)
        result.breakdown = std::move(c);
    return result;
}

SegmentCost SegmentCoster::storageCost(ir::TensorId t, const ShardingSpec &stored) const
{
    // What evaluateOps charges for a segment output beyond its producer's
    // compute: the forward reshard from the produced spec to the stored one
    // and, where a gradient flows back, the reverse for the gradient.
    const ir::Tensor &tensor = m_graph.tensor(t);
    const ShardingSpec &produced = m_produced[t.index()];
    SegmentCost c;
    auto charge = [&](const sharding::Reshard &r) {
        for (const auto &col : r.collectives)
            c.comm += cost::collectiveTime(col.kind, col.bytes, m_mesh.axes[static_cast<std::size_t>(col.axis)]);
    };
    charge(sharding::reshard(tensor, produced, stored, m_mesh));
    const ir::Op &op = m_graph.op(tensor.producer);
    const bool flows = std::any_of(op.inputs.begin(), op.inputs.end(), [&](ir::TensorId i) { return m_flow[i.index()]; });
    if (flows && sharding::isFloat(tensor.dtype))
        charge(sharding::reshard(tensor, sharding::gradientSpec(stored), sharding::gradientSpec(produced), m_mesh));
    c.time = c.comm;
    return c;
}

std::vector<std::vector<ir::OpId>> splitAtResidualCuts(const ir::Graph &graph, const std::vector<ir::OpId> &ops)
{
    std::map<ir::OpId, std::size_t> position;
    for (std::size_t k = 0; k < ops.size(); ++k)
        position[ops[k]] = k;
    // Per position p: how many tensors written at or before p are read after p.
    std::vector<int> crossing(ops.size(), 0);
    std::vector<ir::TensorId> lastCrossing(ops.size());
    for (std::size_t k = 0; k < ops.size(); ++k)
        for (auto t : graph.op(ops[k]).outputs) {
            std::size_t last = k;
            for (auto c : graph.tensor(t).consumers)
                if (auto it = position.find(c); it != position.end())
                    last = std::max(last, it->second);
            for (std::size_t p = k; p < last; ++p) {
                crossing[p] += 1;
                lastCrossing[p] = t;
            }
        }
    std::vector<std::vector<ir::OpId>> blocks(1);
    for (std::size_t k = 0; k < ops.size(); ++k) {
        blocks.back().push_back(ops[k]);
        if (k + 1 == ops.size() || crossing[k] != 1)
            continue;
        const ir::Tensor &t = graph.tensor(lastCrossing[k]);
        if (t.producer == ops[k] && graph.op(ops[k]).type == "Add" && t.consumers.size() >= 2)
            blocks.emplace_back();
    }
    return blocks;
}

Segment makeSegment(const ir::Graph &graph, const sharding::Mesh &mesh, std::string name, int classIndex,
                    int instances, std::vector<ir::OpId> ops)
{
    Segment s;
    s.name = std::move(name);
    s.classIndex = classIndex;
    s.instances = instances;
    s.ops = std::move(ops);
    const std::set<ir::OpId> inside(s.ops.begin(), s.ops.end());
    std::set<ir::TensorId> seen;
    for (ir::OpId id : s.ops) {
        const ir::Op &op = graph.op(id);
        for (auto t : op.inputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            if (!seen.insert(t).second)
                continue;
            if (tensor.role == ir::Role::Parameter) {
                // A parameter another segment also reads (a tied embedding)
                // is decided where it is read first.
                bool readFirstHere = true;
                for (auto c : tensor.consumers)
                    readFirstHere = readFirstHere && (inside.count(c) || c > id);
                if (!readFirstHere)
                    s.inputs.push_back(t);
                else
                    (tensor.shape.size() >= 2 && sharding::isFloat(tensor.dtype) ? s.weights : s.derived).push_back(t);
            } else if (!tensor.producer.valid() || !inside.count(tensor.producer)) {
                s.inputs.push_back(t);
            }
        }
        for (auto t : op.outputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            bool outside = tensor.role == ir::Role::Output || tensor.consumers.empty();
            for (auto c : tensor.consumers)
                outside = outside || !inside.count(c);
            if (outside)
                s.outputs.push_back(t);
        }
    }
    for (auto w : s.weights) {
        const ir::Tensor &tensor = graph.tensor(w);
        std::vector<ShardingSpec> specs{ShardingSpec::replicated(mesh.rank())};
        for (int a = 0; a < mesh.rank(); ++a) {
            std::vector<ShardingSpec> next;
            for (const auto &spec : specs) {
                next.push_back(spec);
                for (int d = 0; d < static_cast<int>(tensor.shape.size()); ++d) {
                    ShardingSpec n = spec;
                    n.placements[static_cast<std::size_t>(a)] = Placement::shard(d);
                    next.push_back(n);
                }
            }
            specs = std::move(next);
        }
        std::vector<ShardingSpec> legal;
        for (const auto &spec : specs)
            if (!spec.problem(tensor.shape, mesh))
                legal.push_back(spec);
        s.choices.push_back(std::move(legal));
    }
    return s;
}

} // namespace tapestry::search
