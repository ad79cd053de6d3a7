#include "export/exportplan.h"

#include "ir/error.h"
#include "export/exportaxis.h"
#include "export/exportjax.h"
#include "export/exportmegatron.h"
#include "export/exporttorch.h"

namespace tapestry::exports {

std::string exportPlanText(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput,
                           const std::string &format)
{
    if (format != "torch" && format != "jax" && format != "megatron")
        throw TapestryError(Error{"--to", {}, format.empty() ? std::string("is required (torch, jax, megatron)")
                                                             : "unknown format '" + format + "' (known: torch, jax, megatron)"});
    if (plan.pipeline && format == "torch")
        return torchPipelinePython(graph, plan, planInput);
    if (plan.pipeline && format != "megatron")
        throw TapestryError(Error{planInput, "$.pipeline",
                                  format + ": the plan runs " + std::to_string(plan.pipeline->stages) +
                                      " pipeline stages, which the " + format +
                                      " export does not split the model into yet; export it for megatron or torch"});
    const auto in = exportInput(graph, plan, planInput, format, format != "jax");
    if (format == "torch")
        return torchPlanPython(torchPlan(in, planInput), plan);
    if (format == "jax")
        return jaxPartitionSpecs(in);
    std::string text;
    for (const auto &a : megatronArguments(in, planInput).arguments())
        text += (text.empty() ? "" : " ") + a;
    return text + "\n";
}

} // namespace tapestry::exports
