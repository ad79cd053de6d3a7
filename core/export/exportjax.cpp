#include "export/exportjax.h"

#include "cost/activationmemory.h"
#include "cost/costoptions.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace tapestry::exports {

namespace {

bool startsWith(const std::string &s, const std::string &prefix)
{
    return s.compare(0, prefix.size(), prefix) == 0;
}

std::vector<std::string> split(const std::string &s, char by)
{
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= s.size()) {
        const std::size_t end = std::min(s.find(by, start), s.size());
        if (end > start)
            parts.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return parts;
}

bool isIndex(const std::string &atom)
{
    return !atom.empty() && std::all_of(atom.begin(), atom.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The Flax leaf name of a parameter, by what reads it.
std::string flaxLeaf(const ir::Graph &g, ir::TensorId t, const std::string &given)
{
    for (const ir::OpId c : g.tensor(t).consumers) {
        const ir::Op &op = g.op(c);
        const auto at = std::find(op.inputs.begin(), op.inputs.end(), t) - op.inputs.begin();
        if (op.type == "Gather" && at == 0)
            return "embedding";
        if ((op.type == "MatMul" || op.type == "Gemm") && g.tensor(t).shape.size() == 2)
            return "kernel";
        if (op.type == "LayerNormalization")
            return at == 1 ? "scale" : "bias";
        if (op.type == "RMSNorm")
            return "weight";
        if (op.type == "Add" && g.tensor(t).shape.size() == 1)
            return "bias";
    }
    return given;
}

// "model/layers.0/self_attn/" -> "model.layers.0.self_attn"
std::string moduleOfScope(std::string scope)
{
    while (!scope.empty() && scope.back() == '/')
        scope.pop_back();
    std::replace(scope.begin(), scope.end(), '/', '.');
    return scope;
}

// "model.layers.3.mlp:input" -> "model.layers.*.mlp:input"
std::string globOf(const std::string &key)
{
    std::string out;
    std::size_t start = 0;
    while (start <= key.size()) {
        std::size_t end = key.find_first_of(".:", start);
        if (end == std::string::npos)
            end = key.size();
        const std::string atom = key.substr(start, end - start);
        out += isIndex(atom) ? "*" : atom;
        if (end < key.size())
            out += key[end];
        start = end + 1;
    }
    return out;
}

} // namespace

JaxPlan jaxPlan(const ExportInput &in)
{
    const ir::Graph &g = in.graph;
    JaxPlan out;
    // The plan's mesh with its axes named by what each carries: the
    // PartitionSpecs below name them so.
    sharding::Mesh mesh = in.plan.mesh;
    for (std::size_t a = 0; a < mesh.axes.size(); ++a)
        mesh.axes[a].name = in.axisNames[a];
    out.meshShape = mesh.shape();
    out.meshAxisNames = in.axisNames;
    out.axisNotes = axisNotes(in);
    auto specOf = [&](ir::TensorId t) {
        return in.specs[t.index()].toPartitionSpec(static_cast<int>(g.tensor(t).shape.size()), mesh);
    };

    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::TensorId t(static_cast<std::int32_t>(i));
        const ir::Tensor &tensor = g.tensor(t);
        if (tensor.role == ir::Role::Input)
            out.inputs.push_back({tensor.name, specOf(t)});
        if (tensor.role != ir::Role::Parameter)
            continue;
        JaxParameter p{tensor.name, split(tensor.name, '.'), tensor.shape, specOf(t)};
        if (!p.path.empty())
            p.path.back() = flaxLeaf(g, t, p.path.back());
        out.parameters.push_back(p);
    }

    // The modules whose boundaries are constrained, by scope: each attention
    // layer, its children that hold linears, and the modules outside the
    // layers that hold weights.
    const auto roles = cost::recomputeRoles(g);
    std::set<std::string> layers;
    for (std::size_t o = 0; o < g.opCount(); ++o)
        if (roles[o] & cost::kScore)
            if (const auto scope = cost::layerScope(g.op(ir::OpId(static_cast<std::int32_t>(o))).name); !scope.empty())
                layers.insert(std::string(scope));
    // A weight read through a transpose (a tied LM head's embedding).
    auto isWeightView = [&](const ir::Tensor &tensor) {
        return tensor.producer.valid() && g.op(tensor.producer).type == "Transpose" &&
               g.tensor(g.op(tensor.producer).inputs[0]).role == ir::Role::Parameter;
    };
    auto readsWeight = [&](const ir::Op &op) {
        if (op.type != "MatMul" && op.type != "Gemm" && op.type != "Gather")
            return false;
        for (auto x : op.inputs) {
            const ir::Tensor &tensor = g.tensor(x);
            if ((tensor.role == ir::Role::Parameter && tensor.shape.size() == 2) || isWeightView(tensor) ||
                isFusedQkvWeight(tensor))
                return true;
        }
        return false;
    };
    std::set<std::string> modules(layers.begin(), layers.end());
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(o)));
        if (!readsWeight(op))
            continue;
        const std::string layer(cost::layerScope(op.name));
        if (!layer.empty() && layers.count(layer)) {
            const auto rest = split(op.name.substr(layer.size()), '/');
            if (rest.size() >= 3)
                modules.insert(layer + rest[0] + "/");
        } else if (const auto slash = op.name.rfind('/'); slash != std::string::npos) {
            modules.insert(op.name.substr(0, slash + 1));
        }
    }

    // Each module's activations in and out.
    struct Boundary {
        std::string key, tensor, spec;
        std::string reader;  // the linear reading `tensor` so, for a linear's input
    };
    std::vector<Boundary> boundaries;
    for (const auto &scope : modules) {
        std::vector<ir::TensorId> inputs, outputs;
        auto inside = [&](ir::OpId op) { return op.valid() && startsWith(g.op(op).name, scope); };
        for (std::size_t o = 0; o < g.opCount(); ++o) {
            const ir::OpId id(static_cast<std::int32_t>(o));
            if (!inside(id))
                continue;
            for (auto x : g.op(id).inputs) {
                const ir::Tensor &tensor = g.tensor(x);
                if (tensor.role == ir::Role::Activation && !tensor.shape.empty() && !inside(tensor.producer) &&
                    std::find(inputs.begin(), inputs.end(), x) == inputs.end())
                    inputs.push_back(x);
            }
            for (auto y : g.op(id).outputs) {
                const auto &consumers = g.tensor(y).consumers;
                const bool leaves = g.tensor(y).role == ir::Role::Output ||
                                    std::any_of(consumers.begin(), consumers.end(),
                                                [&](ir::OpId c) { return !inside(c); });
                if (leaves && !g.tensor(y).shape.empty())
                    outputs.push_back(y);
            }
        }
        const std::string module = moduleOfScope(scope);
        for (const auto &[side, tensors] : {std::pair{std::string("input"), inputs}, std::pair{std::string("output"), outputs}})
            for (std::size_t i = 0; i < tensors.size(); ++i)
                boundaries.push_back({module + ":" + side + (tensors.size() > 1 ? std::to_string(i) : ""),
                                      g.tensor(tensors[i]).name, specOf(tensors[i]), {}});
    }

    // Each linear's activation input as the linear computes on it: where the
    // plan redistributes between a module's boundary and its linears (a
    // sequence-sharded input all-gathered for column-parallel q, k and v),
    // a constraint at the boundary alone leaves XLA free to compute on the
    // shards and gather the weights instead. Keyed by the linear's module;
    // where that module is itself a boundary (an LM head outside the
    // layers), the read replaces the boundary's input, being what the
    // linear computes on.
    // The spec `op` computes on its input `t` (its strategy under the stored specs).
    auto readAs = [&](ir::OpId op, ir::TensorId t) {
        std::vector<sharding::ShardingSpec> specs;
        for (auto x : g.op(op).inputs)
            specs.push_back(in.specs[x.index()]);
        const auto strategy = sharding::resolveStrategy(g, op, specs, in.plan.mesh);
        const auto &inputs = g.op(op).inputs;
        const auto at = static_cast<std::size_t>(std::find(inputs.begin(), inputs.end(), t) - inputs.begin());
        return strategy.inputs[at];
    };
    // ... as a PartitionSpec.
    auto readSpec = [&](ir::OpId op, ir::TensorId t) {
        return readAs(op, t).toPartitionSpec(static_cast<int>(g.tensor(t).shape.size()), mesh);
    };
    auto replaceBoundary = [&](Boundary b) {
        boundaries.erase(std::remove_if(boundaries.begin(), boundaries.end(),
                                        [&](const Boundary &old) { return old.key == b.key; }),
                         boundaries.end());
        boundaries.push_back(std::move(b));
    };
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::OpId id(static_cast<std::int32_t>(o));
        const ir::Op &op = g.op(id);
        if (!readsWeight(op) || op.type == "Gather")
            continue;
        // The linear's module by its scope: "model/layers.0/self_attn/q_proj/MatMul"
        // is model.layers.0.self_attn.q_proj, a tied head's "lm_head/MatMul" lm_head.
        const auto slash = op.name.rfind('/');
        const std::string module = slash == std::string::npos ? std::string() : moduleOfScope(op.name.substr(0, slash));
        if (module.empty())
            continue;
        const bool fused = std::any_of(op.inputs.begin(), op.inputs.end(),
                                       [&](ir::TensorId x) { return isFusedQkvWeight(g.tensor(x)); });
        for (auto x : op.inputs) {
            const ir::Tensor &tensor = g.tensor(x);
            if (tensor.role != ir::Role::Activation || tensor.shape.size() < 2 || isWeightView(tensor))
                continue;
            if (!fused) {
                replaceBoundary({module + ":input", tensor.name, readSpec(id, x), op.name});
                continue;
            }
            // GPT-2's fused c_attn reads x [b, s, h] as [b, 1, s, h] (one
            // batched matmul for q, k and v); Flax's c_attn reads x itself:
            // the constraint is on x, its dims as the matmul computes on them.
            if (!tensor.producer.valid() || g.op(tensor.producer).type != "Reshape")
                continue;
            const ir::TensorId flat = g.op(tensor.producer).inputs[0];
            const auto &shape = g.tensor(flat).shape;
            if (shape.size() != 3 || tensor.shape.size() != 4 || tensor.shape[1] != 1)
                continue;
            sharding::ShardingSpec read = readAs(id, x);
            bool maps = true;
            for (auto &p : read.placements) {
                if (!p.isShard())
                    continue;
                maps = maps && p.dim != 1;  // the inserted dim of 1 is never split
                p.dim = p.dim == 0 ? 0 : p.dim - 1;
            }
            if (maps)
                replaceBoundary({module + ":input", g.tensor(flat).name,
                                 read.toPartitionSpec(static_cast<int>(shape.size()), mesh), op.name});
        }
        // Flax's c_attn writes [b, s, 3h], q, k and v side by side, where
        // the plan's [b, 3, s, h] splits each by heads: no one PartitionSpec
        // of Flax's output says that, so it is left to the kernel's specs.
        if (fused)
            continue;
        // And its output as its readers read it: a partial sum reduced, or
        // a split gathered, right after the linear as the plan does (a
        // column-split projection gathered before the heads are split out
        // of it), where it is left free XLA may carry the split on through
        // reshapes and attention. The layout the plan stores it in where
        // its readers differ.
        const ir::TensorId y = op.outputs[0];
        std::string spec, reader;
        bool agree = true;
        for (const ir::OpId c : g.tensor(y).consumers) {
            const std::string read = readSpec(c, y);
            if (reader.empty())
                spec = read, reader = g.op(c).name;
            agree = agree && read == spec;
        }
        if (reader.empty() || !agree)
            spec = specOf(y), reader.clear();
        replaceBoundary({module + ":output", g.tensor(y).name, spec, reader});
    }

    // Layer indices folded where every layer's boundary has one spec.
    std::map<std::string, std::vector<Boundary>> byGlob;
    for (const auto &b : boundaries)
        byGlob[globOf(b.key)].push_back(b);
    std::map<std::string, JaxConstraint> constraints;
    for (const auto &[glob, members] : byGlob) {
        const bool fold = members.size() >= 2 && std::all_of(members.begin(), members.end(), [&](const Boundary &b) {
                              return b.spec == members.front().spec;
                          });
        for (const auto &b : members) {
            if (b.spec.find("partial") != std::string::npos) {
                out.unconstrained.push_back(b.key + " (" + b.tensor + ": " + b.spec + ")");
                continue;
            }
            const std::string key = fold ? glob : b.key;
            constraints.emplace(key, JaxConstraint{key, b.tensor, b.spec, b.reader});
        }
    }
    for (auto &[key, c] : constraints)
        out.constraints.push_back(c);

    const cost::Techniques &t = in.plan.costOptions.techniques;
    out.microBatches = t.microBatches;
    for (const auto &kind : cost::attentionLayerKinds(g)) {
        const auto mode = cost::recomputeOf(t, kind);
        if (mode == cost::Recompute::Full)
            out.rematModules.push_back(moduleOfScope(kind));
        else if (mode == cost::Recompute::Selective)
            out.notes.push_back("selective recomputation of " + moduleOfScope(kind) +
                                ": recompute the attention scores in the backward pass (a jax.checkpoint policy "
                                "that saves the projections, not the scores)");
    }
    if (t.flashAttention)
        out.notes.push_back("flash attention: the plan keeps no s x s scores (jax.nn.dot_product_attention with "
                            "implementation=\"cudnn\", or a Pallas kernel)");
    if (t.zeroStage > 0) {
        std::string axes;
        if (t.zeroAxes)
            for (const auto &a : *t.zeroAxes)
                axes += (axes.empty() ? "" : ", ") + a;
        out.notes.push_back("ZeRO-" + std::to_string(t.zeroStage) + " over " +
                            (axes.empty() ? std::string("each parameter's replicated axes") : "axes " + axes) +
                            ": the optimizer state" + (t.zeroStage >= 2 ? ", gradients" : "") +
                            (t.zeroStage >= 3 ? " and parameters" : "") +
                            " sharded further than partition_specs; this module does not apply it");
    }
    if (t.offloadOptimizer)
        out.notes.push_back("the optimizer offloaded to the host: this module does not apply it");
    // GPT-2's fused q/k/v, held [3, h, h]: Flax's c_attn kernel is [3h, h].
    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::Tensor &w = g.tensor(ir::TensorId(static_cast<std::int32_t>(i)));
        if (isFusedQkvWeight(w)) {
            out.notes.push_back("c_attn (" + w.name + " and the other layers'): specs are of q, k and v stacked, [3, "
                                "in, out]; Flax's FlaxConv1D kernel [3 * out, in] is that with "
                                "kernel.reshape(3, out, in).transpose(0, 2, 1), and a split of out is by heads");
            break;
        }
    }
    return out;
}

