#include "cost/collectivetime.h"

#include <cmath>

namespace tapestry::cost {

double busFactor(sharding::CollectiveKind kind, int n)
{
    if (n <= 1)
        return 0;
    const double f = static_cast<double>(n - 1) / n;
    return kind == sharding::CollectiveKind::AllReduce ? 2 * f : f;
}

int ringSteps(sharding::CollectiveKind kind, int n)
{
    if (n <= 1)
        return 0;
    return kind == sharding::CollectiveKind::AllReduce ? 2 * (n - 1) : n - 1;
}

double collectiveTime(sharding::CollectiveKind kind, std::int64_t bytes, const sharding::MeshAxis &axis)
{
    double latency = axis.link.latency, bandwidth = axis.link.bandwidth;
    if (!axis.link.byKind.empty())
        if (const auto it = axis.link.byKind.find(std::string(sharding::toString(kind))); it != axis.link.byKind.end()) {
            latency = it->second.latency;
            bandwidth = it->second.bandwidth;
        }
    return latency * ringSteps(kind, axis.size) + static_cast<double>(bytes) * busFactor(kind, axis.size) / bandwidth;
}

std::int64_t wireBytes(sharding::CollectiveKind kind, std::int64_t bytes, int n)
{
    return std::llround(static_cast<double>(bytes) * busFactor(kind, n));
}

CollectiveCost costCollective(const sharding::Collective &c, const std::string &op, Phase phase,
                              const sharding::Mesh &mesh)
{
    const auto &axis = mesh.axes[static_cast<std::size_t>(c.axis)];
    return CollectiveCost{op,
                          c.tensor,
                          c.kind,
                          axis.name,
                          phase,
                          c.bytes,
                          wireBytes(c.kind, c.bytes, axis.size),
                          collectiveTime(c.kind, c.bytes, axis),
                          c.reason};
}

} // namespace tapestry::cost
