#include "export/exporttorch.h"

#include "cost/activationmemory.h"
#include "cost/costmodel.h"
#include "ir/error.h"
#include "sharding/strategy.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

namespace tapestry::exports {

namespace {

bool isParameter(const ir::Graph &g, ir::TensorId t)
{
    return g.tensor(t).role == ir::Role::Parameter;
}

bool isIndex(const std::string &atom)
{
    return !atom.empty() && std::all_of(atom.begin(), atom.end(), [](unsigned char c) { return std::isdigit(c); });
}

std::vector<std::string> atomsOf(const std::string &module)
{
    std::vector<std::string> atoms;
    std::size_t start = 0;
    while (start <= module.size() && !module.empty()) {
        const std::size_t end = std::min(module.find('.', start), module.size());
        atoms.push_back(module.substr(start, end - start));
        start = end + 1;
    }
    return atoms;
}

// "model.layers.3.mlp.experts.1.w1" -> "model.layers.*.mlp.experts.*.w1"
std::string globOf(const std::string &module)
{
    std::string out;
    for (const auto &atom : atomsOf(module))
        out += (out.empty() ? "" : ".") + (isIndex(atom) ? std::string("*") : atom);
    return out;
}

// parallelize_module's matching: atom by atom, "*" standing for any one atom.
bool globMatches(const std::string &glob, const std::string &module)
{
    const auto g = atomsOf(glob), m = atomsOf(module);
    if (g.size() != m.size())
        return false;
    for (std::size_t i = 0; i < g.size(); ++i)
        if (g[i] != "*" && g[i] != m[i])
            return false;
    return true;
}

// "model.layers.0.self_attn.q_proj" -> "model.layers.0.self_attn"
std::string parentOf(const std::string &module)
{
    const auto dot = module.rfind('.');
    return dot == std::string::npos ? std::string() : module.substr(0, dot);
}

// The scope of a module's ops: "model.layers.0.self_attn" -> "model/layers.0/self_attn/"
// (the graph keeps an index with the name before it, as PyTorch's exporter
// scopes a ModuleList's children).
std::string scopeOf(const std::string &module)
{
    std::string scope;
    for (const auto &atom : atomsOf(module)) {
        if (isIndex(atom) && !scope.empty()) {
            scope.pop_back();
            scope += ".";
        }
        scope += atom + "/";
    }
    return scope;
}

// A layer kind's scope pattern as a module glob: "model/layers.*/" -> "model.layers.*".
std::string moduleGlobOfKind(std::string kind)
{
    while (!kind.empty() && kind.back() == '/')
        kind.pop_back();
    std::replace(kind.begin(), kind.end(), '/', '.');
    return kind;
}

bool startsWith(const std::string &s, const std::string &prefix)
{
    return s.compare(0, prefix.size(), prefix) == 0;
}

// A split module as torch runs it: the op its weight feeds, the activation
// it reads and the tensor it returns.
struct SplitModule {
    std::string module;
    ir::OpId op;
    ir::TensorId input;   // invalid for an embedding's token ids
    ir::TensorId result;  // after the module's bias add
    bool colwise = false;
};

} // namespace

TorchPlan torchPlan(const ExportInput &in, const std::string &planInput)
{
    const ir::Graph &g = in.graph;
    const sharding::Mesh &mesh = in.plan.mesh;
    const int axis = in.tensorParallelAxis;
    const auto ax = static_cast<std::size_t>(axis);
    const cost::Techniques &techniques = in.plan.costOptions.techniques;
    TorchPlan out;
    out.meshShape = mesh.shape();
    out.meshDimNames = in.axisNames;
    out.axisNotes = axisNotes(in);
    out.zeroStage = techniques.zeroStage;
    out.microBatches = techniques.microBatches;
    auto fail = [&](const std::string &tensor, const std::string &problem) {
        throw TapestryError(Error{planInput, tensor, "torch: " + problem});
    };
    if (techniques.offloadOptimizer)
        fail({}, "the optimizer offloaded to the host has no torch form here; plan without --offload-optimizer");

    // The batch: graph inputs stored whole (each rank slices its share) or
    // split over their first dim; a data axis is one the activations are
    // split over their first dim on, never the tensor-parallel axis (its
    // ranks read one batch).
    std::set<std::size_t> dataAxes;
    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::TensorId t(static_cast<std::int32_t>(i));
        const ir::Role role = g.tensor(t).role;
        if (role == ir::Role::Parameter)
            continue;
        const auto &placements = in.specs[i].placements;
        for (std::size_t a = 0; a < placements.size(); ++a) {
            if (!placements[a].isShard())
                continue;
            if (role == ir::Role::Input && placements[a].dim != 0)
                fail(g.tensor(t).name, "split on dim " + std::to_string(placements[a].dim) + " over axis " +
                                           mesh.axes[a].name +
                                           "; a torch job gives each rank whole samples of its share of the batch");
            if (placements[a].dim != 0 || static_cast<int>(a) == axis)
                continue;
            dataAxes.insert(a);
        }
        if (axis >= 0 && role == ir::Role::Input && in.specs[i].placements[ax] == sharding::Placement::shard(0))
            fail(g.tensor(t).name, "the batch split over axis " + mesh.axes[ax].name +
                                       ", which also splits parameters; torch's tensor-parallel ranks read one batch");
    }
    for (std::size_t a : dataAxes)
        out.dataAxes.push_back(in.axisNames[a]);
    if (axis >= 0) {
        out.meshAxis = in.axisNames[ax];
        out.meshAxisSize = mesh.axes[ax].size;
    }

