#include "cost/chargerules.h"

#include "cost/collectivetime.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tapestry::cost {

double computeSeconds(double flops, ir::DType type, const sharding::Mesh &mesh)
{
    const double peak = mesh.device.peak(type) * mesh.device.achievableFraction;
    return peak > 0 ? flops / peak : 0;
}

bool gradientFlows(const ir::Op &op, const sharding::OpStrategy &s, const std::vector<bool> &flow)
{
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (s.dataInputs[i] && flow[op.inputs[i].index()])
            return true;
    return false;
}

OpCompute opCompute(const sharding::OpStrategy &s, bool flows, const sharding::Mesh &mesh)
{
    OpCompute c;
    c.flows = flows;
    c.forwardFlops = s.forwardFlops;
    c.forward = computeSeconds(s.forwardFlops, s.computeType, mesh);
    if (flows) {
        c.backwardFlops = s.backwardFlops;
        c.backward = computeSeconds(s.backwardFlops, s.computeType, mesh);
    }
    return c;
}

void appendReshard(std::vector<CollectiveCost> &out, const ir::Tensor &tensor, const sharding::ShardingSpec &from,
                   const sharding::ShardingSpec &to, Phase phase, std::string_view reasonPrefix,
                   const std::string &op, const sharding::Mesh &mesh)
{
    if (from == to)
        return;  // nothing moves (most reads): no reshard to derive
    for (auto c : sharding::reshard(tensor, from, to, mesh).collectives) {
        if (!reasonPrefix.empty())
            c.reason = std::string(reasonPrefix) + c.reason;
        out.push_back(costCollective(c, op, phase, mesh));
    }
}

double reshardSeconds(const ir::Tensor &tensor, const sharding::ShardingSpec &from, const sharding::ShardingSpec &to,
                      const sharding::Mesh &mesh)
{
    double time = 0;
    sharding::forEachReshardStep(tensor, from, to, mesh, [&](const sharding::ReshardStep &c) {
        time += collectiveTime(c.kind, c.bytes, mesh.axes[static_cast<std::size_t>(c.axis)]);
    });
    return time;
}

double collectiveSeconds(const sharding::Collective &c, const sharding::Mesh &mesh)
{
    return collectiveTime(c.kind, c.bytes, mesh.axes[static_cast<std::size_t>(c.axis)]);
}

ParameterLoad parameterLoad(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                            const sharding::Mesh &mesh)
{
    return {static_cast<double>(spec.localElements(parameter.shape, mesh))};
}

ParameterCharge chargeParameters(const ParameterLoad &load, const sharding::Mesh &mesh, const CostOptions &options)
{
    ParameterCharge c;
    // Adam's update: a fixed count of FLOPs per local element, in fp32.
    c.optimizer.flops = options.optimizerFlopsPerParameter * load.localElements;
    c.optimizer.compute = computeSeconds(c.optimizer.flops, ir::DType::F32, mesh);
    c.memory.parameters = std::llround(load.localElements * options.parameterBytes);
    c.memory.gradients = std::llround(load.localElements * options.gradientBytes);
    c.memory.optimizer = std::llround(load.localElements * options.optimizerBytes);
    c.unroundedBytes = load.localElements * options.bytesPerParameter();
    c.bytes = std::llround(c.unroundedBytes);
    return c;
}

double stepSeconds(double compute, double comm, const CostTotals &forward, const CostTotals &backward,
                   const CostTotals &optimizer, const CostOptions &options)
{
    if (!options.overlap)
        return compute + comm;
    return forward.total() + std::max(backward.compute, backward.comm) + optimizer.total();
}

} // namespace tapestry::cost
