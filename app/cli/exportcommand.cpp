#include "cli/command.h"
#include "cli/modelargs.h"

#include "io/files.h"
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
        summary["data_axes"] = torch.dataAxes;
        summary["fsdp_axes"] = torch.fsdpAxes;
        summary["loss_parallel"] = torch.lossParallel;
        summary["checkpointed"] = torch.checkpointModules;
        summary["notes"] = torch.notes;
        summary["collectives"] = torch.collectives;  // per phase and kind, as the module issues them
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
        const auto &m = megatron.model;
        summary["model"] = Json{{"layers", m.layers},
                                {"hidden", m.hidden},
                                {"ffn_hidden", m.ffnHidden},
                                {"heads", m.heads},
                                {"query_groups", m.queryGroups},
                                {"vocab", m.vocab},
                                {"seq_length", m.seqLength},
                                {"max_positions", m.maxPositions},
                                {"normalization", m.normalization},
                                {"position_embedding", m.positionEmbedding},
                                {"swiglu", m.swiglu},
                                {"untied_output", m.untiedOutput},
                                {"dtype", std::string(ir::toString(m.dtype))}};
        summary["micro_batch_size"] = megatron.microBatchSize;
        summary["global_batch_size"] = megatron.globalBatch;
        summary["arguments"] = megatron.arguments();
        summary["notes"] = megatron.notes;
        if (!args.has("--json"))
            for (const auto &note : megatron.notes)
                std::cerr << "note: " << note << '\n';
    } else if (to == "jax") {
        const auto jax = exports::jaxPlan(in);
        summary["mesh_axis_names"] = jax.meshAxisNames;
        summary["parameters"] = jax.parameters.size();
        summary["inputs"] = jax.inputs.size();
        summary["activation_constraints"] = jax.constraints.size();
        summary["unconstrained"] = jax.unconstrained;
        summary["micro_batches"] = jax.microBatches;
        summary["remat_modules"] = jax.rematModules;
        summary["notes"] = jax.notes;
    }
    if (auto path = args.value("-o")) {
        io::writeOutputFile(*path, text);
        summary["file"] = *path;
        if (!args.has("--json") && *path != "-")
            std::cout << to << " export written to " << *path << '\n';
    } else if (!args.has("--json")) {
        std::cout << text;
    }
    if (args.has("--json")) {
        if (!args.value("-o"))
            summary["text"] = text;
        args.report() << summary.dump(2) << '\n';
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
                "carries (tensor, data, tensor_sequence, replicated).\n"
                "jax: a Python module with make_mesh(devices=None) (jax.sharding.Mesh, row-major as\n"
                "the plan numbers devices), param_shardings(params, mesh) (a NamedSharding per leaf\n"
                "of a Flax parameter tree: kernels, embeddings, norm scales by their Flax paths),\n"
                "input_shardings(mesh), activation_constraints and constrain(x, name, mesh)\n"
                "(with_sharding_constraint at the residual stream, attention and MLP boundaries).\n"
                "megatron: the arguments of a pretrain_gpt.py job on one line: tensor-parallel size\n"
                "from the axis the weights are split on and data parallelism on the others, whatever\n"
                "their names; --sequence-parallel; the model's shape read from the graph (layers,\n"
                "hidden, ffn, heads and query groups, SwiGLU, norm, positions, untied head, biases,\n"
                "dtype); micro- and global batch; attention backend, recomputation, distributed\n"
                "optimizer (ZeRO-1/2) or Megatron-FSDP (ZeRO-3), optimizer offload. What the job\n"
                "must add (the tokenizer's vocabulary, a rotary base) is printed as notes on stderr.\n"
                "Refused naming the first tensor Megatron-LM would store otherwise, the batch split\n"
                "on the tensor-parallel axis, or what pretrain_gpt.py cannot build (encoder-decoder,\n"
                "post-norm, mixture of experts).\n"
                "The model is loaded from the plan's source unless --model names it, and must be the\n"
                "one the plan was made for.\n";
    c.options = modelOptions();
    c.options.push_back({"--to", "FORMAT", "torch, jax or megatron"});
    c.options.push_back({"--model", "MODEL", "the plan's model, where its source does not load as recorded"});
    c.options.push_back({"-o", "FILE", "write the export there (whole or not at all) instead of stdout"});
    c.options.push_back({"--json", "", "print a summary as one JSON object (with the text when no -o)"});
    c.run = runExport;
    return c;
}());

} // namespace
} // namespace tapestry::cli