namespace {

std::string pyString(const std::string &s)
{
    return "'" + s + "'";
}

std::string pyTuple(const std::vector<std::string> &items)
{
    std::string s = "(";
    for (std::size_t i = 0; i < items.size(); ++i)
        s += (i ? ", " : "") + items[i];
    return s + (items.size() == 1 ? ",)" : ")");
}

} // namespace

std::string jaxPlanPython(const JaxPlan &plan, const plan::Plan &source)
{
    std::string s;
    s += "\"\"\"A Tapestry plan as JAX runs it: the device mesh, a NamedSharding for every parameter\n"
         "and graph input, and the activation layouts the plan assumes at module boundaries and\n"
         "at each linear's input.\n\n";
    s += exportProvenance(source, "jax", plan.axisNotes);
    for (const auto &left : plan.unconstrained)
        s += "Not constrained (a pending sum): " + left + "\n";
    for (const auto &note : plan.notes)
        s += "Note: " + note + "\n";
    s += "\nIn the training script:\n"
         "    mesh = make_mesh()                                   # jax.devices(), row-major\n"
         "    params = jax.device_put(params, param_shardings(params, mesh))\n"
         "    batch = {k: jax.device_put(v, input_shardings(mesh)[k]) for k, v in batch.items()}\n"
         "    # in the model's code, where it has the activation:\n"
         "    x = constrain(x, \"model.layers.0.self_attn:input\", mesh)\n"
         "    # and each linear's input as it reads it, before the projection:\n"
         "    q = q_proj(constrain(x, \"model.layers.0.self_attn.q_proj:input\", mesh))\n"
         "    # the layers remat_modules names under jax.checkpoint; gradients accumulated\n"
         "    # over micro_batches slices of the global batch\n"
         "\"\"\"\n";
    s += "from collections.abc import Mapping\n\n"
         "import jax\n"
         "import numpy as np\n"
         "from jax.sharding import Mesh, NamedSharding\n"
         "from jax.sharding import PartitionSpec as P\n\n";
    std::vector<std::string> shape, names;
    for (int n : plan.meshShape)
        shape.push_back(std::to_string(n));
    for (const auto &n : plan.meshAxisNames)
        names.push_back(pyString(n));
    s += "mesh_shape = " + pyTuple(shape) + "\n";
    s += "mesh_axis_names = " + pyTuple(names) + "\n";
    s += "# Every parameter's PartitionSpec, by the plan's (torch-style) name.\n";
    s += "partition_specs = {\n";
    for (const auto &p : plan.parameters)
        s += "    " + pyString(p.name) + ": " + p.spec + ",\n";
    s += "}\n";
    s += "# The graph inputs' PartitionSpecs.\n";
    s += "input_specs = {\n";
    for (const auto &[name, spec] : plan.inputs)
        s += "    " + pyString(name) + ": " + spec + ",\n";
    s += "}\n";
    s += "# The same parameters by their path in a Flax parameter tree (flax.linen, Hugging Face's\n"
         "# Flax models: kernels [in, out], embedding tables [vocab, hidden]), and their shapes.\n";
    s += "flax_paths = {\n";
    for (const auto &p : plan.parameters) {
        std::vector<std::string> path;
        for (const auto &atom : p.path)
            path.push_back(pyString(atom));
        s += "    " + pyString(p.name) + ": " + pyTuple(path) + ",\n";
    }
    s += "}\n";
    s += "param_shapes = {\n";
    for (const auto &p : plan.parameters) {
        std::vector<std::string> dims;
        for (auto d : p.shape)
            dims.push_back(std::to_string(d));
        s += "    " + pyString(p.name) + ": " + pyTuple(dims) + ",\n";
    }
    s += "}\n";
    s += "# The activations at module boundaries as the plan lays them out, by \"module:side\"\n"
         "# (\"*\" for every layer), and each linear's input as the linear computes on it (where\n"
         "# the plan redistributes it between the boundary and the linear); each with the graph's\n"
         "# tensor it stands for.\n";
    s += "activation_constraints = {\n";
    for (const auto &c : plan.constraints)
        s += "    " + pyString(c.key) + ": " + c.spec + ",  # " + c.tensor +
             (c.reader.empty() ? std::string() : " as " + c.reader + " reads it") + "\n";
    s += "}\n";
    s += "# The global batch runs as this many micro-batches per optimizer step (gradient accumulation).\n";
    s += "micro_batches = " + std::to_string(plan.microBatches) + "\n";
    s += "# Layers recomputed whole in the backward pass (jax.checkpoint, flax.linen.remat).\n";
    std::vector<std::string> remat;
    for (const auto &m : plan.rematModules)
        remat.push_back(pyString(m));
    s += "remat_modules = " + pyTuple(remat) + "\n";
    s += R"PY(

def make_mesh(devices=None):
    """The plan's mesh over `devices` (jax.devices() by default), numbered row-major over
    mesh_shape as the plan numbers devices."""
    devices = list(jax.devices() if devices is None else devices)
    count = int(np.prod(mesh_shape))
    if len(devices) != count:
        raise ValueError(f"the plan's mesh {mesh_shape} needs {count} devices, got {len(devices)}")
    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    return Mesh(grid.reshape(mesh_shape), mesh_axis_names)


def param_shardings(params, mesh, strict=True):
    """A NamedSharding for every leaf of a Flax parameter tree (nested mappings, with or
    without a top-level "params"), as a tree of the same structure for jax.device_put.
    Raises ValueError for a leaf whose shape is not the plan's, and with `strict` KeyError
    for leaves the plan does not have and plan parameters the tree lacks; without it those
    leaves are replicated."""
    by_path = {path: name for name, path in flax_paths.items()}
    unknown, seen = [], set()

    def walk(tree, path):
        out = {}
        for key, value in tree.items():
            here = path + (str(key),)
            if isinstance(value, Mapping):
                out[key] = walk(value, here)
                continue
            name = by_path.get(here) or (by_path.get(here[1:]) if here[0] == "params" else None)
            if name is None:
                unknown.append("/".join(here))
                out[key] = NamedSharding(mesh, P())
                continue
            shape = tuple(getattr(value, "shape", ()))
            if shape != param_shapes[name]:
                raise ValueError(f"{'/'.join(here)}: shape {shape}, where the plan's {name} is {param_shapes[name]}")
            seen.add(name)
            out[key] = NamedSharding(mesh, partition_specs[name])
        try:
            return type(tree)(out)
        except TypeError:
            return out

    shardings = walk(params, ())
    missing = [name for name in flax_paths if name not in seen]
    if strict and (unknown or missing):
        raise KeyError("the tree and the plan differ: not in the plan: " + (", ".join(unknown) or "none") +
                       "; not in the tree: " + (", ".join(missing) or "none"))
    return shardings


def input_shardings(mesh):
    """A NamedSharding for every graph input, by name."""
    return {name: NamedSharding(mesh, spec) for name, spec in input_specs.items()}


def activation_spec(name):
    """The PartitionSpec of the activation `name` ("model.layers.3.mlp:output"), matched
    atom by atom against activation_constraints, "*" standing for any layer index."""
    if name in activation_constraints:
        return activation_constraints[name]
    module, _, side = name.rpartition(":")
    atoms = module.split(".")
    for key, spec in activation_constraints.items():
        key_module, _, key_side = key.rpartition(":")
        key_atoms = key_module.split(".")
        if key_side == side and len(key_atoms) == len(atoms) and \
                all(k in ("*", a) for k, a in zip(key_atoms, atoms)):
            return spec
    raise KeyError(f"no activation constraint for {name}")


def constrain(x, name, mesh):
    """`x` laid out as the plan lays out the activation `name`."""
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, activation_spec(name)))
)PY";
    return s;
}

std::string jaxPartitionSpecs(const ExportInput &in)
{
    return jaxPlanPython(jaxPlan(in), in.plan);
}

} // namespace tapestry::exports
