#include "export/exportaxis.h"

#include "ir/error.h"

namespace tapestry::exports {

ExportInput exportInput(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput,
                        const std::string &format, bool oneAxis)
{
    ExportInput in{graph, plan, plan::planSpecs(plan, graph, planInput), -1};
    for (std::size_t t = 0; t < graph.tensorCount(); ++t) {
        const ir::Tensor &tensor = graph.tensor(ir::TensorId(static_cast<std::int32_t>(t)));
        if (tensor.role != ir::Role::Parameter)
            continue;
        const auto &placements = in.specs[t].placements;
        for (std::size_t a = 0; a < placements.size(); ++a) {
            if (!placements[a].isShard())
                continue;
            if (in.tensorParallelAxis < 0) {
                in.tensorParallelAxis = static_cast<int>(a);
            } else if (oneAxis && in.tensorParallelAxis != static_cast<int>(a)) {
                throw TapestryError(Error{
                    planInput, tensor.name,
                    format + ": the plan splits parameters over mesh axes " +
                        plan.mesh.axes[static_cast<std::size_t>(in.tensorParallelAxis)].name + " and " +
                        plan.mesh.axes[a].name + " (this one is " + in.specs[t].toPlacements() +
                        "); a 1-D tensor-parallel plan cannot express a 2D split"});
            }
        }
    }
    return in;
}

std::string moduleOf(const std::string &parameterName)
{
    for (const std::string suffix : {".weight", ".bias"})
        if (parameterName.size() > suffix.size() &&
            parameterName.compare(parameterName.size() - suffix.size(), suffix.size(), suffix) == 0)
            return parameterName.substr(0, parameterName.size() - suffix.size());
    return {};
}

std::string torchLayout(const sharding::ShardingSpec &spec, int axis, std::size_t tensorRank)
{
    const auto &p = spec.placements[static_cast<std::size_t>(axis)];
    if (p.isShard())
        return "Shard(" + std::to_string(static_cast<std::size_t>(p.dim) + 1 == tensorRank ? -1 : p.dim) + ")";
    return p.toString();
}

} // namespace tapestry::exports
