#include "export/exporttorch.h"

#include "ir/error.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace tapestry::exports {

namespace {

bool isParameter(const ir::Graph &g, ir::TensorId t)
{
    return g.tensor(t).role == ir::Role::Parameter;
}

// "model.layers.3.mlp.experts.1.w1" -> "model.layers.*.mlp.experts.*.w1"
std::string globOf(const std::string &module)
{
    std::string out, atom;
    auto flush = [&] {
        const bool index =
            !atom.empty() && std::all_of(atom.begin(), atom.end(), [](unsigned char c) { return std::isdigit(c); });
        out += index ? "*" : atom;
        atom.clear();
    };
    for (char c : module) {
        if (c == '.') {
            flush();
            out += '.';
        } else {
            atom += c;
        }
    }
    flush();
    return out;
}

// parallelize_module's matching: atom by atom, "*" standing for any one atom.
bool globMatches(const std::string &glob, const std::string &module)
{
    std::size_t g = 0, m = 0;
    while (g <= glob.size() && m <= module.size()) {
        const std::size_t ge = std::min(glob.find('.', g), glob.size());
        const std::size_t me = std::min(module.find('.', m), module.size());
        const std::string ga = glob.substr(g, ge - g), ma = module.substr(m, me - m);
        if (ga != "*" && ga != ma)
            return false;
        if (ge == glob.size() || me == module.size())
            return ge == glob.size() && me == module.size();
        g = ge + 1;
        m = me + 1;
    }
    return false;
}

} // namespace

TorchPlan torchPlan(const ExportInput &in, const std::string &planInput)
{
    const ir::Graph &g = in.graph;
    const int axis = in.tensorParallelAxis;
    TorchPlan out;
    out.meshShape = in.plan.mesh.shape();
    out.meshDimNames = in.axisNames;
    out.axisNotes = axisNotes(in);
    if (axis < 0)
        return out;
    out.meshAxis = in.axisNames[static_cast<std::size_t>(axis)];
    out.meshAxisSize = in.plan.mesh.axes[static_cast<std::size_t>(axis)].size;
    auto fail = [&](const std::string &tensor, const std::string &problem) {
        throw TapestryError(Error{planInput, tensor, "torch: " + problem});
    };
    auto on = [&](ir::TensorId t) { return in.specs[t.index()].placements[static_cast<std::size_t>(axis)]; };
    auto layout = [&](ir::TensorId t) { return torchLayout(in.specs[t.index()], axis, g.tensor(t).shape.size()); };

    std::map<std::string, TorchModulePlan> byModule;  // unsplit modules map to an empty style
    std::map<std::string, ir::TensorId> parameters;
    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::TensorId t(static_cast<std::int32_t>(i));
        const ir::Tensor &tensor = g.tensor(t);
        if (tensor.role != ir::Role::Parameter)
            continue;
        parameters[tensor.name] = t;
        const std::string module = moduleOf(tensor.name);
        const auto p = on(t);
        if (!module.empty())
            byModule.emplace(module, TorchModulePlan{module, {}, {}, {}});
        if (!p.isShard() || tensor.shape.size() == 1)
            continue;  // 1-D parameters follow their module's style; checked below
        if (module.empty())
            fail(tensor.name, "a split parameter needs a module name (NAME.weight) for parallelize_module");
        if (tensor.shape.size() != 2)
            fail(tensor.name, "split on dim " + std::to_string(p.dim) + " of a rank-" +
                                  std::to_string(tensor.shape.size()) +
                                  " parameter; ColwiseParallel and RowwiseParallel split linear and embedding "
                                  "weights only");
        if (tensor.consumers.empty())
            continue;
        const ir::Op &op = g.op(tensor.consumers[0]);
        if (op.type != "MatMul" && op.type != "Gemm" && op.type != "Gather")
            fail(tensor.name, "split weight read by a " + op.type + "; only linear (MatMul, Gemm) and embedding "
                                                                    "(Gather) modules have a torch style");
        TorchModulePlan entry{module, p.dim == 1 ? "ColwiseParallel" : "RowwiseParallel", {}, {}};
        const bool colwise = p.dim == 1;
        for (auto x : op.inputs)
            if (x != t && !isParameter(g, x)) {
                const std::string l = layout(x);
                if (l != (colwise ? "Replicate()" : "Shard(-1)"))
                    entry.inputLayouts = l;
                break;
            }
        // The module's output: after its bias, where the bias add follows alone.
        ir::TensorId result = op.outputs[0];
        const ir::Tensor &r = g.tensor(result);
        if (r.consumers.size() == 1) {
            const ir::Op &next = g.op(r.consumers[0]);
            if (next.type == "Add")
                for (auto x : next.inputs)
                    if (isParameter(g, x) && g.tensor(x).name == module + ".bias")
                        result = next.outputs[0];
        }
        const std::string l = layout(result);
        if (l != (colwise ? "Shard(-1)" : "Replicate()"))
            entry.outputLayouts = l;
        auto &slot = byModule[module];
        if (!slot.style.empty() && !(slot == entry))
            fail(tensor.name, "module " + module + " holds weights split in two ways");
        slot = entry;
    }
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(o)));
        if ((op.type != "LayerNormalization" && op.type != "RMSNorm") || op.inputs.size() < 2 ||
            !isParameter(g, op.inputs[1]))
            continue;
        const auto p = on(op.inputs[0]);
        const std::string module = moduleOf(g.tensor(op.inputs[1]).name);
        if (!p.isShard() || module.empty())
            continue;
        if (p.dim != 1)
            fail(g.tensor(op.inputs[0]).name, "a norm computing on shards of dim " + std::to_string(p.dim) +
                                                  "; SequenceParallel splits dim 1 only");
        auto &slot = byModule[module];
        if (!slot.style.empty())
            fail(g.tensor(op.inputs[1]).name, "module " + module + " is both " + slot.style + " and a norm");
        slot = TorchModulePlan{module, "SequenceParallel", {}, {}};
    }
    // 1-D parameters as torch stores them: a ColwiseParallel bias split with
    // its outputs, every other one (row-parallel biases, norm scales) whole.
    for (const auto &[name, t] : parameters) {
        if (g.tensor(t).shape.size() != 1)
            continue;
        const auto it = byModule.find(moduleOf(name));
        const bool split = it != byModule.end() && it->second.style == "ColwiseParallel" &&
                           name == it->first + ".bias";
        if (on(t) != (split ? sharding::Placement::shard(0) : sharding::Placement::replicate()))
            fail(name, "stored " + on(t).toString() + " on axis " + in.plan.mesh.axes[static_cast<std::size_t>(axis)].name + " where torch stores it " +
                           (split ? "Shard(0)" : "Replicate()") +
                           (it != byModule.end() && !it->second.style.empty() ? " under " + it->second.style
                                                                               : std::string(" (module unsplit)")));
    }

    // Fold layer indices into globs where every module the glob matches
    // shares the entry.
    std::map<std::string, std::vector<std::string>> byGlob;
    for (const auto &[module, entry] : byModule)
        byGlob[globOf(module)].push_back(module);
    std::set<std::string> emitted;
    for (const auto &[glob, members] : byGlob) {
        const TorchModulePlan &first = byModule.at(members.front());
        bool fold = members.size() >= 2 && glob != members.front();
        for (const auto &m : members)
            fold = fold && byModule.at(m).style == first.style && byModule.at(m).inputLayouts == first.inputLayouts &&
                   byModule.at(m).outputLayouts == first.outputLayouts;
        for (const auto &[module, entry] : byModule)
            fold = fold && (globOf(module) == glob || !globMatches(glob, module));
        if (fold && !first.style.empty()) {
            out.modules.push_back(TorchModulePlan{glob, first.style, first.inputLayouts, first.outputLayouts});
            continue;
        }
        for (const auto &m : members)
            if (!byModule.at(m).style.empty())
                out.modules.push_back(byModule.at(m));
    }
    std::sort(out.modules.begin(), out.modules.end(),
              [](const TorchModulePlan &a, const TorchModulePlan &b) { return a.module < b.module; });
    return out;
}

