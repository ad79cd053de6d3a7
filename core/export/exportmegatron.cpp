#include "export/exportmegatron.h"

#include "ir/error.h"
#include "search/referenceplan.h"
#include "search/techniquesearch.h"

namespace tapestry::exports {

std::vector<std::string> MegatronArguments::arguments() const
{
    std::vector<std::string> a{"--tensor-model-parallel-size", std::to_string(tensorParallel),
                               "--pipeline-model-parallel-size", "1"};
    if (sequenceParallel)
        a.push_back("--sequence-parallel");
    if (techniques.flashAttention)
        a.push_back("--use-flash-attn");
    if (techniques.recompute == cost::Recompute::Selective)
        a.insert(a.end(), {"--recompute-granularity", "selective"});
    else if (techniques.recompute == cost::Recompute::Full)
        a.insert(a.end(), {"--recompute-granularity", "full", "--recompute-method", "uniform",
                           "--recompute-num-layers", "1"});
    if (techniques.zeroStage == 1)
        a.push_back("--use-distributed-optimizer");
    else if (techniques.zeroStage >= 2)
        a.insert(a.end(), {"--use-megatron-fsdp", "--data-parallel-sharding-strategy",
                           techniques.zeroStage == 2 ? "optim_grads" : "optim_grads_params"});
    if (techniques.offloadOptimizer)
        a.push_back("--optimizer-cpu-offload");
    if (globalBatch > 0)
        a.insert(a.end(), {"--micro-batch-size", std::to_string(microBatchSize), "--global-batch-size",
                           std::to_string(globalBatch)});
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
    out.techniques = in.plan.costOptions.techniques;
    if (const std::int64_t batch = search::modelBatch(g); batch > 0) {
        const std::int64_t per = static_cast<std::int64_t>(out.dataParallel) * out.techniques.microBatches;
        if (batch % per != 0)
            throw TapestryError(Error{planInput, {}, "megatron: the global batch of " + std::to_string(batch) +
                                                         " does not split into " + std::to_string(out.dataParallel) +
                                                         " data-parallel ranks x " +
                                                         std::to_string(out.techniques.microBatches) +
                                                         " micro-batches"});
        out.globalBatch = batch;
        out.microBatchSize = batch / per;
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
