#include "sharding/legalspecs.h"

namespace tapestry::sharding {

std::vector<ShardingSpec> legalSpecs(const ir::Shape &shape, const Mesh &mesh)
{
    std::vector<ShardingSpec> specs{ShardingSpec::replicated(mesh.rank())};
    for (int a = 0; a < mesh.rank(); ++a) {
        std::vector<ShardingSpec> next;
        for (const auto &spec : specs) {
            next.push_back(spec);
            for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
                ShardingSpec n = spec;
                n.placements[static_cast<std::size_t>(a)] = Placement::shard(d);
                next.push_back(n);
            }
        }
        specs = std::move(next);
    }
    std::erase_if(specs, [&](const ShardingSpec &s) { return s.problem(shape, mesh).has_value(); });
    return specs;
}

} // namespace tapestry::sharding
