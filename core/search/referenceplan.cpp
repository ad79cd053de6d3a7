#include "search/referenceplan.h"

#include "ir/error.h"
#include "ir/validate.h"
#include "sharding/batchflow.h"
#include "sharding/oprule.h"
#include "sharding/propagation.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace tapestry::search {

namespace {

using sharding::Placement;
using sharding::ShardingSpec;

std::vector<std::string> dottedParts(const std::string &name)
{
    std::vector<std::string> parts;
    std::string cur;
    for (char c : name) {
        if (c == '.' || c == '/') {
            parts.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    parts.push_back(cur);
    return parts;
}

[[noreturn]] void refuse(const std::string &modelSource, const std::string &method, const std::string &problem)
{
    throw TapestryError(Error{modelSource, {}, method + ": " + problem});
}

// The mesh axes that split the batch: for dp all of them, for megatron all
// but the tensor-parallel one. Inputs whose leading dim is 1 broadcast
// (masks, positions, scales) and stay replicated.
void splitBatch(const ir::Graph &graph, const sharding::Mesh &mesh, const std::vector<int> &axes,
                const std::string &modelSource, const std::string &method,
                std::map<ir::TensorId, ShardingSpec> &fixed)
{
    std::int64_t ways = 1;
    std::string axisNames;
    for (int a : axes) {
        ways *= mesh.axes[static_cast<std::size_t>(a)].size;
        axisNames += (axisNames.empty() ? "'" : ", '") + mesh.axes[static_cast<std::size_t>(a)].name + "'";
    }
    if (ways == 1)
        return;
    // The batch the data flow finds (in dim 1 of a sequence-first export,
    // src [s, b, d]): each input it reaches split there. Buffers read as
    // inputs (BatchNormalization's running statistics, [C]) are not
    // reached, where a vote over the inputs' leading dims took ResNet's 64
    // channels for its batch.
    if (const auto flow = sharding::batchByDataFlow(graph)) {
        for (const auto &[t, dim] : flow->inputs) {
            const ir::Tensor &tensor = graph.tensor(t);
            const std::int64_t size = tensor.shape[static_cast<std::size_t>(dim)];
            if (size % ways != 0)
                refuse(modelSource, method,
                       "batch " + std::to_string(size) + (dim ? " (dim " + std::to_string(dim) + ")" : std::string()) +
                           " of input '" + tensor.name + "' cannot be split over " + axisNames + " (" +
                           std::to_string(ways) + " ways)");
            ShardingSpec spec = ShardingSpec::replicated(mesh.rank());
            for (int a : axes)
                spec.placements[static_cast<std::size_t>(a)] = Placement::shard(dim);
            fixed[t] = spec;
        }
        return;
    }
    // Where no dim passes (an op without a rule on the way), the batch: the
    // leading dim most inputs share (T5's relative position buckets, [s, s],
    // are no batch of 512).
    std::map<std::int64_t, int> votes;
    for (auto t : graph.tensorsWithRole(ir::Role::Input))
        if (const ir::Shape &s = graph.tensor(t).shape; !s.empty() && s[0] > 1)
            ++votes[s[0]];
    std::int64_t batch = 0;
    int most = 0;
    for (auto t : graph.tensorsWithRole(ir::Role::Input))
        if (const ir::Shape &s = graph.tensor(t).shape; !s.empty() && s[0] > 1 && votes[s[0]] > most) {
            most = votes[s[0]];
            batch = s[0];
        }
    for (auto t : graph.tensorsWithRole(ir::Role::Input)) {
        const ir::Tensor &tensor = graph.tensor(t);
        if (tensor.shape.empty() || tensor.shape[0] == 1 || tensor.shape[0] != batch)
            continue;
        if (tensor.shape[0] % ways != 0)
            refuse(modelSource, method,
                   "batch " + std::to_string(tensor.shape[0]) + " of input '" + tensor.name +
                       "' cannot be split over " + axisNames + " (" + std::to_string(ways) + " ways)");
        ShardingSpec spec = ShardingSpec::replicated(mesh.rank());
        for (int a : axes)
            spec.placements[static_cast<std::size_t>(a)] = Placement::shard(0);
        fixed[t] = spec;
    }
}

// A MatMul [b, 1, s, h] · [kv, h, (g + 2)·d] -> [b, kv, s, (g + 2)·d] that a
// Split of its last dim into g·d, d and d follows: a fused q/k/v projection
// held per key/value head. GPT-2's c_attn ([3, h, h], split along the dim
// of 3) is not one.
bool isFusedPerHead(const ir::Graph &graph, const ir::Op &matmul)
{
    const ir::Shape &w = graph.tensor(matmul.inputs[1]).shape;
    const ir::Shape &x = graph.tensor(matmul.inputs[0]).shape;
    if (x.size() != 4 || x[1] != 1 || matmul.outputs.empty())
        return false;
    ir::TensorId y = matmul.outputs[0];
    for (int hops = 0; hops < 2; ++hops) {  // past the bias Add
        for (ir::OpId c : graph.tensor(y).consumers) {
            const ir::Op &op = graph.op(c);
            if (op.type == "Split" && op.outputs.size() == 3 &&
                ir::intAttr(op.attributes, "axis").value_or(0) == -1 && w[0] > 1)
                return true;
        }
        const auto &consumers = graph.tensor(y).consumers;
        if (consumers.size() != 1 || graph.op(consumers[0]).type != "Add")
            return false;
        y = graph.op(consumers[0]).outputs[0];
    }
    return false;
}

// The bias [kv, 1, (g + 2)·d] added to such a projection's output.
bool isFusedPerHeadBias(const ir::Graph &graph, ir::TensorId bias)
{
    if (graph.tensor(bias).shape.size() != 3)
        return false;
    for (ir::OpId c : graph.tensor(bias).consumers) {
        const ir::Op &add = graph.op(c);
        if (add.type != "Add" || add.inputs.size() != 2)
            continue;
        const ir::OpId producer = graph.tensor(add.inputs[add.inputs[0] == bias ? 1 : 0]).producer;
        if (producer.valid() && graph.op(producer).type == "MatMul" && graph.op(producer).inputs.size() == 2 &&
            isFusedPerHead(graph, graph.op(producer)))
            return true;
    }
    return false;
}

// The weight dim Megatron splits: for a column-parallel linear the output
// features, for a row-parallel one the input features, as the consuming
// MatMul/Gemm uses the weight. Nothing when no such consumer reads it.
std::optional<int> linearDim(const ir::Graph &graph, ir::TensorId weight, MegatronRole role)
{
    for (ir::OpId c : graph.tensor(weight).consumers) {
        const ir::Op &op = graph.op(c);
        const int rank = static_cast<int>(graph.tensor(weight).shape.size());
        // A q/k/v projection fused per key/value head ([kv, h, (g + 2)·d],
        // zoo/decoder.h) read by a MatMul of a lifted [b, 1, s, h] input:
        // its heads are dim 0, the column split of each head's projection.
        if (op.type == "MatMul" && op.inputs.size() == 2 && op.inputs[1] == weight && rank == 3 &&
            role == MegatronRole::Column && isFusedPerHead(graph, op))
            return 0;
        if (op.type == "MatMul" && op.inputs.size() == 2 && op.inputs[1] == weight && rank >= 2)
            return role == MegatronRole::Column ? rank - 1 : rank - 2;
        if (op.type == "Gemm" && op.inputs.size() >= 2 && op.inputs[1] == weight && rank == 2) {
            const bool transB = ir::intAttr(op.attributes, "transB").value_or(0) != 0;
            return (role == MegatronRole::Column) != transB ? 1 : 0;
        }
        // A tied LM head reads the embedding through a Transpose.
        if (op.type == "Transpose")
            continue;
    }
    return std::nullopt;
}

// The rank-2 weight a linear (MatMul or Gemm of an activation by a
// parameter) reads, or none.
std::optional<ir::TensorId> linearWeight(const ir::Graph &graph, const ir::Op &op)
{
    if ((op.type != "MatMul" && op.type != "Gemm") || op.inputs.size() < 2)
        return std::nullopt;
    const ir::Tensor &w = graph.tensor(op.inputs[1]);
    if (w.role != ir::Role::Parameter || w.shape.size() != 2 ||
        graph.tensor(op.inputs[0]).role == ir::Role::Parameter)
        return std::nullopt;
    return op.inputs[1];
}

// A projection held as its parts stacked ([k, in, m]: GPT-2's c_attn,
// io/onnx/fusedprojections.h): a MatMul of an activation by a parameter of
// rank 3 whose product (past its bias) a Split along the dim of k reads.
bool isStackedProjection(const ir::Graph &graph, const ir::Op &op)
{
    if (op.type != "MatMul" || op.inputs.size() != 2 || op.outputs.empty())
        return false;
    const ir::Tensor &w = graph.tensor(op.inputs[1]);
    if (w.role != ir::Role::Parameter || w.shape.size() != 3 || w.shape[0] < 2 ||
        graph.tensor(op.inputs[0]).role == ir::Role::Parameter)
        return false;
    ir::TensorId y = op.outputs[0];
    for (int hops = 0; hops < 2; ++hops) {  // past the bias Add
        const std::size_t rank = graph.tensor(y).shape.size();
        const auto &consumers = graph.tensor(y).consumers;
        for (ir::OpId c : consumers) {
            const ir::Op &split = graph.op(c);
            if (split.type == "Split" && rank >= 3 &&
                static_cast<std::int64_t>(split.outputs.size()) == w.shape[0] &&
                sharding::normaliseAxis(ir::intAttr(split.attributes, "axis").value_or(0), rank) == rank - 3)
                return true;
        }
        if (consumers.size() != 1 || graph.op(consumers[0]).type != "Add")
            return false;
        y = graph.op(consumers[0]).outputs[0];
    }
    return false;
}

bool isPointwise(const std::string &type)
{
    static const std::set<std::string> kPointwise{
        "Add",  "Sub",  "Mul",  "Div",     "Relu",     "Gelu",  "Silu", "Sigmoid", "Tanh", "Erf",
        "Pow",  "Sqrt", "Neg",  "Cast",    "Identity", "Dropout", "LeakyRelu", "Elu", "Softplus", "HardSigmoid",
        "Mish", "Where"};
    return kPointwise.count(type) != 0;
}

bool movesData(const std::string &type)
{
    return type == "Reshape" || type == "Transpose" || type == "Squeeze" || type == "Unsqueeze" ||
           type == "Flatten";
}

// Megatron's pairs found by structure, where module names say nothing (an
// export's constant folding renames weights onnx::MatMul_1234) or what they
// say the structure cannot hold to:
//  - an MLP: linears whose outputs reach one other linear through
//    pointwise ops alone (the activation, a bias, a gate's product) are
//    column-parallel and that one row-parallel;
//  - attention: the linears whose outputs reach an attention core (a
//    matmul of two activations feeding a softmax, and the one reading the
//    softmax) through pointwise ops, reshapes and transposes alone are
//    column-parallel, and the linear reading the core's output row-parallel.
//    A part of a projection held stacked ([3, h, h]: GPT-2's c_attn, and
//    torch's in_proj as the ONNX loader holds it) counts as its linear.
//    Where an input of the core comes from a slice of one fused projection
//    held as exported ([h, 3h]), no column split keeps its heads together:
//    the core's linears are marked None, kept replicated whatever their names.
// Biases follow their linear (a column-parallel one's is split with it).
std::map<ir::TensorId, MegatronRole> structuralRoles(const ir::Graph &graph)
{
    std::map<ir::TensorId, MegatronRole> roles;
    // What a tensor reaches through ops that `through` accepts: the other
    // ops reading it on the way.
    auto reach = [&](ir::TensorId from, auto through) {
        std::vector<ir::OpId> reached;
        std::set<ir::TensorId> seen{from};
        std::vector<ir::TensorId> stack{from};
        while (!stack.empty()) {
            const ir::TensorId t = stack.back();
            stack.pop_back();
            if (graph.tensor(t).role == ir::Role::Output)
                reached.push_back(ir::OpId{});
            for (ir::OpId c : graph.tensor(t).consumers) {
                const ir::Op &op = graph.op(c);
                if (!through(op)) {
                    if (std::find(reached.begin(), reached.end(), c) == reached.end())
                        reached.push_back(c);
                    continue;
                }
                for (ir::TensorId o : op.outputs)
                    if (seen.insert(o).second)
                        stack.push_back(o);
            }
        }
        return reached;
    };
    // Back from a tensor through reshapes, transposes and pointwise ops of
    // one activation input (pointwise ops alone with `pointwiseOnly`) to
    // the op that made it.
    auto source = [&](ir::TensorId t, bool pointwiseOnly = false) -> ir::OpId {
        for (int hops = 0; hops < 64; ++hops) {
            const ir::OpId p = graph.tensor(t).producer;
            if (!p.valid())
                return p;
            const ir::Op &op = graph.op(p);
            if ((pointwiseOnly || !movesData(op.type)) && !isPointwise(op.type))
                return p;
            ir::TensorId next;
            int activations = 0;
            for (ir::TensorId in : op.inputs)
                if (in.valid() && graph.tensor(in).role == ir::Role::Activation) {
                    next = in;
                    ++activations;
                }
            if (activations != 1)
                return p;
            t = next;
        }
        return {};
    };
    // A stacked projection's bias is [k, 1, m].
    auto biasOf = [&](const ir::Op &linear) -> std::optional<ir::TensorId> {
        if (linear.type == "Gemm" && linear.inputs.size() > 2 && linear.inputs[2].valid())
            return linear.inputs[2];
        const std::size_t rank = isStackedProjection(graph, linear) ? 3 : 1;
        for (ir::OpId c : graph.tensor(linear.outputs[0]).consumers) {
            const ir::Op &add = graph.op(c);
            if (add.type != "Add" || add.inputs.size() != 2)
                continue;
            for (ir::TensorId in : add.inputs)
                if (graph.tensor(in).role == ir::Role::Parameter && graph.tensor(in).shape.size() == rank)
                    return in;
        }
        return std::nullopt;
    };
    // The first role found stays, but for None (a core that cannot split).
    auto mark = [&](const ir::Op &linear, MegatronRole role) {
        const auto w = isStackedProjection(graph, linear) ? std::optional<ir::TensorId>(linear.inputs[1])
                                                          : linearWeight(graph, linear);
        if (!w)
            return;
        const auto b = biasOf(linear);
        for (const auto &t : {std::optional<ir::TensorId>(w), b})
            if (t && (role == MegatronRole::None || !roles.count(*t)))
                roles[*t] = role;
    };
    const auto &ops = graph.ops();
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const ir::Op &op = ops[i];
        if (!linearWeight(graph, op) || op.outputs.empty())
            continue;
        // An MLP: this linear's output reaches one linear, through pointwise ops alone.
        const auto reached = reach(op.outputs[0], [&](const ir::Op &o) { return isPointwise(o.type); });
        if (reached.size() == 1 && reached[0].valid() && linearWeight(graph, graph.op(reached[0]))) {
            mark(op, MegatronRole::Column);
            mark(graph.op(reached[0]), MegatronRole::Row);
        }
    }
    // Attention cores: a matmul of two activations whose output a softmax
    // reads (through pointwise ops: a scale, a mask), then the matmul of
    // the softmax's output by the values.
    for (std::size_t i = 0; i < ops.size(); ++i) {
        const ir::Op &scores = ops[i];
        if (scores.type != "MatMul" || scores.inputs.size() != 2 || scores.outputs.empty() ||
            graph.tensor(scores.inputs[0]).role != ir::Role::Activation ||
            graph.tensor(scores.inputs[1]).role != ir::Role::Activation)
            continue;
        const auto toSoftmax = reach(scores.outputs[0], [&](const ir::Op &o) { return isPointwise(o.type); });
        if (toSoftmax.size() != 1 || !toSoftmax[0].valid() || graph.op(toSoftmax[0]).type != "Softmax")
            continue;
        const auto toValues = reach(graph.op(toSoftmax[0]).outputs[0],
                                    [&](const ir::Op &o) { return isPointwise(o.type); });
        if (toValues.size() != 1 || !toValues[0].valid() || graph.op(toValues[0]).type != "MatMul" ||
            source(graph.op(toValues[0]).inputs[0]) != toSoftmax[0])
            continue;
        const ir::Op &context = graph.op(toValues[0]);
        const auto toOutput = reach(context.outputs[0], [&](const ir::Op &o) { return movesData(o.type); });
        if (toOutput.size() != 1 || !toOutput[0].valid() || !linearWeight(graph, graph.op(toOutput[0])))
            continue;
        std::vector<ir::OpId> projections;
        bool fused = false, found = true;
        for (ir::TensorId in : {scores.inputs[0], scores.inputs[1], context.inputs[1]}) {
            const ir::OpId p = source(in);
            if (p.valid() && linearWeight(graph, graph.op(p))) {
                projections.push_back(p);
                continue;
            }
            // A slice or split of one linear's output by its features, before
            // any reshape into heads; or a part of a stacked projection,
            // which splits by heads as separate linears do.
            if (p.valid() && (graph.op(p).type == "Slice" || graph.op(p).type == "Split")) {
                const ir::OpId fusedBy =
                    graph.op(p).inputs.empty() ? ir::OpId{} : source(graph.op(p).inputs[0], true);
                if (fusedBy.valid() && isStackedProjection(graph, graph.op(fusedBy))) {
                    projections.push_back(fusedBy);
                    continue;
                }
                fused = fused || (fusedBy.valid() && linearWeight(graph, graph.op(fusedBy)));
            }
            found = false;
        }
        const ir::Op &output = graph.op(toOutput[0]);
        if (found) {
            for (ir::OpId p : projections)
                mark(graph.op(p), MegatronRole::Column);
            mark(output, MegatronRole::Row);
        } else if (fused) {
            mark(output, MegatronRole::None);
        }
    }
    return roles;
}

std::map<ir::TensorId, ShardingSpec> megatronParameters(const ir::Graph &graph, const sharding::Mesh &mesh, int tp,
                                                        const std::string &modelSource,
                                                        std::vector<std::string> &warnings)
{
    std::map<ir::TensorId, ShardingSpec> fixed;
    const auto &axis = mesh.axes[static_cast<std::size_t>(tp)];
    int matched = 0;
    const std::map<ir::TensorId, MegatronRole> structure = structuralRoles(graph);
    for (auto t : graph.tensorsWithRole(ir::Role::Parameter)) {
        const ir::Tensor &tensor = graph.tensor(t);
        // The structure decides where it finds a pair, the names elsewhere
        // (embeddings, heads, fused projections it does not follow).
        const auto found = structure.find(t);
        const MegatronRole role = found != structure.end() ? found->second : megatronRole(tensor.name);
        if (role == MegatronRole::None)
            continue;
        // ".bias", "/bias", torch's MultiheadAttention "in_proj_bias"
        const bool bias = tensor.name.ends_with("bias");
        std::optional<int> dim;
        if (role == MegatronRole::Embedding)
            dim = 0;
        else if (bias && role == MegatronRole::Column && isFusedPerHeadBias(graph, t))
            dim = 0;  // [kv, 1, (g + 2)·d], split by heads as its weight
        else if (bias)
            dim = role == MegatronRole::Column ? std::optional<int>(static_cast<int>(tensor.shape.size()) - 1)
                                               : std::nullopt;
        else
            dim = linearDim(graph, t, role);
        if (!dim) {
            if (!bias)
                warnings.push_back("megatron: '" + tensor.name + "' is named like a " + std::string(toString(role)) +
                                   " weight but no MatMul or Gemm reads it; kept replicated");
            continue;
        }
        ShardingSpec spec = ShardingSpec::replicated(mesh.rank());
        spec.placements[static_cast<std::size_t>(tp)] = Placement::shard(*dim);
        const auto parts = dottedParts(tensor.name);  // "lm_head.weight"; one part for "onnx::MatMul_12"
        const bool vocabulary = role == MegatronRole::Embedding || (parts.size() >= 2 && parts.rbegin()[1] == "lm_head");
        if (auto problem = spec.problem(tensor.shape, mesh); problem && vocabulary) {
            // Megatron pads the vocabulary to a multiple of the degree; a
            // plan of this model cannot, so the table stays whole.
            warnings.push_back("megatron: vocabulary of '" + tensor.name + "' " + ir::shapeToString(tensor.shape) +
                               " does not divide over axis '" + axis.name + "' of size " + std::to_string(axis.size) +
                               "; kept replicated (" + *problem + ")");
            continue;
        } else if (problem)
            refuse(modelSource, "megatron",
                   "cannot split " + std::string(toString(role)) + " parameter '" + tensor.name + "' " +
                       ir::shapeToString(tensor.shape) + " over axis '" + axis.name + "' of size " +
                       std::to_string(axis.size) + ": " + *problem);
        fixed[t] = spec;
        ++matched;
    }
    if (matched == 0)
        warnings.push_back("megatron: no parameter has a Megatron module name (q_proj, fc_in, mlp/fc1, ...) and no "
                           "linear pair around an activation or attention core was found; "
                           "axis '" + axis.name + "' splits nothing");
    return fixed;
}

// Attention splits by heads: every head-splitting reshape [b, s, n·d] ->
// [b, s, n, d] must have n divisible by the tensor-parallel degree.
void checkHeads(const ir::Graph &graph, const sharding::MeshAxis &axis, const std::string &modelSource)
{
    for (const auto &op : graph.ops()) {
        if (op.type != "Reshape" || op.inputs.empty() || op.outputs.empty())
            continue;
        const ir::Shape &in = graph.tensor(op.inputs[0]).shape, &out = graph.tensor(op.outputs[0]).shape;
        if (in.size() != 3 || out.size() != 4 || in[0] != out[0] || in[1] != out[1] || out[2] * out[3] != in[2])
            continue;
        // A stacked projection's input, [a, t, h] -> [a, 1, t, h] (t = 1:
        // torch's sequence-first [s, 1, h]), splits no heads.
        const auto &readers = graph.tensor(op.outputs[0]).consumers;
        if (out[2] == 1 && !readers.empty() &&
            std::all_of(readers.begin(), readers.end(),
                        [&](ir::OpId c) { return isStackedProjection(graph, graph.op(c)); }))
            continue;
        if (out[2] % axis.size != 0)
            refuse(modelSource, "megatron",
                   std::to_string(out[2]) + " attention heads (split by '" + op.name +
                       "') cannot be divided over axis '" + axis.name + "' of size " + std::to_string(axis.size));
    }
}

} // namespace

std::string_view toString(ReferenceMethod method)
{
    switch (method) {
    case ReferenceMethod::Megatron:
        return "megatron";
    case ReferenceMethod::DataParallel:
        return "dp";
    case ReferenceMethod::Replicate:
        return "replicate";
    }
    return "?";
}

std::optional<ReferenceMethod> referenceMethodFromString(std::string_view s)
{
    for (auto m : {ReferenceMethod::Megatron, ReferenceMethod::DataParallel, ReferenceMethod::Replicate})
        if (toString(m) == s)
            return m;
    return std::nullopt;
}

std::string_view toString(MegatronRole role)
{
    switch (role) {
    case MegatronRole::None:
        return "replicated";
    case MegatronRole::Column:
        return "column-parallel";
    case MegatronRole::Row:
        return "row-parallel";
    case MegatronRole::Embedding:
        return "vocabulary-parallel embedding";
    }
    return "?";
}

MegatronRole megatronRole(const std::string &parameterName)
{
    const auto parts = dottedParts(parameterName);
    if (parts.size() < 2 || (parts.back() != "weight" && parts.back() != "bias"))
        return MegatronRole::None;
    const std::string &module = parts[parts.size() - 2];
    const std::string parent = parts.size() >= 3 ? parts[parts.size() - 3] : "";
    static const std::set<std::string> kColumn{
        "q_proj",  "k_proj", "v_proj",       "query",           "key",  "value",   "q",       "k",
        "v",       "fc_in",  "fc1",          "c_fc",            "c_attn", "gate_proj", "up_proj", "w1",
        "w3",      "v1",     "wi",           "wi_0",            "wi_1", "first",   "lm_head", "embed_out",
        "output",  "query_key_value", "wqkv", "Wqkv", "qkv_proj", "gate_up_proj", "dense_h_to_4h"};
    static const std::set<std::string> kRow{"out_proj", "o_proj", "o",  "fc_out", "fc2",          "c_proj",
                                            "down_proj", "w2",    "wo", "second", "dense_4h_to_h"};
    static const std::set<std::string> kEmbedding{"wte", "embed_tokens", "word_embeddings", "shared", "embed_in",
                                                  "tok_embeddings"};
    if (module == "dense")  // BERT's intermediate/output; GPT-NeoX's, BLOOM's and Falcon's attention output
        return parent == "intermediate"                                                  ? MegatronRole::Column
               : parent == "output" || parent == "attention" || parent == "self_attention" ? MegatronRole::Row
                                                                                            : MegatronRole::None;
    if (kColumn.count(module))
        return MegatronRole::Column;
    if (kRow.count(module))
        return MegatronRole::Row;
    if (kEmbedding.count(module) && parts.back() == "weight")
        return MegatronRole::Embedding;
    return MegatronRole::None;
}

plan::Plan referencePlan(const ir::Graph &graph, const std::string &modelSource, const sharding::Mesh &mesh,
                         ReferenceMethod method, const ReferenceOptions &options)
{
    std::map<ir::TensorId, ShardingSpec> fixed;
    std::vector<std::string> warnings;
    auto partial = sharding::PartialResolution::Replicate;
    const std::string name(toString(method));
    if (method == ReferenceMethod::Megatron) {
        const int tp = mesh.axisIndex("model").value_or(mesh.rank() - 1);
        checkHeads(graph, mesh.axes[static_cast<std::size_t>(tp)], modelSource);
        fixed = megatronParameters(graph, mesh, tp, modelSource, warnings);
        std::vector<int> data;
        for (int a = 0; a < mesh.rank(); ++a)
            if (a != tp)
                data.push_back(a);
        splitBatch(graph, mesh, data, modelSource, name, fixed);
        if (options.sequenceParallel) {
            partial = sharding::PartialResolution::ShardSequence;
            // The residual stream starts on sequence shards: embedding
            // lookups are scattered over the sequence (Megatron does the
            // same), whatever their table's split gives.
            const auto first = sharding::propagateSpecs(graph, mesh, fixed, partial);
            for (const auto &op : graph.ops()) {
                if (op.type != "Gather" || graph.tensor(op.inputs[0]).role != ir::Role::Parameter)
                    continue;
                const ir::Tensor &out = graph.tensor(op.outputs[0]);
                ShardingSpec spec = first[op.outputs[0].index()];
                spec.placements[static_cast<std::size_t>(tp)] = Placement::shard(1);
                if (out.shape.size() == 3 && !spec.problem(out.shape, mesh))
                    fixed[op.outputs[0]] = spec;
            }
        }
    } else if (method == ReferenceMethod::DataParallel) {
        std::vector<int> all;
        for (int a = 0; a < mesh.rank(); ++a)
            all.push_back(a);
        splitBatch(graph, mesh, all, modelSource, name, fixed);
        const auto inputs = graph.tensorsWithRole(ir::Role::Input);
        const bool batchOfOne = std::any_of(inputs.begin(), inputs.end(), [&](ir::TensorId t) {
            return !graph.tensor(t).shape.empty() && graph.tensor(t).shape[0] == 1;
        });
        if (fixed.empty() && mesh.deviceCount() > 1)
            refuse(modelSource, name,
                   batchOfOne ? "the inputs' batch is 1, nothing to split (bind a symbolic batch with --batch N)"
                              : "no input has a batch dim to split");
    }
    const auto specs = sharding::propagateSpecs(graph, mesh, fixed, partial);
    plan::Plan p = plan::makePlan(graph, modelSource, mesh, specs, plan::SpecSource::Reference, name, options.cost);
    p.sequenceParallel = method == ReferenceMethod::Megatron && options.sequenceParallel;
    p.searchWarnings = warnings;
    return p;
}

std::vector<NamedPlan> applicableReferencePlans(const ir::Graph &graph, const std::string &modelSource,
                                                const sharding::Mesh &mesh, const cost::CostOptions &cost)
{
    std::vector<NamedPlan> plans;
    const std::pair<ReferenceMethod, bool> methods[] = {{ReferenceMethod::Megatron, false},
                                                        {ReferenceMethod::Megatron, true},
                                                        {ReferenceMethod::DataParallel, false},
                                                        {ReferenceMethod::Replicate, false}};
    for (const auto &[method, sequenceParallel] : methods) {
        ReferenceOptions options;
        options.sequenceParallel = sequenceParallel;
        options.cost = cost;
        try {
            plans.push_back({std::string(toString(method)) + (sequenceParallel ? "-sp" : ""),
                             referencePlan(graph, modelSource, mesh, method, options)});
        } catch (const TapestryError &) {
            // the method does not apply to this model on this mesh
        }
    }
    return plans;
}

} // namespace tapestry::search