std::string torchPlanPython(const TorchPlan &plan, const plan::Plan &source)
{
    std::string s;
    s += "# PyTorch tensor-parallel plan for torch.distributed.tensor.parallel.parallelize_module,\n";
    s += "# exported by Tapestry (tapestry-cli export --to torch) from a tapestry.plan.\n";
    s += "# model: " + source.model.source + " (" + source.model.fingerprint + "), method " + source.method +
         ", mesh " + source.mesh.toString() + "\n";
    s += "# Mesh axes, named by what each carries:\n";
    for (const auto &note : plan.axisNotes)
        s += "#   " + note + "\n";
    if (plan.meshAxis.empty()) {
        s += "# No parameter is split: the plan below is empty.\n";
    } else {
        s += "# Apply on the 1-D device mesh of axis \"" + plan.meshAxis + "\" (" + std::to_string(plan.meshAxisSize) +
             " devices): parallelize_module(model, mesh[tp_mesh_dim], plan)\n";
    }
    s += "# mesh = device_mesh(device_type)  (below: the mesh with the tensor-parallel axis innermost)\n";
    s += "from torch.distributed.tensor import Partial, Replicate, Shard\n";
    s += "from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel\n\n";
    std::string shape, names;
    for (std::size_t a = 0; a < plan.meshShape.size(); ++a) {
        shape += std::to_string(plan.meshShape[a]) + ", ";
        names += "\"" + plan.meshDimNames[a] + "\", ";
    }
    s += "mesh_shape = (" + shape + ")\n";
    s += "mesh_dim_names = (" + names + ")\n";
    s += "tp_mesh_dim = " + (plan.meshAxis.empty() ? std::string("None") : "\"" + plan.meshAxis + "\"") + "\n";
    s += "plan = {\n";
    for (const auto &m : plan.modules) {
        std::string args;
        if (!m.inputLayouts.empty())
            args += "input_layouts=" + m.inputLayouts;
        if (!m.outputLayouts.empty())
            args += (args.empty() ? "" : ", ") + std::string("output_layouts=") + m.outputLayouts;
        s += "    \"" + m.module + "\": " + m.style + "(" + args + "),\n";
    }
    s += "}\n";
    // parallelize_module refuses a tensor-parallel mesh that is not the
    // innermost dim of its parent, so an outer tensor-parallel axis is
    // moved last, each axis keeping the ranks the plan groups on it.
    s += "\n\n"
         "def device_mesh(device_type):\n"
         "    \"\"\"The plan's device mesh, ranks numbered row-major over mesh_shape as the plan\n"
         "    numbers devices, with the tensor-parallel axis moved innermost (parallelize_module\n"
         "    requires it); every axis groups the same ranks as in the plan.\"\"\"\n"
         "    import torch\n"
         "    from torch.distributed.device_mesh import DeviceMesh\n"
         "    dims = range(len(mesh_shape))\n"
         "    order = [d for d in dims if mesh_dim_names[d] != tp_mesh_dim] + \\\n"
         "        [d for d in dims if mesh_dim_names[d] == tp_mesh_dim]\n"
         "    ranks = torch.arange(torch.Size(mesh_shape).numel()).reshape(mesh_shape).permute(order)\n"
         "    return DeviceMesh(device_type, ranks, mesh_dim_names=tuple(mesh_dim_names[d] for d in order))\n";
    return s;
}

} // namespace tapestry::exports
