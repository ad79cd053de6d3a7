#include "cli/command.h"
#include "cli/modelargs.h"

#include "ir/error.h"
#include "plan/planjson.h"
#include "analysis/explain.h"
#include "search/techniquesearch.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>

namespace tapestry::cli {

namespace {

nlohmann::ordered_json collectivesJson(const std::vector<cost::CollectiveCost> &collectives)
{
    auto list = nlohmann::ordered_json::array();
    for (const auto &c : collectives)
        list.push_back({{"op", c.op},
                        {"tensor", c.tensor},
                        {"kind", std::string(sharding::toString(c.kind))},
                        {"axis", c.axis},
                        {"phase", std::string(cost::toString(c.phase))},
                        {"bytes", c.bytes},
                        {"time_s", c.time}});
    return list;
}

nlohmann::ordered_json explanationJson(const analysis::Explanation &e)
{
    nlohmann::ordered_json j;
    j["tensor"] = e.tensor;
    j["node"] = e.node;
    j["chosen"] = e.chosen.toPlacements();
    auto alternatives = nlohmann::ordered_json::array();
    for (const auto &a : e.alternatives) {
        nlohmann::ordered_json changes = nlohmann::ordered_json::object();
        for (const auto &[name, spec] : a.changes)
            changes[name] = spec.toPlacements();
        alternatives.push_back({{"placements", a.spec.toPlacements()},
                                {"chosen", a.chosen},
                                {"step_time_delta_s", a.stepTimeDelta},
                                {"comm_delta_s", a.commDelta},
                                {"compute_delta_s", a.computeDelta},
                                {"memory_delta_bytes", a.memoryDelta},
                                {"fits_memory", a.fits},
                                {"collectives_added", collectivesJson(a.collectivesAdded)},
                                {"collectives_removed", collectivesJson(a.collectivesRemoved)},
                                {"changes", changes},
                                {"summary", a.summary}});
    }
    j["alternatives"] = alternatives;
    return j;
}

int runExplain(const Args &args)
{
    if (args.positional.size() != 2) {
        std::cerr << "tapestry-cli explain: expected PLAN and TENSOR (try 'tapestry-cli explain --help')\n";
        return BadInput;
    }
    const std::string planFile = args.positional[0], subject = args.positional[1];
    const plan::Plan p = plan::readPlanFile(planFile);
    const std::string model = args.value("--model").value_or(p.model.source);
    const auto graph = loadModelFromArgs(model, args);
    if (subject == "techniques" && !graph.findTensor(subject)) {
        // The plan's memory techniques, each with what it saves and costs.
        plan::Plan costed = p;
        plan::recostPlan(costed, graph, planFile);
        const auto reasons = search::techniqueReasons(costed, graph);
        if (args.has("--json")) {
            nlohmann::ordered_json j;
            j["techniques"] = cost::describe(costed.costOptions.techniques);
            j["reasons"] = reasons;
            std::cout << j.dump(2) << '\n';
            return Ok;
        }
        std::cout << "plan (" << p.method << ") on mesh " << p.mesh.toString() << " uses "
                  << cost::describe(costed.costOptions.techniques) << "\n";
        for (const auto &r : reasons)
            std::cout << "  " << r << "\n";
        return Ok;
    }
    analysis::Explainer explainer(graph, p, planFile);

    analysis::Explanation e;
    if (graph.findTensor(subject)) {
        e = explainer.explainTensor(subject);
    } else {
        const auto &nodes = explainer.coarse().nodes();
        auto it = std::find_if(nodes.begin(), nodes.end(), [&](const auto &n) { return n.name == subject; });
        if (it == nodes.end())
            throw TapestryError(Error{planFile, subject, "no tensor or coarse node of this name in model '" +
                                                             model + "'"});
        e = explainer.explainNode(it->id);
    }

    if (args.has("--json")) {
        std::cout << explanationJson(e).dump(2) << '\n';
        return Ok;
    }
    const ir::Tensor &tensor = graph.tensor(*graph.findTensor(e.tensor));
    std::cout << e.tensor << " " << shapeString(tensor.shape) << " " << ir::toString(tensor.role);
    if (!e.node.empty())
        std::cout << ", node " << e.node;
    std::cout << "\nplan (" << p.method << "): " << e.chosen.toPlacements() << " on mesh " << p.mesh.toString()
              << "\nalternatives, deltas against the plan:\n";
    for (const auto &a : e.alternatives)
        std::cout << (a.chosen ? "  * " : "    ") << a.summary << '\n';
    return Ok;
}

Registration explain([] {
    Command c;
    c.name = "explain";
    c.usage = "explain PLAN TENSOR [--model MODEL] [--batch B] [--seq S] [--json]";
    c.summary = "a tensor's other specs and what each would cost against the plan's choice";
    c.details = "TENSOR is a tensor name or a coarse node name (explained by its largest parameter), or\n"
                "'techniques': the plan's memory techniques, each with what it saves and costs.\n"
                "Every legal spec (per mesh axis replicated or one dim split) is costed with the rest of\n"
                "the plan kept: the tensor's node follows it, its boundary tensors stay as planned. The\n"
                "model is the one the plan records (model.source) unless --model names another; either\n"
                "way the plan's fingerprint must match it.\n";
    c.options = modelOptions();
    c.options.push_back({"--model", "MODEL", "load this model instead of the one the plan records"});
    c.options.push_back({"--json", "", "print the alternatives as one JSON object"});
    c.run = runExplain;
    return c;
}());

} // namespace
} // namespace tapestry::cli
