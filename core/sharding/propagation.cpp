#include "sharding/propagation.h"

#include "ir/error.h"
#include "sharding/strategy.h"

namespace tapestry::sharding {

ShardingSpec storedSpec(ShardingSpec spec, const ir::Shape &shape, const Mesh &mesh, PartialResolution partial)
{
    for (std::size_t a = 0; a < spec.placements.size(); ++a) {
        Placement &p = spec.placements[a];
        if (!p.isPartial())
            continue;
        p = Placement::replicate();
        if (partial == PartialResolution::ShardSequence && !shape.empty()) {
            ShardingSpec trial = spec;
            trial.placements[a] = Placement::shard(shape.size() >= 3 ? 1 : 0);
            if (trial.holds(shape, mesh))
                p = trial.placements[a];
        }
    }
    return spec;
}

std::vector<ShardingSpec> propagateSpecs(const ir::Graph &graph, const Mesh &mesh,
                                         const std::map<ir::TensorId, ShardingSpec> &fixed,
                                         PartialResolution partial)
{
    std::vector<ShardingSpec> specs(graph.tensorCount(), ShardingSpec::replicated(mesh.rank()));
    for (const auto &[t, spec] : fixed)
        specs[t.index()] = spec;
    const auto order = graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{graph.name, {}, "the graph has a cycle; specs cannot be propagated"});
    for (ir::OpId id : *order) {
        const ir::Op &op = graph.op(id);
        std::vector<ShardingSpec> inputs;
        for (auto t : op.inputs)
            inputs.push_back(specs[t.index()]);
        const OpStrategy s = resolveStrategy(graph, id, inputs, mesh);
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::TensorId t = op.outputs[o];
            if (fixed.count(t))
                continue;
            const ShardingSpec spec = storedSpec(s.outputs[o], graph.tensor(t).shape, mesh, partial);
            specs[t.index()] = spec;
        }
    }
    return specs;
}

} // namespace tapestry::sharding
