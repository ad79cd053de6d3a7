#include "sharding/propagation.h"

#include "ir/error.h"
#include "sharding/strategy.h"

#include <algorithm>

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
    std::vector<ShardingSpec> specs(graph.tensorCount());
    std::vector<bool> isFixed(graph.tensorCount(), false);
    for (const auto &[t, spec] : fixed) {
        specs[t.index()] = spec;
        isFixed[t.index()] = true;
    }
    return propagateSpecs(graph, mesh, std::move(specs), isFixed, partial);
}

std::vector<ShardingSpec> propagateSpecs(const ir::Graph &graph, const Mesh &mesh, std::vector<ShardingSpec> specs,
                                         const std::vector<bool> &fixed, PartialResolution partial)
{
    for (std::size_t t = 0; t < specs.size(); ++t)
        if (!fixed[t])
            specs[t] = ShardingSpec::replicated(mesh.rank());
    const auto order = graph.topologicalOrder();
    if (!order)
        throw TapestryError(Error{graph.name, {}, "the graph has a cycle; specs cannot be propagated"});
    std::vector<ShardingSpec> inputs;
    for (ir::OpId id : *order) {
        const ir::Op &op = graph.op(id);
        // An op whose outputs are all fixed decides nothing: its strategy
        // is not needed here.
        if (std::all_of(op.outputs.begin(), op.outputs.end(), [&](ir::TensorId t) { return fixed[t.index()]; }))
            continue;
        inputs.clear();
        for (auto t : op.inputs)
            inputs.push_back(specs[t.index()]);
        const OpStrategy s = resolveStrategy(graph, id, inputs, mesh);
        for (std::size_t o = 0; o < op.outputs.size(); ++o) {
            const ir::TensorId t = op.outputs[o];
            if (!fixed[t.index()])
                specs[t.index()] = storedSpec(s.outputs[o], graph.tensor(t).shape, mesh, partial);
        }
    }
    return specs;
}

} // namespace tapestry::sharding
