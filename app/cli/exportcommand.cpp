#include "cli/command.h"
#include "cli/modelargs.h"

#include "io/jsonmodel.h"
#include "ir/error.h"
#include "plan/planjson.h"
#include "export/exportjax.h"
#include "export/exportplan.h"
#include "export/exportmegatron.h"
#include "export/exporttorch.h"

#include <nlohmann/json.hpp>

#include <iostream>

namespace tapestry::cli {

namespace {

int runExport(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli export: expected one PLAN (try 'tapestry-cli export --help')\n";
        return BadInput;
    }
    const std::string planFile = args.positional[0];
    const std::string to = args.value("--to").value_or("");
    const plan::Plan p = plan::readPlanFile(planFile);
    // The exports need the model's structure (which op reads a weight, the
    // layouts around it): the plan's own source unless --model names it.
    const auto graph = loadModelFromArgs(args.value("--model").value_or(p.model.source), args);
    const std::string text = exports::exportPlanText(graph, p, planFile, to);

    using Json = nlohmann::ordered_json;
    Json summary{{"to", to}, {"plan", planFile}};
    const auto in = exports::exportInput(graph, p, planFile, to, to != "jax");
    Json axes = Json::array();
    for (std::size_t a = 0; a < p.mesh.axes.size(); ++a)
        axes.push_back(Json{{"name", p.mesh.axes[a].name},
                            {"size", p.mesh.axes[a].size},
                            {"carries", in.carries[a].toString()},
                            {"exported_as", in.axisNames[a]}});
    summary["axes"] = axes;
    if (to == "torch") {
        const auto torch = exports::torchPlan(in, planFile);
        summary["mesh_axis"] = torch.meshAxis;
        summary["mesh_dim_names"] = torch.meshDimNames;
        summary["entries"] = torch.modules.size();
    } else if (to == "megatron") {
        const auto megatron = exports::megatronArguments(in, planFile);
        summary["tensor_parallel"] = megatron.tensorParallel;
        summary["data_parallel"] = megatron.dataParallel;
        const auto tp = megatron.tensorParallelAxis;
        summary["tensor_parallel_axis"] = tp >= 0 ? Json(p.mesh.axes[static_cast<std::size_t>(tp)].name) : Json(nullptr);
        Json dataAxes = Json::array();
        for (int a : megatron.dataParallelAxes)
            dataAxes.push_back(p.mesh.axes[static_cast<std::size_t>(a)].name);
        summary["data_parallel_axes"] = dataAxes;
        summary["sequence_parallel"] = megatron.sequenceParallel;
        summary["arguments"] = megatron.arguments();
    }
    if (auto path = args.value("-o")) {
        io::writeFileAtomically(*path, text);
        summary["file"] = *path;
        if (!args.has("--json"))
            std::cout << to << " export written to " << *path << '\n';
    } else if (!args.has("--json")) {
        std::cout << text;
    }
    if (args.has("--json")) {
        if (!args.value("-o"))
            summary["text"] = text;
        std::cout << summary.dump(2) << '\n';
    }
    return Ok;
}

Registration exportCommand([] {
    Command c;
    c.name = "export";
    c.usage = "export PLAN --to torch|jax|megatron [--model MODEL] [-o FILE] [--json]";
    c.summary = "write a plan for a training framework";
    c.details = "torch: a Python file defining `plan` for parallelize_module (ColwiseParallel,\n"
                "RowwiseParallel, SequenceParallel by module name, layer indices folded into globs\n"
                "where every layer shares the style); refused where parameters are split over two\n"
                "mesh axes. Every export names the mesh's axes by what they carry: the plan's name\n"
                "where it says so (data carrying data, model carrying tensor), else what the axis\n"
                "carries (tensor, data, tensor_sequence, replicated). jax: PartitionSpecs per parameter and graph input. megatron: Megatron-LM's\n"
                "parallelism arguments, the tensor-parallel size from the axis the weights are split\n"
                "on and data parallelism on the others, whatever their names; refused naming the first parameter that Megatron-LM would\n"
                "store otherwise. The model is loaded from the plan's source unless --model names it,\n"
                "and must be the one the plan was made for.\n";
    c.options = modelOptions();
    c.options.push_back({"--to", "FORMAT", "torch, jax or megatron"});
    c.options.push_back({"--model", "MODEL", "the plan's model, where its source does not load as recorded"});
    c.options.push_back({"-o", "FILE", "write the export there (atomically) instead of stdout"});
    c.options.push_back({"--json", "", "print a summary as one JSON object (with the text when no -o)"});
    c.run = runExport;
    return c;
}());

} // namespace
} // namespace tapestry::cli
