#include "export/exportmegatron.h"

#include "ir/error.h"
#include "search/referenceplan.h"

namespace tapestry::exports {

std::vector<std::string> MegatronArguments::arguments() const
{
    std::vector<std::string> a{"--tensor-model-parallel-size", std::to_string(tensorParallel),
                               "--pipeline-model-parallel-size", "1"};
    if (sequenceParallel)
        a.push_back("--sequence-parallel");
    return a;
}

MegatronArguments megatronArguments(const ExportInput &in, const std::string &planInput)
{
    const ir::Graph &g = in.graph;
    const auto &mesh = in.plan.mesh;
    MegatronArguments out;
    out.dataParallel = mesh.deviceCount();
    out.tensorParallelAxis = in.tensorParallelAxis;
    for (std::size_t a = 0; a < mesh.axes.size(); ++a) {
        if (static_cast<int>(a) == in.tensorParallelAxis)
            continue;
        if (in.carries[a].sequence)
            throw TapestryError(Error{planInput, {}, "megatron: axis " + mesh.axes[a].name + " carries " +
                                                         in.carries[a].toString() +
                                                         "; Megatron-LM runs every axis but the tensor-parallel "
                                                         "one data parallel"});
        out.dataParallelAxes.push_back(static_cast<int>(a));
    }
    std::vector<sharding::ShardingSpec> expected;
    if (in.tensorParallelAxis >= 0) {
        // Megatron-LM's layout is the megatron reference plan's, on the axis
        // the plan splits parameters over.
        sharding::Mesh reference = mesh;
        for (std::size_t a = 0; a < reference.axes.size(); ++a)
            reference.axes[a].name = static_cast<int>(a) == in.tensorParallelAxis ? "model" : "data" + std::to_string(a);
        plan::Plan megatron;
        try {
            megatron = search::referencePlan(g, in.plan.model.source, reference, search::ReferenceMethod::Megatron);
        } catch (const TapestryError &e) {
            throw TapestryError(Error{planInput, {}, std::string("megatron: Megatron-LM cannot split this model: ") +
                                                         e.what()});
        }
        expected = plan::planSpecs(megatron, g, planInput);
        out.tensorParallel = mesh.axes[static_cast<std::size_t>(in.tensorParallelAxis)].size;
        out.dataParallel /= out.tensorParallel;
    }
    for (std::size_t t = 0; t < g.tensorCount(); ++t) {
        const ir::Tensor &tensor = g.tensor(ir::TensorId(static_cast<std::int32_t>(t)));
        if (tensor.role != ir::Role::Parameter)
            continue;
        const auto want = expected.empty() ? sharding::ShardingSpec::replicated(mesh.rank()) : expected[t];
        if (in.specs[t] != want)
            throw TapestryError(Error{planInput, tensor.name,
                                      "megatron: the plan stores it " + in.specs[t].toPlacements() +
                                          " where Megatron-LM stores it " + want.toPlacements() + " (" +
                                          std::string(toString(search::megatronRole(tensor.name))) +
                                          "); the plan is not Megatron-shaped"});
    }
    if (in.tensorParallelAxis >= 0)
        for (std::size_t o = 0; o < g.opCount(); ++o) {
            const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(o)));
            if ((op.type == "LayerNormalization" || op.type == "RMSNorm") && !op.inputs.empty()) {
                const auto &p = in.specs[op.inputs[0].index()].placements[static_cast<std::size_t>(in.tensorParallelAxis)];
                out.sequenceParallel = out.sequenceParallel || (p.isShard() && p.dim == 1);
            }
        }
    return out;
}

} // namespace tapestry::exports