    // The plan's collectives per step: what the exported module must issue.
    const cost::PlanCost cost = cost::evaluatePlan(g, mesh, in.specs, in.plan.costOptions);
    for (const auto &c : cost.collectives)
        ++out.collectives[std::string(cost::toString(c.phase))][std::string(sharding::toString(c.kind))];
    // ZeRO shards over the axes the plan names (else every other axis):
    // fully_shard's mesh.
    std::set<std::size_t> fsdpAxes;
    if (out.zeroStage >= 1)
        for (std::size_t a = 0; a < mesh.axes.size(); ++a) {
            const auto &names = techniques.zeroAxes;
            if (static_cast<int>(a) != axis && mesh.axes[a].size > 1 &&
                (!names || std::find(names->begin(), names->end(), mesh.axes[a].name) != names->end()))
                fsdpAxes.insert(a);
        }
    for (std::size_t a : fsdpAxes)
        out.fsdpAxes.push_back(in.axisNames[a]);
    std::set<std::string> lossOutputs;
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(o)));
        if (op.type == "SoftmaxCrossEntropyLoss")
            for (auto x : op.outputs)
                lossOutputs.insert(g.tensor(x).name);
    }
    // Over the other axes torch moves parameters and their gradients only:
    // data parallelism's gradient averaging, ZeRO's gathers and scatters.
    std::map<std::string, std::size_t> axisByName;
    for (std::size_t a = 0; a < mesh.axes.size(); ++a)
        axisByName[mesh.axes[a].name] = a;
    // Parameters, and the views of them another module reads (a tied LM
    // head's transposed embedding), by name.
    std::map<std::string, ir::Role> roleByName;
    std::map<std::string, ir::TensorId> tensorByName;
    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::Tensor &tensor = g.tensor(ir::TensorId(static_cast<std::int32_t>(i)));
        tensorByName.emplace(tensor.name, ir::TensorId(static_cast<std::int32_t>(i)));
        const bool view = tensor.producer.valid() && g.op(tensor.producer).type == "Transpose" &&
                          isParameter(g, g.op(tensor.producer).inputs[0]);
        roleByName[tensor.name] = view ? ir::Role::Parameter : tensor.role;
    }
    for (const auto &c : cost.collectives) {
        const auto a = axisByName.find(c.axis);
        if (a == axisByName.end() || static_cast<int>(a->second) == axis)
            continue;
        const auto role = roleByName.find(c.tensor);
        if (role != roleByName.end() && role->second == ir::Role::Parameter &&
            (dataAxes.count(a->second) || fsdpAxes.count(a->second)))
            continue;
        // A tensor computed without the batch (a position embedding's
        // lookup) whose gradient the plan sums over the data axis: torch
        // averages its parameter's gradient instead, one all-reduce as well.
        if (dataAxes.count(a->second) && c.kind == sharding::CollectiveKind::AllReduce &&
            startsWith(c.reason, "gradient: partial sum") && tensorByName.count(c.tensor) &&
            in.specs[tensorByName.at(c.tensor).index()].placements[a->second].isReplicate())
            continue;
        // The loss averaged over the data axes, as a job reports it (global_loss()).
        if (role != roleByName.end() && role->second != ir::Role::Parameter && dataAxes.count(a->second) &&
            lossOutputs.count(c.tensor))
            continue;
        fail(c.tensor, "the plan " + std::string(sharding::toString(c.kind)) + "s it over axis " + c.axis + " at " +
                           c.op + " (" + c.reason + "); over a data axis torch moves only parameters and gradients");
    }

    // Opaque strategies, resolved on demand from the stored specs.
    std::map<std::int32_t, sharding::OpStrategy> strategies;
    auto strategy = [&](ir::OpId op) -> const sharding::OpStrategy & {
        auto it = strategies.find(op.value);
        if (it == strategies.end()) {
            std::vector<sharding::ShardingSpec> inputs;
            for (auto x : g.op(op).inputs)
                inputs.push_back(in.specs[x.index()]);
            it = strategies.emplace(op.value, sharding::resolveStrategy(g, op, inputs, mesh)).first;
        }
        return it->second;
    };
    auto layout = [&](const sharding::ShardingSpec &spec, ir::TensorId t) {
        return torchLayout(spec, axis, g.tensor(t).shape.size());
    };
    auto stored = [&](ir::TensorId t) { return layout(in.specs[t.index()], t); };
    // The layout `op` computes on its input `t`.
    auto readAs = [&](ir::OpId op, ir::TensorId t) {
        const auto &s = strategy(op);
        const auto &inputs = g.op(op).inputs;
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (inputs[i] == t)
                return layout(s.inputs[i], t);
        return stored(t);
    };

    // Activation recomputation: a layer recomputed whole is checkpointed;
    // selective recomputation has no module of its own in Hugging Face's
    // attention unless flash attention (SDPA's kernels) does it.
    for (const auto &kind : cost::attentionLayerKinds(g)) {
        const auto mode = cost::recomputeOf(techniques, kind);
        if (mode == cost::Recompute::Full)
            out.checkpointModules.push_back(moduleGlobOfKind(kind));
        else if (mode == cost::Recompute::Selective && !techniques.flashAttention)
            fail(kind, "selective recomputation of the attention scores: Hugging Face's attention has no module "
                       "for the core alone; plan with --flash-attention (SDPA recomputes the scores) or full "
                       "recomputation");
    }
    // ZeRO: fully_shard on every module that holds parameters, so that
    // each is gathered and its gradient scattered on its own, as the plan
    // charges them.
    if (out.zeroStage >= 1 && !fsdpAxes.empty()) {
        std::set<std::string> holders;
        for (std::size_t i = 0; i < g.tensorCount(); ++i) {
            const ir::Tensor &tensor = g.tensor(ir::TensorId(static_cast<std::int32_t>(i)));
            if (tensor.role == ir::Role::Parameter && !moduleOf(tensor.name).empty())
                holders.insert(globOf(moduleOf(tensor.name)));
        }
        out.shardedModules.assign(holders.begin(), holders.end());
    }

    if (axis < 0)
        return out;

    // Collectives torch issues, by (op, tensor) as the plan charges them.
    std::set<std::pair<std::string, std::string>> issued;
    auto issues = [&](ir::OpId op, ir::TensorId t) { issued.insert({g.op(op).name, g.tensor(t).name}); };

    std::map<std::string, TorchModulePlan> byModule;  // unsplit modules map to an empty style
    std::vector<SplitModule> split;
    std::set<std::int32_t> biasAdds;  // part of their module
    std::map<std::int32_t, std::string> moduleByOp;  // the ops of split modules
    std::set<std::int32_t> weightViews;              // tied weights as another module reads them
    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::TensorId t(static_cast<std::int32_t>(i));
        const ir::Tensor &tensor = g.tensor(t);
        if (tensor.role != ir::Role::Parameter)
            continue;
        const std::string module = moduleOf(tensor.name);
        if (!module.empty())
            byModule.emplace(module, TorchModulePlan{module, {}, {}, {}, {}, {}, true});
        const auto p = in.specs[i].placements[ax];
        if (!p.isShard() || tensor.shape.size() == 1 || isFusedQkvBias(tensor))
            continue;  // biases follow their module's style; checked below
        if (module.empty() && tensor.name.ends_with("in_proj_weight"))
            fail(tensor.name, "torch.nn.MultiheadAttention's fused in_proj is split by heads, and parallelize_module "
                              "splits nn.Linear and nn.Embedding modules only (replace the attention with separate "
                              "q, k and v linears, or plan with it whole)");
        if (module.empty())
            fail(tensor.name, "a split parameter needs a module name (NAME.weight) for parallelize_module");
        // Hugging Face's GPT-2 (and GPT, ImageGPT) projections are Conv1D
        // modules, weight [in, out]; GPT-2's fused c_attn is held [3, in,
        // out] (q, k and v), split by heads on its last dim.
        const std::string leaf = module.substr(module.rfind('.') + 1);
        const bool conv1d = leaf == "c_attn" || leaf == "c_fc" || leaf == "c_proj";
        const bool fused = isFusedQkvWeight(tensor);
        if (fused && p.dim != 2)
            fail(tensor.name, "a fused q/k/v weight [3, in, out] split on dim " + std::to_string(p.dim) +
                                  "; torch splits it by heads (its output features) only");
        if (!fused && tensor.shape.size() != 2)
            fail(tensor.name, "split on dim " + std::to_string(p.dim) + " of a rank-" +
                                  std::to_string(tensor.shape.size()) +
                                  " parameter; ColwiseParallel and RowwiseParallel split linear and embedding "
                                  "weights only");
        for (const ir::OpId reader : tensor.consumers) {
            // A weight read transposed by a linear elsewhere (an LM head tied
            // to the embedding) is that module's weight too, the same
            // Parameter in torch.
            ir::OpId opId = reader;
            std::string owner = module;
            auto placement = p;
            if (g.op(reader).type == "Transpose" && g.tensor(g.op(reader).outputs[0]).consumers.size() == 1) {
                const ir::TensorId transposed = g.op(reader).outputs[0];
                opId = g.tensor(transposed).consumers[0];
                std::string scope = g.op(opId).name.substr(0, g.op(opId).name.rfind('/'));
                std::replace(scope.begin(), scope.end(), '/', '.');
                owner = scope;
                placement = in.specs[transposed.index()].placements[ax];
                weightViews.insert(transposed.value);
                out.tiedParameters.push_back({owner + ".weight", tensor.name});
                byModule.emplace(owner, TorchModulePlan{owner, {}, {}, {}, {}, {}, true});
            }
            const ir::Op &op = g.op(opId);
            if (op.type != "MatMul" && op.type != "Gemm" && op.type != "Gather")
                fail(tensor.name, "split weight read by a " + op.type + "; only linear (MatMul, Gemm) and embedding "
                                                                        "(Gather) modules have a torch style");
            SplitModule m{owner, opId, {}, op.outputs[0], placement.dim == static_cast<int>(tensor.shape.size()) - 1};
            for (auto x : op.inputs)
                if (x != t && !isParameter(g, x) && (g.op(reader).type != "Transpose" || x != g.op(reader).outputs[0])) {
                    m.input = x;
                    break;
                }
            // The module's output: after its bias, where the bias add follows alone.
            const ir::Tensor &r = g.tensor(m.result);
            if (r.consumers.size() == 1) {
                const ir::Op &next = g.op(r.consumers[0]);
                if (next.type == "Add")
                    for (auto x : next.inputs)
                        if (isParameter(g, x) && g.tensor(x).name == owner + ".bias") {
                            issues(opId, m.result);
                            issues(r.consumers[0], m.result);
                            issues(r.consumers[0], next.outputs[0]);
                            biasAdds.insert(r.consumers[0].value);
                            m.result = next.outputs[0];
                        }
            }
            // One module may run twice (T5's shared embedding, the encoder's
            // and the decoder's): one style, and one output layout below.
            auto &slot = byModule[owner];
            const std::string style = m.colwise ? "ColwiseParallel" : "RowwiseParallel";
            if (!slot.style.empty() && (slot.style != style || reader == tensor.consumers.front()))
                fail(tensor.name, "module " + owner + " holds two split weights");
            slot.style = style;
            slot.conv1d = conv1d && owner == module;
            slot.parts = fused ? 3 : 1;
            moduleByOp[opId.value] = owner;
            if (g.op(reader).type == "Transpose")
                issues(reader, g.op(reader).outputs[0]);
            split.push_back(m);
        }
    }

    // What each split module returns: as stored, or as every reader reads it
    // where it is stored as produced (the redistribution moves into the
    // module, as ColwiseParallel's output_layouts does it).
    std::map<std::int32_t, std::string> returned;  // by result tensor
    std::map<std::string, std::string> returnedBy;  // output_layouts by module
    for (const auto &m : split) {
        TorchModulePlan &entry = byModule[m.module];
        const std::string produced = m.colwise ? "Shard(-1)" : "Partial()";
        std::string out = stored(m.result);
        std::set<std::string> reads;
        for (auto c : g.tensor(m.result).consumers)
            reads.insert(readAs(c, m.result));
        if (reads.size() > 1)
            fail(g.tensor(m.result).name, "read in " + std::to_string(reads.size()) +
                                              " layouts; a module returns one");
        if (reads.size() == 1 && *reads.begin() != out) {
            if (out != produced)
                fail(g.tensor(m.result).name, "stored as " + out + " and read as " + *reads.begin() +
                                                  "; a module returns one layout");
            out = *reads.begin();
            for (auto c : g.tensor(m.result).consumers)
                issues(c, m.result);
        }
        if (out == "Partial()")
            fail(g.tensor(m.result).name, "a partial sum returned by " + m.module + "; torch reduces a module's output");
        const std::string outputLayouts = out != (m.colwise ? "Shard(-1)" : "Replicate()") ? out : std::string();
        if (returnedBy.count(m.module) && returnedBy[m.module] != outputLayouts)
            fail(g.tensor(m.result).name, m.module + " returns " + out + " here and another layout where it runs "
                                                                          "again; a module returns one");
        returnedBy[m.module] = outputLayouts;
        entry.outputLayouts = outputLayouts;
        issues(m.op, m.result);
        returned[m.result.value] = out;
    }

    // The layout a tensor has in torch: a module's output as it returns it,
    // any other op's as the op produces it (torch redistributes between
    // modules only), a graph input as stored.
    auto held = [&](ir::TensorId t) {
        if (const auto it = returned.find(t.value); it != returned.end())
            return it->second;
        const ir::OpId producer = g.tensor(t).producer;
        if (!producer.valid())
            return stored(t);
        const auto &outputs = g.op(producer).outputs;
        for (std::size_t i = 0; i < outputs.size(); ++i)
            if (outputs[i] == t)
                return layout(strategy(producer).outputs[i], t);
        return stored(t);
    };
    // The module an op belongs to: the one whose weight it reads.
    auto moduleOfOp = [&](ir::OpId op) {
        if (const auto it = moduleByOp.find(op.value); it != moduleByOp.end())
            return it->second;
        for (auto x : g.op(op).inputs)
            if (isParameter(g, x) && !moduleOf(g.tensor(x).name).empty() &&
                g.tensor(x).name == moduleOf(g.tensor(x).name) + ".weight")
                return moduleOf(g.tensor(x).name);
        return std::string();
    };
    // An activation read by a module's op in a layout it does not hold is
    // redistributed at the module's input: a split module's input_layouts, a
    // PrepareModuleInput on another (a linear reading a gathered output).
    struct Reader {
        std::string module;
        ir::OpId op;
        std::string need;
    };
    std::map<std::int32_t, std::vector<Reader>> readers;  // by tensor
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::OpId opId(static_cast<std::int32_t>(o));
        const ir::Op &op = g.op(opId);
        const std::string module = moduleOfOp(opId);
        if (biasAdds.count(opId.value))
            continue;
        for (auto x : op.inputs) {
            if (isParameter(g, x) || g.tensor(x).shape.empty() || weightViews.count(x.value))
                continue;
            const std::string need = readAs(opId, x);
            if (module.empty() || op.isNorm()) {
                if (need != held(x))
                    fail(g.tensor(x).name, "held as " + held(x) + " in torch and read as " + need + " by " + op.name +
                                               ", between modules, where parallelize_module redistributes only a "
                                               "module's input or output");
                continue;
            }
            readers[x.value].push_back(Reader{module, opId, need});
        }
    }
    for (const auto &[x, group] : readers) {
        const ir::TensorId input(x);
        const std::string have = held(input);
        for (const auto &r : group) {
            issues(r.op, input);
            if (const ir::OpId producer = g.tensor(input).producer; producer.valid())
                issues(producer, input);  // stored other than produced: torch moves it at the reader
        }
        // Siblings reading one input (q, k and v; gate and up) read it
        // through their parent, redistributed once as the plan does, kept a
        // DTensor so that their gradients sum before the one collective back.
        const std::string parent = parentOf(group.front().module);
        bool shared = group.size() >= 2 && !parent.empty();
        for (const auto &r : group)
            shared = shared && parentOf(r.module) == parent && r.need == group.front().need &&
                     !byModule[r.module].style.empty() && g.op(r.op).type != "Gather";
        const std::string scope = scopeOf(parent);
        const ir::OpId producer = g.tensor(input).producer;
        shared = shared && (!producer.valid() || !startsWith(g.op(producer).name, scope));
        for (auto c : g.tensor(input).consumers)
            if (startsWith(g.op(c).name, scope))
                shared = shared && std::any_of(group.begin(), group.end(), [&](const Reader &r) { return r.op == c; });
        if (shared) {
            TorchModulePlan prepare{parent, "PrepareModuleInput", have, {}, group.front().need, {}, false};
            const auto atoms = atomsOf(parent);
            if (!atoms.empty() && atoms.back() == "self_attn")
                prepare.inputKwarg = "hidden_states";  // Hugging Face's decoder layers pass it by keyword
            auto &slot = byModule[parent];
            if (!slot.style.empty() && !(slot == prepare))
                fail(g.tensor(input).name, "module " + parent + " is both " + slot.style + " and PrepareModuleInput");
            slot = prepare;
            continue;
        }
        if (group.size() >= 2 && have != group.front().need)
            out.notes.push_back(g.tensor(input).name + " is redistributed by each of its " +
                                std::to_string(group.size()) + " readers (" + group.front().module +
                                ", ...), where the plan does it once");
        for (const auto &r : group) {
            TorchModulePlan &entry = byModule[r.module];
            const bool gather = g.op(r.op).type == "Gather";
            if (entry.style == "ColwiseParallel" || entry.style == "RowwiseParallel") {
                // An embedding reads its token ids whole; a column-parallel
                // linear its input whole, a row-parallel one split over its
                // last dim.
                const std::string want = gather || entry.style == "ColwiseParallel" ? "Replicate()" : "Shard(-1)";
                if (r.need != want)
                    fail(g.tensor(input).name, "read as " + r.need + " by " + r.module + ", which " + entry.style +
                                                   " reads as " + want);
                const std::string defaultIn = entry.style == "ColwiseParallel" ? "Replicate()" : "Shard(-1)";
                if (have != defaultIn)
                    entry.inputLayouts = have;
            } else if (have != r.need) {
                if (!entry.style.empty())
                    fail(g.tensor(input).name, "module " + r.module + " is both " + entry.style +
                                                   " and PrepareModuleInput");
                entry = TorchModulePlan{r.module, "PrepareModuleInput", have, {}, r.need, {}, true};
            }
        }
    }

    // Norms on sequence shards are SequenceParallel; their weight gradients
    // are partial sums, reduced when the optimizer reads them.
    std::map<std::int32_t, std::string> sequenceNorms;  // output tensor -> module
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::OpId opId(static_cast<std::int32_t>(o));
        const ir::Op &op = g.op(opId);
        if ((op.type != "LayerNormalization" && op.type != "RMSNorm") || op.inputs.size() < 2 ||
            !isParameter(g, op.inputs[1]))
            continue;
        const std::string on = readAs(opId, op.inputs[0]);
        const std::string module = moduleOf(g.tensor(op.inputs[1]).name);
        if (on == "Replicate()" || module.empty())
            continue;
        if (on != "Shard(1)")
            fail(g.tensor(op.inputs[0]).name,
                 "a norm computing on " + on + "; SequenceParallel splits the sequence (dim 1) only");
        auto &slot = byModule[module];
        if (!slot.style.empty())
            fail(g.tensor(op.inputs[1]).name, "module " + module + " is both " + slot.style + " and a norm");
        slot = TorchModulePlan{module, "SequenceParallel", {}, {}, {}, {}, true};
        if (!op.outputs.empty())
            sequenceNorms[op.outputs[0].value] = module;
        for (auto x : op.inputs)
            if (isParameter(g, x))
                issues(opId, x);
    }

    // The loss on vocabulary-split logits: loss_parallel, the logits kept a
    // DTensor by the module that returns them.
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::OpId opId(static_cast<std::int32_t>(o));
        const ir::Op &op = g.op(opId);
        if (op.type != "SoftmaxCrossEntropyLoss" || op.inputs.empty())
            continue;
        const ir::TensorId logits = op.inputs[0];
        const std::string on = readAs(opId, logits);
        if (on == "Replicate()")
            continue;
        if (on != "Shard(-1)")
            fail(g.tensor(logits).name, "the loss on logits split as " + on +
                                            "; torch computes it on whole or vocabulary-split logits (loss_parallel)");
        const auto m = std::find_if(split.begin(), split.end(), [&](const SplitModule &s) { return s.result == logits; });
        if (m == split.end())
            fail(g.tensor(logits).name, "vocabulary-split logits not returned by a split module; loss_parallel "
                                        "needs them as a DTensor");
        byModule[m->module].useLocalOutput = false;
        out.lossParallel = true;
        issues(opId, logits);
    }

    // Attention modules whose heads are split take local head counts; a
    // split within a head has no local form.
    std::set<std::string> attention;
    for (const auto &m : split) {
        if (!m.colwise || g.op(m.op).type == "Gather")
            continue;
        // The reshapes into heads: of the module's output, or of its parts
        // (a fused q/k/v split, each part viewed [b, s, h] first).
        std::vector<ir::OpId> reshapes;
        for (auto c : g.tensor(m.result).consumers) {
            if (g.op(c).type != "Split") {
                reshapes.push_back(c);
                continue;
            }
            for (auto part : g.op(c).outputs)
                for (auto v : g.tensor(part).consumers)
                    if (g.op(v).type == "Reshape" && !g.op(v).outputs.empty())
                        for (auto r : g.tensor(g.op(v).outputs[0]).consumers)
                            reshapes.push_back(r);
        }
        for (auto c : reshapes) {
            const ir::Op &reshape = g.op(c);
            if (reshape.type != "Reshape" || reshape.outputs.empty())
                continue;
            const ir::TensorId heads = reshape.outputs[0];
            const auto &shape = g.tensor(heads).shape;
            const auto p = in.specs[heads.index()].placements[ax];
            if (shape.size() != 4 || !p.isShard())
                continue;
            if (p.dim != 2)
                fail(g.tensor(heads).name, "heads split within a head (" + std::to_string(shape[2]) + " heads over " +
                                               std::to_string(out.meshAxisSize) + " devices); torch's attention "
                                               "runs whole heads on each rank");
            attention.insert(parentOf(m.module));
        }
    }
    // By glob where every module it matches has its heads split.
    std::set<std::string> parents;
    for (const auto &[module, entry] : byModule)
        parents.insert(parentOf(module));
    std::set<std::string> attentionGlobs;
    for (const auto &module : attention) {
        const std::string glob = globOf(module);
        const bool all = std::all_of(parents.begin(), parents.end(), [&](const std::string &p) {
            return !globMatches(glob, p) || attention.count(p);
        });
        attentionGlobs.insert(all ? glob : module);
    }
    out.attentionModules.assign(attentionGlobs.begin(), attentionGlobs.end());

    // 1-D parameters as torch stores them: a ColwiseParallel bias split with
    // its outputs, every other one (row-parallel biases, norm scales) whole.
    for (std::size_t i = 0; i < g.tensorCount(); ++i) {
        const ir::Tensor &tensor = g.tensor(ir::TensorId(static_cast<std::int32_t>(i)));
        if (tensor.role != ir::Role::Parameter || (tensor.shape.size() != 1 && !isFusedQkvBias(tensor)))
            continue;
        const auto it = byModule.find(moduleOf(tensor.name));
        const bool splitBias = it != byModule.end() && it->second.style == "ColwiseParallel" &&
                               tensor.name == it->first + ".bias";
        const auto p = in.specs[i].placements[ax];
        const auto last = static_cast<int>(tensor.shape.size()) - 1;
        if (p != (splitBias ? sharding::Placement::shard(last) : sharding::Placement::replicate()))
            fail(tensor.name, "stored " + p.toString() + " on axis " + mesh.axes[ax].name + " where torch stores it " +
                                  (splitBias ? "Shard(" + std::to_string(last) + ")" : std::string("Replicate()")) +
                                  (it != byModule.end() && !it->second.style.empty() ? " under " + it->second.style
                                                                                      : std::string(" (module unsplit)")));
    }

    // Every collective the plan charges on the tensor-parallel axis is one
    // of the above; anything else moves a tensor between modules, which
    // parallelize_module cannot do.
    const std::string recomputed = "recomputed: ";
    for (const auto &c : cost.collectives) {
        if (c.axis != mesh.axes[ax].name)
            continue;
        if (issued.count({c.op, c.tensor}))
            continue;
        fail(c.tensor, "the plan " + std::string(sharding::toString(c.kind)) + "s it at " + c.op + " (" +
                           (startsWith(c.reason, recomputed) ? c.reason.substr(recomputed.size()) : c.reason) +
                           "), between modules, where parallelize_module redistributes only a module's input or "
                           "output");
    }

    // The sequence-sharded residual stream stays a DTensor between modules
    // where every reader takes one: modules see the stream's global shape, as
    // models that derive positions from it need (Hugging Face's LlamaModel
    // numbers positions by its embedding output's length, so local shards
    // would give every rank positions 0..s/n). Readers that take a DTensor:
    // split modules and SequenceParallel norms (redistributing at their
    // input), and adds of two stream tensors (the residual). Where another op
    // reads the stream, it stays local, as it computes on shards.
    {
        std::map<std::int32_t, std::string> stream;  // tensor -> the module returning it ("" for an add)
        for (const auto &m : split)
            if (const auto it = returned.find(m.result.value); it != returned.end() && it->second == "Shard(1)")
                stream[m.result.value] = m.module;
        for (const auto &[t, module] : sequenceNorms)
            stream[t] = module;
        // Grow the stream through adds of stream tensors; any other reader
        // outside a split module keeps it local.
        bool dtensor = !sequenceNorms.empty();
        std::vector<std::int32_t> frontier;
        for (const auto &[t, module] : stream)
            frontier.push_back(t);
        while (dtensor && !frontier.empty()) {
            const ir::TensorId t(frontier.back());
            frontier.pop_back();
            for (auto c : g.tensor(t).consumers) {
                const ir::Op &op = g.op(c);
                if (op.type == "Add") {
                    // An add whose other input is not known as stream yet may
                    // be once that input is reached; settled below.
                    const bool residual = op.outputs.size() == 1 &&
                                          std::all_of(op.inputs.begin(), op.inputs.end(),
                                                      [&](ir::TensorId x) { return stream.count(x.value) > 0; });
                    if (residual && stream.emplace(op.outputs[0].value, std::string()).second)
                        frontier.push_back(op.outputs[0].value);
                    continue;
                }
                const auto owner = byModule.find(moduleOfOp(c));
                if (owner == byModule.end() || owner->second.style.empty())
                    dtensor = false;
            }
        }
        // Adds must read the stream on every input.
        for (const auto &[t, module] : stream)
            for (auto c : g.tensor(ir::TensorId(t)).consumers) {
                const ir::Op &op = g.op(c);
                if (op.type == "Add" && !(op.outputs.size() == 1 && stream.count(op.outputs[0].value)))
                    dtensor = false;
            }
        if (dtensor)
            for (const auto &[t, module] : stream)
                if (!module.empty())
                    byModule[module].useLocalOutput = false;
    }

    // Fold layer indices into globs where every module the glob matches
    // shares the entry.
    std::map<std::string, std::vector<std::string>> byGlob;
    for (const auto &[module, entry] : byModule)
        byGlob[globOf(module)].push_back(module);
    for (const auto &[glob, members] : byGlob) {
        const TorchModulePlan &first = byModule.at(members.front());
        bool fold = members.size() >= 2 && glob != members.front();
        for (const auto &m : members) {
            TorchModulePlan renamed = byModule.at(m);
            renamed.module = first.module;
            fold = fold && renamed == first;
        }
        for (const auto &[module, entry] : byModule)
            fold = fold && (globOf(module) == glob || !globMatches(glob, module));
        if (fold && !first.style.empty()) {
            TorchModulePlan entry = first;
            entry.module = glob;
            out.modules.push_back(entry);
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

namespace {

std::string pyString(const std::string &s)
{
    return "\"" + s + "\"";
}

std::string pyTuple(const std::vector<std::string> &items, bool quote)
{
    std::string s = "(";
    for (const auto &i : items)
        s += (quote ? pyString(i) : i) + ", ";
    if (!items.empty()) {
        s.pop_back();
        if (items.size() > 1)
            s.pop_back();
    }
    return s + ")";
}

std::string styleCall(const TorchModulePlan &m)
{
    std::vector<std::string> args;
    if (m.style == "PrepareModuleInput") {
        if (m.inputKwarg.empty()) {
            args.push_back("input_layouts=(" + m.inputLayouts + ",)");
            args.push_back("desired_input_layouts=(" + m.desiredInputLayouts + ",)");
        } else {
            args.push_back("input_kwarg_layouts={" + pyString(m.inputKwarg) + ": " + m.inputLayouts + "}");
            args.push_back("desired_input_kwarg_layouts={" + pyString(m.inputKwarg) + ": " + m.desiredInputLayouts +
                           "}");
        }
        // The children read the DTensor: their gradients sum before the one
        // collective back.
        if (m.useLocalOutput)
            args.push_back("use_local_output=True");
    } else {
        if (!m.inputLayouts.empty())
            args.push_back("input_layouts=" + m.inputLayouts);
        if (!m.outputLayouts.empty())
            args.push_back("output_layouts=" + m.outputLayouts);
        const bool defaultLocal = m.style != "SequenceParallel";
        if (m.useLocalOutput != defaultLocal)
            args.push_back(std::string("use_local_output=") + (m.useLocalOutput ? "True" : "False"));
    }
    if (m.parts > 1)
        args.insert(args.begin(), "parts=" + std::to_string(m.parts));
    std::string s = (m.conv1d ? "Conv1D" : "") + m.style + "(";
    for (std::size_t i = 0; i < args.size(); ++i)
        s += (i ? ", " : "") + args[i];
    return s + ")";
}

} // namespace

std::string torchPlanPython(const TorchPlan &plan, const plan::Plan &source)
{
    std::string s;
    s += "\"\"\"A Tapestry plan as PyTorch runs it (torch 2.4 or later: DTensor, parallelize_module,\n"
         "loss_parallel, FSDP2's fully_shard, activation checkpointing).\n\n";
    s += exportProvenance(source, "torch", plan.axisNotes);
    for (const auto &note : plan.notes)
        s += "Note: " + note + "\n";
    s += "\nIn the training script, on every rank:\n"
         "    mesh = build_mesh(\"cuda\")            # after init_process_group\n"
         "    model = parallelize(model, mesh)      # before the optimizer is made\n"
         "    mine = batch_slice(mesh, len(global_batch))\n"
         "    for k, (inputs, labels) in enumerate(micro_batches_of(global_batch[mine], labels[mine])):\n"
         "        with loss_context(), accumulating(model, last=k == micro_batches - 1):\n"
         "            loss = loss_fn(model(inputs), labels) / micro_batches\n"
         "            loss.backward()\n"
         "    optimizer.step()\n"
         "\"\"\"\n";
    s += "import contextlib\n\n"
         "import torch\n"
         "import torch.distributed as dist\n"
         "from torch.distributed.device_mesh import DeviceMesh\n"
         "from torch.distributed.tensor import DTensor, Replicate, Shard\n"
         "from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,\n"
         "                                               SequenceParallel, loss_parallel, parallelize_module)\n\n";
    const bool conv1d = std::any_of(plan.modules.begin(), plan.modules.end(),
                                    [](const TorchModulePlan &m) { return m.conv1d; });
    if (conv1d) {
        s += "from functools import partial\n\n"
             "from torch import nn\n"
             "from torch.distributed.tensor import distribute_module, distribute_tensor\n\n\n"
             "def _is_conv1d(module):\n"
             "    \"\"\"Hugging Face's Conv1D (GPT-2's c_attn, c_proj, c_fc): y = x @ weight + bias, weight [in, nf].\"\"\"\n"
             "    return type(module).__name__ == \"Conv1D\" and hasattr(module, \"nf\")\n\n\n"
             "def _fused_order(features, parts, ranks):\n"
             "    \"\"\"The column order that makes an even split hand each rank its heads of every part\n"
             "    (q, k and v of a fused c_attn), part by part; None for one part.\"\"\"\n"
             "    if parts == 1:\n"
             "        return None\n"
             "    part, each = features // parts, features // parts // ranks\n"
             "    return torch.tensor([p * part + r * each + j for r in range(ranks) for p in range(parts)\n"
             "                         for j in range(each)])\n\n\n"
             "class Conv1DColwiseParallel(ColwiseParallel):\n"
             "    \"\"\"ColwiseParallel for Hugging Face's Conv1D: the weight [in, out] split by its columns, the bias with\n"
             "    them. parts > 1: a fused projection (GPT-2's c_attn: q, k and v side by side) whose columns are\n"
             "    reordered first so that each rank holds its heads of every part, in order, as the module's split\n"
             "    of its output reads them (to_hf_layout() undoes the order).\"\"\"\n\n"
             "    def __init__(self, *, parts=1, **kwargs):\n"
             "        super().__init__(**kwargs)\n"
             "        self.parts = parts\n\n"
             "    def _partition_conv1d_fn(self, name, module, device_mesh):\n"
             "        order = _fused_order(module.nf, self.parts, device_mesh.size())\n"
             "        for pname, param in list(module.named_parameters(recurse=False)):\n"
             "            data = param.detach() if order is None else param.detach().index_select(-1, order)\n"
             "            module.register_parameter(pname, nn.Parameter(distribute_tensor(data, device_mesh, [Shard(param.dim() - 1)])))\n\n"
             "    def _apply(self, module, device_mesh):\n"
             "        if not _is_conv1d(module):\n"
             "            return super()._apply(module, device_mesh)\n"
             "        return distribute_module(module, device_mesh, self._partition_conv1d_fn,\n"
             "                                 partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),\n"
             "                                 partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))\n\n\n"
             "class Conv1DRowwiseParallel(RowwiseParallel):\n"
             "    \"\"\"RowwiseParallel for Hugging Face's Conv1D: the weight [in, out] split by its rows, the bias whole.\"\"\"\n\n"
             "    def _partition_conv1d_fn(self, name, module, device_mesh):\n"
             "        module.register_parameter(\"weight\", nn.Parameter(distribute_tensor(module.weight, device_mesh, [Shard(0)])))\n"
             "        if getattr(module, \"bias\", None) is not None:\n"
             "            module.register_parameter(\"bias\", nn.Parameter(distribute_tensor(module.bias, device_mesh, [Replicate()])))\n\n"
             "    def _apply(self, module, device_mesh):\n"
             "        if not _is_conv1d(module):\n"
             "            return super()._apply(module, device_mesh)\n"
             "        self.desired_input_layouts = (Shard(-1),)\n"
             "        return distribute_module(module, device_mesh, self._partition_conv1d_fn,\n"
             "                                 partial(self._prepare_input_fn, self.input_layouts, self.desired_input_layouts),\n"
             "                                 partial(self._prepare_output_fn, self.output_layouts, self.use_local_output))\n\n\n"
             "def to_hf_layout(name, tensor):\n"
             "    \"\"\"A parameter of the parallelized model (or its gradient) gathered whole (DTensor.full_tensor()), in\n"
             "    Hugging Face's layout: a fused projection's columns back in q, k, v order. For checkpoints.\"\"\"\n"
             "    atoms = name.split(\".\")[:-1]\n"
             "    for pattern, style in plan.items():\n"
             "        keys = pattern.split(\".\")\n"
             "        if getattr(style, \"parts\", 1) > 1 and len(keys) == len(atoms) and all(k in (\"*\", a) for k, a in zip(keys, atoms)):\n"
             "            order = _fused_order(tensor.shape[-1], style.parts, mesh_shape[mesh_dim_names.index(tp_mesh_dim)])\n"
             "            return tensor.index_select(-1, torch.argsort(order))\n"
             "    return tensor\n\n\n";
    }
    std::vector<std::string> shape;
    for (int n : plan.meshShape)
        shape.push_back(std::to_string(n));
    s += "mesh_shape = " + pyTuple(shape, false) + "\n";
    s += "mesh_dim_names = " + pyTuple(plan.meshDimNames, true) + "\n";
    s += "# The axis parameters are split on; None when every parameter is whole.\n";
    s += "tp_mesh_dim = " + (plan.meshAxis.empty() ? std::string("None") : pyString(plan.meshAxis)) + "\n";
    s += "# The axes the batch is split on: gradients are averaged over them.\n";
    s += "dp_mesh_dims = " + pyTuple(plan.dataAxes, true) + "\n";
    s += "# ZeRO stage: 1 and 2 as fully_shard without resharding after forward, 3 with it, over fsdp_mesh_dims.\n";
    s += "zero_stage = " + std::to_string(plan.zeroStage) + "\n";
    s += "fsdp_mesh_dims = " + pyTuple(plan.fsdpAxes, true) + "\n";
    s += "# The global batch runs as this many micro-batches per optimizer step (gradient accumulation).\n";
    s += "micro_batches = " + std::to_string(plan.microBatches) + "\n";
    s += "# The tensor-parallel plan for parallelize_module on mesh[tp_mesh_dim].\n";
    s += "plan = {\n";
    for (const auto &m : plan.modules)
        s += "    " + pyString(m.module) + ": " + styleCall(m) + ",\n";
    s += "}\n";
    s += "# Attention modules whose heads are split: their head counts become local.\n";
    s += "attention_modules = " + pyTuple(plan.attentionModules, true) + "\n";
    s += "# Modules recomputed in the backward pass (activation checkpointing).\n";
    s += "checkpoint_modules = " + pyTuple(plan.checkpointModules, true) + "\n";
    s += "# Modules fully_shard wraps one by one before the whole model.\n";
    s += "fsdp_modules = " + pyTuple(plan.shardedModules, true) + "\n";
    s += "# Parameters shared by two modules, tied again after parallelize_module: (sharer, owner).\n";
    s += "tied_parameters = (";
    for (const auto &[sharer, owner] : plan.tiedParameters)
        s += "(" + pyString(sharer) + ", " + pyString(owner) + "), ";
    s += ")\n";
    s += "# The loss reads vocabulary-split logits: compute it under loss_context().\n";
    s += std::string("vocabulary_parallel = ") + (plan.lossParallel ? "True" : "False") + "\n";
    s += "# The collectives the plan costs per step, by phase and kind.\n";
    s += "plan_collectives = {\n";
    for (const auto &[phase, kinds] : plan.collectives) {
        s += "    " + pyString(phase) + ": {";
        bool first = true;
        for (const auto &[kind, n] : kinds) {
            s += (first ? "" : ", ") + pyString(kind) + ": " + std::to_string(n);
            first = false;
        }
        s += "},\n";
    }
    s += "}\n";
    s += R"PY(
# Attributes Hugging Face's attention modules size their heads by.
_HEAD_ATTRIBUTES = ("num_heads", "num_key_value_heads", "num_attention_heads", "n_heads", "hidden_size",
                    "all_head_size", "inner_dim", "embed_dim", "split_size")


def build_mesh(device_type="cuda"):
    """The plan's device mesh, ranks numbered row-major over mesh_shape as the plan
    numbers devices, with the tensor-parallel axis moved innermost (parallelize_module
    requires it); every axis groups the same ranks as in the plan."""
    dims = range(len(mesh_shape))
    order = [d for d in dims if mesh_dim_names[d] != tp_mesh_dim] + \
        [d for d in dims if mesh_dim_names[d] == tp_mesh_dim]
    ranks = torch.arange(torch.Size(mesh_shape).numel()).reshape(mesh_shape).permute(order)
    return DeviceMesh(device_type, ranks, mesh_dim_names=tuple(mesh_dim_names[d] for d in order))


def modules(model, pattern):
    """The submodules a plan key names, "*" standing for any one name ("model.layers.*")."""
    atoms = pattern.split(".") if pattern else []
    for name, module in model.named_modules():
        parts = name.split(".") if name else []
        if len(parts) == len(atoms) and all(a in ("*", p) for a, p in zip(atoms, parts)):
            yield module


def batch_slice(mesh, batch):
    """This rank's samples of a global batch of `batch`: a slice over the data axes."""
    index, count = 0, 1
    for name in dp_mesh_dims:
        size = mesh[name].size()
        index, count = index * size + mesh[name].get_local_rank(), count * size
    return slice(index * batch // count, (index + 1) * batch // count)


def loss_context():
    """Where the loss is computed: loss_parallel for vocabulary-split logits."""
    return loss_parallel() if vocabulary_parallel else contextlib.nullcontext()


def global_loss(loss, mesh):
    """The step's loss over the whole batch (the mean of the data ranks' losses), for reporting."""
    value = (loss.full_tensor() if isinstance(loss, DTensor) else loss).detach().clone()
    for name in dp_mesh_dims:
        dist.all_reduce(value, group=mesh[name].get_group())
        value /= mesh[name].size()
    return value


def _recompute_whole(layer):
    """Activation checkpointing of `layer` that runs its whole forward pass again in the
    backward pass, as the plan charges it (torch's early stop skips what no saved tensor
    needs, such as the layer's last reduce-scatter)."""
    from torch.distributed._composable import checkpoint
    from torch.utils.checkpoint import set_checkpoint_early_stop
    held = []

    def enter(module, args):
        held.append(set_checkpoint_early_stop(False))
        held[-1].__enter__()

    def leave(module, args, output):
        held.pop().__exit__(None, None, None)

    layer.register_forward_pre_hook(enter)
    checkpoint(layer)
    layer.register_forward_hook(leave)


def micro_batches_of(*tensors):
    """The micro-batches of this rank's samples: `micro_batches` equal slices of each tensor."""
    return zip(*(t.chunk(micro_batches) for t in tensors))


_sync = {"gradients": True}


@contextlib.contextmanager
def accumulating(model, last):
    """A micro-batch's backward pass: gradients are averaged over the data axes after the
    last one only, once per step, as the plan charges it (FSDP's gradient sync alike)."""
    _sync["gradients"] = last
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(last)
    try:
        yield
    finally:
        _sync["gradients"] = True


def _average_gradients(model, mesh):
    groups = [(mesh[name].get_group(), mesh[name].size()) for name in dp_mesh_dims]

    def average(param):
        if not _sync["gradients"]:
            return
        grad = param.grad._local_tensor if isinstance(param.grad, DTensor) else param.grad
        for group, size in groups:
            dist.all_reduce(grad, group=group)
            grad.div_(size)

    for param in model.parameters():
        if param.requires_grad:
            param.register_post_accumulate_grad_hook(average)


def parallelize(model, mesh):
    """Applies the plan to `model` in place (tensor parallelism, local head counts,
    activation checkpointing, then FSDP or gradient averaging on the data axes)."""
    if tp_mesh_dim is not None:
        tp = mesh[tp_mesh_dim]
        parallelize_module(model, tp, plan)
        for sharer, owner in tied_parameters:
            module, _, name = sharer.rpartition(".")
            setattr(model.get_submodule(module), name, model.get_parameter(owner))
        for pattern in attention_modules:
            for attn in modules(model, pattern):
                for attribute in _HEAD_ATTRIBUTES:
                    if isinstance(getattr(attn, attribute, None), int):
                        setattr(attn, attribute, getattr(attn, attribute) // tp.size())
    for pattern in checkpoint_modules:
        for layer in modules(model, pattern):
            _recompute_whole(layer)
    if fsdp_mesh_dims and zero_stage >= 1:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch 2.4 and 2.5
            from torch.distributed._composable.fsdp import fully_shard
        dp = mesh[fsdp_mesh_dims[0]] if len(fsdp_mesh_dims) == 1 else mesh[fsdp_mesh_dims]._flatten()
        for pattern in fsdp_modules:
            for layer in modules(model, pattern):
                fully_shard(layer, mesh=dp, reshard_after_forward=zero_stage == 3)
        fully_shard(model, mesh=dp, reshard_after_forward=zero_stage == 3)
    elif dp_mesh_dims:
        _average_gradients(model, mesh)
    return model
)PY";
    return s;
}

std::string torchPipelinePython(const ir::Graph &graph, const plan::Plan &plan, const std::string &planInput)
{
    const plan::PlanPipeline &pp = *plan.pipeline;
    auto refuse = [&](const std::string &why) {
        return TapestryError(Error{planInput, "$.pipeline", "torch: " + why});
    };
    if (plan.mesh.deviceCount() != 1)
        throw refuse("the plan runs " + std::to_string(pp.stages) + " pipeline stages of " + plan.mesh.toString() +
                     " each; the torch export runs pipelines of one device a stage (plan with --tensor-parallel 1 and "
                     "no data parallelism), or export the plan for megatron");
    for (const char *name : {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"})
        if (!graph.findTensor(name))
            throw refuse(std::string("the pipeline export cuts LLaMA-shaped models (model.embed_tokens, model.layers.N, "
                                     "model.norm, lm_head: a head apart from the embedding); this model has no '") +
                         name + "'");
    const int chunks = pp.stages * pp.virtualStages;
    if (static_cast<int>(pp.cuts.size()) != chunks - 1)
        throw refuse("the pipeline has no cuts for its " + std::to_string(chunks) + " chunks (cost the plan again)");
    const int m = std::max(1, plan.costOptions.techniques.microBatches);
    if (pp.schedule == cost::Schedule::Interleaved && m % pp.stages != 0)
        throw refuse("torch's interleaved schedule needs the micro-batches (" + std::to_string(m) +
                     ") a multiple of the stages (" + std::to_string(pp.stages) + ")");
    std::string cuts;
    for (int c : pp.cuts)
        cuts += (cuts.empty() ? "" : ", ") + std::to_string(c);
    const std::string schedule = pp.schedule == cost::Schedule::GPipe       ? "ScheduleGPipe"
                                 : pp.schedule == cost::Schedule::OneFOneB ? "Schedule1F1B"
                                                                           : "ScheduleInterleaved1F1B";
    std::string s;
    s += "\"\"\"A Tapestry plan's pipeline as PyTorch runs it (torch 2.6 or later: torch.distributed.pipelining).\n\n";
    s += exportProvenance(plan, "torch", {});
    s += "\n" + std::to_string(pp.stages) + " stages of one device each, " + std::string(cost::toString(pp.schedule)) +
         (pp.virtualStages > 1 ? " with " + std::to_string(pp.virtualStages) + " chunks a stage" : std::string()) +
         ", " + std::to_string(m) + " micro-batches; the model's " + std::to_string(pp.layers) +
         " layers cut before layers " + cuts + ".\n";
    s += "\nIn the training script, on every rank (one a stage, after init_process_group):\n"
         "    chunks = pipeline_chunks(model, rank)\n"
         "    schedule = pipeline_schedule(chunks, rank, loss_fn, device)   # loss_fn(logits, labels), a mean\n"
         "    optimizer = torch.optim.SGD([p for c in chunks for p in c.parameters()], lr=...)\n"
         "    if rank == 0: schedule.step(input_ids)             # the whole batch; cut into micro-batches\n"
         "    elif is_last(rank): schedule.step(target=labels, losses=losses)\n"
         "    else: schedule.step()\n"
         "    optimizer.step()\n"
         "The losses are the micro-batches', each over the micro-batches; the step's is their sum\n"
         "(pipeline_loss), the whole batch's mean, whose gradients the step's are.\n"
         "\"\"\"\n";
    s += "import inspect\n\n"
         "import torch\n"
         "from torch import nn\n"
         "from torch.distributed.pipelining import PipelineStage, " + schedule + "\n\n";
    s += "stages = " + std::to_string(pp.stages) + "\n";
    s += "virtual_stages = " + std::to_string(pp.virtualStages) + "\n";
    s += "micro_batches = " + std::to_string(m) + "\n";
    s += "layers = " + std::to_string(pp.layers) + "\n";
    s += "cuts = [" + cuts + "]  # the first layer of each chunk after the first\n";
    s += R"PY(

def _chunks_of(rank):
    """The chunks a stage runs: rank, rank + stages, ... (chunk c on stage c mod stages)."""
    return list(range(rank, stages * virtual_stages, stages))


def is_last(rank):
    return (stages * virtual_stages - 1) % stages == rank


class Chunk(nn.Module):
    """Layers [first, end) of a LLaMA-shaped model, with the embedding on the first chunk
    and the final norm and head on the last: the same modules, not copies."""

    def __init__(self, model, first, end, is_first, is_last):
        super().__init__()
        inner = model.model
        self.embed_tokens = inner.embed_tokens if is_first else None
        self.rotary_emb = inner.rotary_emb
        self.layers = nn.ModuleDict({str(i): inner.layers[i] for i in range(first, end)})
        self.norm = inner.norm if is_last else None
        self.lm_head = model.lm_head if is_last else None

    def forward(self, x):
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        positions = torch.arange(h.shape[1], device=h.device)[None, :]
        position_embeddings = self.rotary_emb(h, positions)
        for layer in self.layers.values():
            out = layer(h, position_embeddings=position_embeddings)
            h = out[0] if isinstance(out, tuple) else out
        if self.lm_head is not None:
            h = self.lm_head(self.norm(h))
        return h


def pipeline_chunks(model, rank):
    """This stage's chunks of `model`, in the order the schedule runs them."""
    bounds = [0] + cuts + [layers]
    last = stages * virtual_stages - 1
    return [Chunk(model, bounds[c], bounds[c + 1], c == 0, c == last) for c in _chunks_of(rank)]


def pipeline_schedule(chunks, rank, loss_fn, device):
    """The plan's schedule over this stage's chunks (PipelineStage each)."""
    made = [PipelineStage(chunk, c, stages * virtual_stages, device) for chunk, c in zip(chunks, _chunks_of(rank))]

    def scaled(output, target):
        # Each micro-batch's mean over its rows, over the micro-batches: the
        # whole batch's mean, whose gradients the micro-batches' sum to.
        return loss_fn(output, target) / micro_batches

    # Later torch scales the gradients itself unless told not to.
    options = {"scale_grads": False} if "scale_grads" in inspect.signature()PY" + schedule + R"PY(.__init__).parameters else {}
)PY";
    if (pp.schedule == cost::Schedule::Interleaved)
        s += "    return " + schedule + "(made, n_microbatches=micro_batches, loss_fn=scaled, **options)\n";
    else
        s += "    return " + schedule + "(made[0], n_microbatches=micro_batches, loss_fn=scaled, **options)\n";
    s += R"PY(

def pipeline_loss(losses):
    """The step's loss from the micro-batches' (on the last stage): the whole batch's mean."""
    return torch.stack([l.detach() for l in losses]).sum()
)PY";
    return s;
}

} // namespace tapestry::exports
