#include "export/exportaxis.h"

#include "cost/costoptions.h"
#include "ir/error.h"

#include <algorithm>

namespace tapestry::exports {

ExportInput exportInput(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput,
                        const std::string &format, bool oneAxis)
{
    ExportInput in{graph, plan, plan::planSpecs(plan, graph, planInput), -1, {}, {}};
    in.carries = plan::axisCarries(graph, plan.mesh, in.specs);
    in.axisNames = exportAxisNames(plan.mesh, in.carries);
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

std::vector<std::string> exportAxisNames(const sharding::Mesh &mesh, const std::vector<plan::AxisCarries> &carries)
{
    std::vector<std::string> names;
    for (std::size_t a = 0; a < mesh.axes.size(); ++a) {
        const std::string &given = mesh.axes[a].name;
        const plan::AxisCarries c = a < carries.size() ? carries[a] : plan::AxisCarries{};
        std::string name = given;
        // A replicated axis does none of what a role's name promises.
        const bool keep = !plan::axisRoleFromName(given) || (!c.none() && plan::carriesMatchName(c, given));
        if (!keep) {
            name = c.toString();
            std::replace(name.begin(), name.end(), '+', '_');
        }
        if (std::find(names.begin(), names.end(), name) != names.end())
            name += std::to_string(a);
        names.push_back(name);
    }
    return names;
}

std::vector<std::string> axisNotes(const ExportInput &in)
{
    std::vector<std::string> notes;
    const auto &axes = in.plan.mesh.axes;
    for (std::size_t a = 0; a < axes.size(); ++a) {
        std::string note = "axis " + axes[a].name + " (" + std::to_string(axes[a].size) + ") carries " +
                           in.carries[a].toString();
        if (in.axisNames[a] != axes[a].name)
            note += ", exported as '" + in.axisNames[a] + "'";
        notes.push_back(note);
    }
    return notes;
}

std::string exportProvenance(const plan::Plan &source, const std::string &format,
                             const std::vector<std::string> &axisNotes)
{
    std::string s = "Exported by `tapestry-cli export --to " + format + "` from a tapestry.plan:\n";
    s += "  model " + source.model.source + " (" + source.model.fingerprint + ")\n";
    s += "  method " + source.method + ", mesh " + source.mesh.toString() + ", techniques " +
         cost::describe(source.costOptions.techniques) + "\n";
    s += "Mesh axes, named by what each carries:\n";
    for (const auto &note : axisNotes)
        s += "  " + note + "\n";
    return s;
}

std::string moduleOf(const std::string &parameterName)
{
    for (const std::string suffix : {".weight", ".bias"})
        if (parameterName.size() > suffix.size() &&
            parameterName.compare(parameterName.size() - suffix.size(), suffix.size(), suffix) == 0)
            return parameterName.substr(0, parameterName.size() - suffix.size());
    return {};
}

bool isFusedQkvWeight(const ir::Tensor &parameter)
{
    const ir::Shape &s = parameter.shape;
    return parameter.role == ir::Role::Parameter && s.size() == 3 && s[0] == 3 &&
           parameter.name.ends_with("c_attn.weight");
}

bool isFusedQkvBias(const ir::Tensor &parameter)
{
    const ir::Shape &s = parameter.shape;
    return parameter.role == ir::Role::Parameter && s.size() == 3 && s[0] == 3 && s[1] == 1 &&
           parameter.name.ends_with("c_attn.bias");
}

std::string torchLayout(const sharding::ShardingSpec &spec, int axis, std::size_t tensorRank)
{
    const auto &p = spec.placements[static_cast<std::size_t>(axis)];
    if (p.isShard())
        return "Shard(" + std::to_string(static_cast<std::size_t>(p.dim) + 1 == tensorRank ? -1 : p.dim) + ")";
    return p.toString();
}

} // namespace tapestry::exports
