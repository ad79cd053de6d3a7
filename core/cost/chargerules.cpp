#include "cost/chargerules.h"

#include "cost/collectivetime.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tapestry::cost {

double computeSeconds(double flops, ir::DType type, const sharding::Mesh &mesh, double gemmCallFlops)
{
    const double fraction =
        gemmCallFlops > 0 ? mesh.device.gemmFraction(gemmCallFlops) : mesh.device.achievableFraction;
    const double peak = mesh.device.peak(type) * fraction;
    return peak > 0 ? flops / peak : 0;
}

bool gradientFlows(const ir::Op &op, const sharding::OpStrategy &s, const std::vector<bool> &flow)
{
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
        if (s.dataInputs[i] && flow[op.inputs[i].index()])
            return true;
    return false;
}

double kernelSeconds(double flops, double bytes, ir::DType type, const sharding::Mesh &mesh, double gemmCallFlops,
                     std::string_view family)
{
    const double bandwidth = mesh.device.bandwidthOf(family);
    return std::max(computeSeconds(flops, type, mesh, gemmCallFlops), bandwidth > 0 ? bytes / bandwidth : 0.0);
}

OpCompute opCompute(const sharding::OpStrategy &s, bool flows, const sharding::Mesh &mesh,
                    const Recomputed &recomputed)
{
    // A view launches nothing; any other op one kernel forward and two
    // backward (its inputs' gradients, its weight's).
    const bool kernel = s.forwardBytes > 0 || s.forwardFlops > 0;
    const double launch = kernel ? mesh.device.kernelLaunch : 0.0;
    OpCompute c;
    c.flows = flows;
    c.forwardFlops = s.forwardFlops;
    c.forward =
        kernelSeconds(s.forwardFlops, s.forwardBytes, s.computeType, mesh, s.gemmCallFlops, s.kernelFamily) + launch;
    if (flows) {
        c.backwardFlops = s.backwardFlops + recomputed.compute * s.forwardFlops;
        c.backward = kernelSeconds(s.backwardFlops, s.backwardBytes, s.computeType, mesh, s.gemmCallFlops,
                                   s.kernelFamily) +
                     2 * launch +
                     recomputed.compute * c.forward;
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

ParameterLoad &ParameterLoad::operator+=(const ParameterLoad &o)
{
    localElements += o.localElements;
    zeroElements += o.zeroElements;
    gatheredElements += o.gatheredElements;
    gatherSeconds += o.gatherSeconds;
    scatterSeconds += o.scatterSeconds;
    gatherWireBytes += o.gatherWireBytes;
    scatterWireBytes += o.scatterWireBytes;
    gatherCalls += o.gatherCalls;
    scatterCalls += o.scatterCalls;
    return *this;
}

ParameterLoad operator-(ParameterLoad a, const ParameterLoad &b)
{
    a.localElements -= b.localElements;
    a.zeroElements -= b.zeroElements;
    a.gatheredElements -= b.gatheredElements;
    a.gatherSeconds -= b.gatherSeconds;
    a.scatterSeconds -= b.scatterSeconds;
    a.gatherWireBytes -= b.gatherWireBytes;
    a.scatterWireBytes -= b.scatterWireBytes;
    a.gatherCalls -= b.gatherCalls;
    a.scatterCalls -= b.scatterCalls;
    return a;
}

static bool zeroAxis(const sharding::Mesh &mesh, std::size_t axis, const Techniques &techniques)
{
    const auto &axes = techniques.zeroAxes;
    return !axes || std::find(axes->begin(), axes->end(), mesh.axes[axis].name) != axes->end();
}

std::int64_t zeroDegree(const sharding::ShardingSpec &spec, const sharding::Mesh &mesh, const Techniques &techniques)
{
    std::int64_t d = 1;
    for (std::size_t a = 0; a < mesh.axes.size() && a < spec.placements.size(); ++a)
        if (spec.placements[a].isReplicate() && zeroAxis(mesh, a, techniques))
            d *= mesh.axes[a].size;
    return d;
}

namespace {

// One gather (or reduce-scatter) of `bytes` per device over the axes
// `spec` replicates, axis by axis in mesh order: each step's size is the
// gathered size (nccl-tests convention).
template <class Visit>
void forEachZeroStep(const sharding::ShardingSpec &spec, const sharding::Mesh &mesh, const Techniques &techniques,
                     double bytes, Visit visit)
{
    for (std::size_t a = 0; a < mesh.axes.size() && a < spec.placements.size(); ++a) {
        if (!spec.placements[a].isReplicate() || mesh.axes[a].size <= 1 || !zeroAxis(mesh, a, techniques))
            continue;
        bytes *= static_cast<double>(mesh.axes[a].size);
        visit(static_cast<int>(a), std::llround(bytes));
    }
}

} // namespace

ParameterLoad parameterLoad(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                            const sharding::Mesh &mesh, const CostOptions &options, double layerShare)
{
    ParameterLoad load;
    load.localElements = static_cast<double>(spec.localElements(parameter.shape, mesh));
    const int stage = options.techniques.zeroStage;
    if (stage <= 0)
        return load;
    const double d = static_cast<double>(zeroDegree(spec, mesh, options.techniques));
    load.zeroElements = load.localElements / d;
    if (stage >= 3)
        load.gatheredElements = (load.localElements - load.zeroElements) * layerShare;
    if (d <= 1 || ((stage < 2 || options.techniques.microBatches <= 1) && stage < 3))
        return load;
    auto visit = [&](sharding::CollectiveKind kind, double perElement, double &seconds, double &wire, double &calls) {
        forEachZeroStep(spec, mesh, options.techniques, load.zeroElements * perElement, [&](int a, std::int64_t bytes) {
            const auto &axis = mesh.axes[static_cast<std::size_t>(a)];
            seconds += collectiveTime(kind, bytes, axis);
            wire += static_cast<double>(wireBytes(kind, bytes, axis.size));
            calls += 1;
        });
    };
    visit(sharding::CollectiveKind::AllGather, options.parameterBytes, load.gatherSeconds, load.gatherWireBytes,
          load.gatherCalls);
    visit(sharding::CollectiveKind::ReduceScatter, options.gradientBytes, load.scatterSeconds, load.scatterWireBytes,
          load.scatterCalls);
    return load;
}

namespace {

enum class ZeroStep { ForwardGather, BackwardGather, GradientScatter };

// ZeRO's collectives of one parameter in zeroCollectives' order, each
// given to visit(kind, axis, bytes, phase, step, micro-batch).
template <class Visit>
void forEachZeroCollective(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                           const sharding::Mesh &mesh, const CostOptions &options, Visit visit)
{
    const int stage = options.techniques.zeroStage, m = std::max(1, options.techniques.microBatches);
    const std::int64_t d = zeroDegree(spec, mesh, options.techniques);
    if (stage < 2 || d <= 1)
        return;
    const double shard = static_cast<double>(spec.localElements(parameter.shape, mesh)) / static_cast<double>(d);
    auto add = [&](sharding::CollectiveKind kind, double perElement, Phase phase, ZeroStep step, int k) {
        forEachZeroStep(spec, mesh, options.techniques, shard * perElement,
                        [&](int a, std::int64_t bytes) { visit(kind, a, bytes, phase, step, k); });
    };
    if (stage >= 3)
        for (int k = 0; k < m; ++k)
            add(sharding::CollectiveKind::AllGather, options.parameterBytes, Phase::Forward, ZeroStep::ForwardGather, k);
    for (int k = 0; k + 1 < m; ++k) {
        if (stage >= 3)
            add(sharding::CollectiveKind::AllGather, options.parameterBytes, Phase::Backward, ZeroStep::BackwardGather,
                k);
        add(sharding::CollectiveKind::ReduceScatter, options.gradientBytes, Phase::Backward, ZeroStep::GradientScatter,
            k);
    }
}

} // namespace

std::vector<CollectiveCost> zeroCollectives(const ir::Tensor &parameter, const sharding::ShardingSpec &spec,
                                            const sharding::Mesh &mesh, const CostOptions &options,
                                            const std::string &op)
{
    std::vector<CollectiveCost> out;
    const int stage = options.techniques.zeroStage;
    forEachZeroCollective(parameter, spec, mesh, options,
                          [&](sharding::CollectiveKind kind, int a, std::int64_t bytes, Phase phase, ZeroStep step, int k) {
                              const std::string batch = std::to_string(k + 1);
                              const std::string reason =
                                  step == ZeroStep::ForwardGather
                                      ? "ZeRO-3: parameter gathered for the forward pass of micro-batch " + batch
                                  : step == ZeroStep::BackwardGather
                                      ? "ZeRO-3: parameter gathered for the backward pass of micro-batch " + batch
                                      : "ZeRO-" + std::to_string(stage) + ": gradient of micro-batch " + batch +
                                            " reduced to its shard";
                              out.push_back(costCollective(sharding::Collective{kind, a, bytes, parameter.name, reason},
                                                           op, phase, mesh));
                          });
    return out;
}

namespace {

// Whether ZeRO splits a weight gradient's all-reduce on `axis` into its
// halves: `parameter` stored as `stored` is replicated there and ZeRO
// shards it over the axis.
bool zeroSplitsAllReduce(const ir::Tensor &parameter, const sharding::ShardingSpec &stored, const sharding::Mesh &mesh,
                         std::size_t axis, const Techniques &techniques)
{
    return techniques.zeroStage >= 1 && parameter.role == ir::Role::Parameter && axis < mesh.axes.size() &&
           mesh.axes[axis].size > 1 && axis < stored.placements.size() && stored.placements[axis].isReplicate() &&
           zeroAxis(mesh, axis, techniques);
}

} // namespace

std::optional<std::array<CollectiveCost, 2>> zeroGradientHalves(const CollectiveCost &c, const ir::Tensor &parameter,
                                                                 const sharding::ShardingSpec &stored,
                                                                 const sharding::Mesh &mesh,
                                                                 const Techniques &techniques)
{
    if (techniques.zeroStage < 1 || c.kind != sharding::CollectiveKind::AllReduce || c.phase != Phase::Backward)
        return std::nullopt;
    const auto axis = std::find_if(mesh.axes.begin(), mesh.axes.end(), [&](const auto &a) { return a.name == c.axis; });
    if (!zeroSplitsAllReduce(parameter, stored, mesh, static_cast<std::size_t>(axis - mesh.axes.begin()), techniques))
        return std::nullopt;
    const int stage = techniques.zeroStage;
    CollectiveCost scatter = c, gather = c;
    scatter.kind = sharding::CollectiveKind::ReduceScatter;
    scatter.time = c.time / 2;
    scatter.wireBytes = c.wireBytes / 2;
    scatter.reason = c.reason + ", reduce-scattered to its ZeRO-" + std::to_string(stage) + " shard";
    gather.kind = sharding::CollectiveKind::AllGather;
    gather.time = c.time / 2;
    gather.wireBytes = c.wireBytes - scatter.wireBytes;
    if (stage >= 3) {
        gather.reason = std::string(kWeightGradientReason) +
                        "the parameter gathered again for the backward pass (ZeRO-3: the all-reduce's other half)";
    } else {
        gather.phase = Phase::Forward;
        gather.reason = std::string(kWeightGradientReason) + "the updated parameter gathered for the forward pass (ZeRO-" +
                        std::to_string(stage) + ": the all-reduce's other half)";
    }
    return std::array{scatter, gather};
}

double zeroForwardSeconds(const ir::Tensor &parameter, const sharding::ShardingSpec &from,
                          const sharding::ShardingSpec &to, const sharding::ShardingSpec &stored,
                          const sharding::Mesh &mesh, const Techniques &techniques)
{
    if (techniques.zeroStage < 1 || techniques.zeroStage > 2 || parameter.role != ir::Role::Parameter)
        return 0;
    double seconds = 0;
    sharding::forEachReshardStep(parameter, from, to, mesh, [&](const sharding::ReshardStep &c) {
        if (c.kind == sharding::CollectiveKind::AllReduce &&
            zeroSplitsAllReduce(parameter, stored, mesh, static_cast<std::size_t>(c.axis), techniques))
            seconds += collectiveTime(c.kind, c.bytes, mesh.axes[static_cast<std::size_t>(c.axis)]) / 2;
    });
    return seconds;
}

void zeroCollectiveTimes(const ir::Tensor &parameter, const sharding::ShardingSpec &spec, const sharding::Mesh &mesh,
                         const CostOptions &options, const CollectiveTimeVisit &visit)
{
    forEachZeroCollective(parameter, spec, mesh, options,
                          [&](sharding::CollectiveKind kind, int a, std::int64_t bytes, Phase phase, ZeroStep, int) {
                              const auto &axis = mesh.axes[static_cast<std::size_t>(a)];
                              visit(kind, phase, wireBytes(kind, bytes, axis.size), collectiveTime(kind, bytes, axis));
                          });
}

ParameterCharge chargeParameters(const ParameterLoad &load, const sharding::Mesh &mesh, const CostOptions &options)
{
    ParameterCharge c;
    const int stage = options.techniques.zeroStage, m = std::max(1, options.techniques.microBatches);
    auto elements = [&](int fromStage) { return stage >= fromStage ? load.zeroElements : load.localElements; };
    // Adam's update: a fixed count of FLOPs per local element, in fp32, or
    // (by the roofline, the bound it meets on every device) its parameter
    // and optimizer states read and written and its gradient read; on the
    // host when offloaded, with the gradient sent there and the parameter
    // back over the host link. Per element, so that the charge stays linear
    // in the load (a difference of loads is charged as the difference).
    c.optimizer.flops = options.optimizerFlopsPerParameter * elements(1);
    c.optimizer.compute =
        elements(1) * kernelSeconds(options.optimizerFlopsPerParameter,
                                    2 * (options.parameterBytes + options.optimizerBytes) + options.gradientBytes,
                                    ir::DType::F32, mesh);
    const bool offload = options.techniques.offloadOptimizer;
    if (offload)
        c.optimizer.compute = elements(1) / options.hostOptimizerParametersPerSecond +
                              elements(1) * (options.gradientBytes + options.parameterBytes) / options.hostBandwidth;
    // ZeRO-3 also holds one layer's parameters gathered while it computes.
    const double gathered = stage >= 3 ? load.gatheredElements : 0;
    c.memory.parameters = std::llround((elements(3) + gathered) * options.parameterBytes);
    c.memory.gradients = std::llround(elements(2) * options.gradientBytes);
    const double optimizerBytes = offload ? 0 : options.optimizerBytes;
    c.memory.optimizer = std::llround(elements(1) * optimizerBytes);
    c.unroundedBytes = (elements(3) + gathered) * options.parameterBytes + elements(2) * options.gradientBytes +
                       elements(1) * optimizerBytes;
    c.bytes = std::llround(c.unroundedBytes);
    // ZeRO's collectives beyond stage 0's (see ParameterLoad).
    const double gathers = stage >= 3 ? 2.0 * m - 1 : 0, scatters = stage >= 2 ? m - 1.0 : 0;
    c.zero.comm = gathers * load.gatherSeconds + scatters * load.scatterSeconds;
    // Every micro-batch's forward gather runs forward, the rest backward
    // (forEachZeroCollective's phases).
    c.zeroBackward = (stage >= 3 ? m - 1.0 : 0) * load.gatherSeconds + scatters * load.scatterSeconds;
    c.zero.commBytes = std::llround(gathers * load.gatherWireBytes + scatters * load.scatterWireBytes);
    c.zero.collectives = static_cast<int>(std::llround(gathers * load.gatherCalls + scatters * load.scatterCalls));
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
