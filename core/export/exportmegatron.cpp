#include "export/exportmegatron.h"

#include "cost/activationmemory.h"
#include "ir/error.h"
#include "search/referenceplan.h"
#include "search/techniquesearch.h"

#include <algorithm>
#include <functional>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

namespace tapestry::exports {

namespace {

bool startsWith(const std::string &s, const std::string &prefix)
{
    return s.compare(0, prefix.size(), prefix) == 0;
}

// The parameter a linear (MatMul, Gemm) reads as its weight: [in, out], or
// a fused query/key/value weight (Megatron-LM's linear_qkv, split by heads).
std::optional<ir::TensorId> weightOf(const ir::Graph &g, const ir::Op &op)
{
    if (op.type != "MatMul" && op.type != "Gemm")
        return std::nullopt;
    for (auto x : op.inputs)
        if (g.tensor(x).role == ir::Role::Parameter && (g.tensor(x).shape.size() == 2 || isFusedQkvWeight(g.tensor(x))))
            return x;
    return std::nullopt;
}

// A weight's input and output features.
std::int64_t inFeatures(const ir::Tensor &w)
{
    return w.shape[w.shape.size() - 2];
}
std::int64_t outFeatures(const ir::Tensor &w)
{
    return w.shape.back();
}

// The activation a linear reads (its input other than the weight).
ir::TensorId linearInput(const ir::Graph &g, const ir::Op &op)
{
    for (auto x : op.inputs)
        if (g.tensor(x).role != ir::Role::Parameter)
            return x;
    return {};
}

// A linear's output after its bias add, where one follows.
ir::TensorId linearResult(const ir::Graph &g, ir::OpId linear, bool *bias = nullptr)
{
    const ir::TensorId y = g.op(linear).outputs[0];
    if (g.tensor(y).consumers.size() == 1) {
        const ir::Op &next = g.op(g.tensor(y).consumers[0]);
        if (next.type == "Add")
            for (auto x : next.inputs)
                if (const ir::Tensor &t = g.tensor(x);
                    t.role == ir::Role::Parameter && (t.shape.size() == 1 || isFusedQkvBias(t))) {
                    if (bias)
                        *bias = true;
                    return next.outputs[0];
                }
    }
    if (bias)
        *bias = false;
    return y;
}

// The linear an attention core's operand comes from: back through data
// movement, bias adds and the rotary embedding (following the first input
// that is an activation). `rotary` is set where a product with a graph
// input (the rotary cos/sin tables) is on the way.
std::optional<ir::OpId> linearBefore(const ir::Graph &g, ir::TensorId t, bool *rotary)
{
    for (int steps = 0; steps < 64; ++steps) {
        const ir::OpId p = g.tensor(t).producer;
        if (!p.valid())
            return std::nullopt;
        const ir::Op &op = g.op(p);
        if (weightOf(g, op))
            return p;
        ir::TensorId next;
        for (auto x : op.inputs) {
            const ir::Tensor &in = g.tensor(x);
            if (in.role == ir::Role::Input && op.type == "Mul" && in.shape.size() >= 2 && rotary)
                *rotary = true;
            if (!next.valid() && in.role == ir::Role::Activation)
                next = x;
        }
        if (!next.valid())
            return std::nullopt;
        t = next;
    }
    return std::nullopt;
}

// The linear reading an attention core's context: forward through data
// movement to the first op that reads a weight.
std::optional<ir::OpId> linearAfter(const ir::Graph &g, ir::TensorId t)
{
    for (int steps = 0; steps < 16; ++steps) {
        const auto &consumers = g.tensor(t).consumers;
        if (consumers.size() != 1)
            return std::nullopt;
        const ir::Op &op = g.op(consumers[0]);
        if (weightOf(g, op))
            return consumers[0];
        if (op.outputs.size() != 1)
            return std::nullopt;
        t = op.outputs[0];
    }
    return std::nullopt;
}

std::string number(double v)
{
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", v);
    return buffer;
}

} // namespace

MegatronModel megatronModel(const ir::Graph &g, const std::string &planInput)
{
    auto fail = [&](const std::string &name, const std::string &problem) {
        throw TapestryError(Error{planInput, name, "megatron: " + problem});
    };
    MegatronModel m;
    const auto kinds = cost::attentionLayerKinds(g);
    if (kinds.empty())
        fail({}, "the model has no attention layers; pretrain_gpt.py builds decoder-only transformers");
    if (kinds.size() > 1)
        fail(kinds[1], "layers of two kinds (" + kinds[0] + " and " + kinds[1] +
                           "); pretrain_gpt.py builds one stack of decoder layers");

    // Each layer by its attention core: the score and context MatMuls.
    const auto roles = cost::recomputeRoles(g);
    std::map<std::string, std::pair<ir::OpId, ir::OpId>> cores;  // by layer scope
    for (std::size_t o = 0; o < g.opCount(); ++o) {
        const ir::OpId id(static_cast<std::int32_t>(o));
        const ir::Op &op = g.op(id);
        if (op.type != "MatMul" || !(roles[o] & (cost::kScore | cost::kContext)))
            continue;
        const std::string scope(cost::layerScope(op.name));
        auto &core = cores[scope];
        if ((roles[o] & cost::kScore) ? core.first.valid() : core.second.valid())
            fail(op.name, "two attention cores in layer " + scope + "; a Megatron-LM layer has one");
        ((roles[o] & cost::kScore) ? core.first : core.second) = id;
    }
    m.layers = static_cast<int>(cores.size());
    // The first layer stands for all: the layers are one class of repeats.
    const auto &[scope, core] = *std::min_element(cores.begin(), cores.end(), [&](const auto &a, const auto &b) {
        return a.second.first.value < b.second.first.value;
    });
    if (!core.first.valid() || !core.second.valid())
        fail(scope, "an attention core without its score or context MatMul");
    const ir::Op &score = g.op(core.first);
    const ir::Op &context = g.op(core.second);
    bool rotary = false;
    const auto q = linearBefore(g, score.inputs[0], &rotary);
    const auto k = linearBefore(g, score.inputs[1], nullptr);
    const auto v = linearBefore(g, context.inputs[1], nullptr);
    const auto o = linearAfter(g, context.outputs[0]);
    if (!q || !k || !v || !o)
        fail(score.name, "the attention's query, key, value and output projections are not linears of their own");
    const auto &qWeight = g.tensor(*weightOf(g, g.op(*q)));
    const auto &kWeight = g.tensor(*weightOf(g, g.op(*k)));
    const auto &probs = g.tensor(score.outputs[0]).shape;  // [b, heads, s, s]
    if (probs.size() != 4)
        fail(score.name, "attention scores of rank " + std::to_string(probs.size()) + "; expected [b, heads, s, s]");
    m.hidden = inFeatures(qWeight);
    m.heads = probs[1];
    m.seqLength = probs[2];
    const std::int64_t headDim = outFeatures(qWeight) / m.heads;
    m.queryGroups = outFeatures(kWeight) / headDim;
    if (headDim * m.heads != m.hidden)
        m.kvChannels = headDim;
    m.dtype = qWeight.dtype;

    // Pre-norm: the query projection reads a norm of the layer's input.
    ir::TensorId attnIn = linearInput(g, g.op(*q));
    // (A fused q/k/v projection reads it viewed as [b, 1, s, h].)
    if (const ir::OpId view = g.tensor(attnIn).producer; view.valid() && g.op(view).type == "Reshape")
        attnIn = g.op(view).inputs[0];
    const ir::OpId norm = g.tensor(attnIn).producer;
    if (!norm.valid() || !g.op(norm).isNorm() || !startsWith(g.op(norm).name, scope))
        fail(g.tensor(attnIn).name, "the attention reads its input without a norm before it (post-norm); "
                                    "Megatron-LM's GPT layers normalise first");
    const ir::Op &normOp = g.op(norm);
    m.normalization = normOp.type == "RMSNorm" ? "RMSNorm" : "LayerNorm";
    m.normEpsilon = ir::floatAttr(normOp.attributes, "epsilon").value_or(1e-5);

    // The rest of the layer's linears are the MLP's: those reading one input
    // (two where it is gated), and the one after them.
    const std::set<std::int32_t> attention{q->value, k->value, v->value, o->value};
    std::map<std::int32_t, std::vector<ir::OpId>> mlpByInput;
    std::vector<ir::OpId> mlp;
    std::set<int> biases;
    for (std::size_t i = 0; i < g.opCount(); ++i) {
        const ir::OpId id(static_cast<std::int32_t>(i));
        const ir::Op &op = g.op(id);
        if (!startsWith(op.name, scope) || !weightOf(g, op))
            continue;
        bool bias = false;
        linearResult(g, id, &bias);
        biases.insert(bias ? 1 : 0);
        if (attention.count(id.value))
            continue;
        mlp.push_back(id);
        mlpByInput[linearInput(g, op).value].push_back(id);
    }
    for (std::size_t i = 0; i < g.opCount(); ++i) {
        const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(i)));
        if (startsWith(op.name, scope) && op.type == "TopK")
            fail(op.name, "a mixture of experts (a router's TopK); this export has no Megatron-LM MoE arguments");
    }
    if (biases.size() > 1)
        fail(scope, "some linears of the layer have biases and others not; Megatron-LM adds them to all or none");
    m.linearBias = biases.count(1) > 0;
    if (mlp.size() < 2 || mlpByInput.size() != 2)
        fail(scope, "an MLP of " + std::to_string(mlp.size()) +
                        " linears; Megatron-LM's MLP is one or two input linears and an output linear");
    // The input linears read the second norm's output.
    std::vector<ir::OpId> in;
    for (const auto &[input, linears] : mlpByInput)
        if (const ir::OpId p = g.tensor(ir::TensorId(input)).producer; p.valid() && g.op(p).isNorm())
            in = linears;
    if (!in.empty() && in.size() == mlp.size() - 1 && in.size() <= 2)
        m.ffnHidden = outFeatures(g.tensor(*weightOf(g, g.op(in[0]))));
    else
        fail(scope, "an MLP Megatron-LM does not build (" + std::to_string(mlp.size()) + " linears)");
    // The activation: on the first input linear's output (the gate).
    std::string activation;
    std::string activationOp;
    for (const ir::OpId linear : in)
        for (auto c : g.tensor(linearResult(g, linear)).consumers)
            if (g.op(c).type != "Mul") {
                activation = g.op(c).type;
                activationOp = g.op(c).name;
                if (activation == "Gelu")
                    m.openaiGelu = ir::stringAttr(g.op(c).attributes, "approximate").value_or("none") == "tanh";
            }
    if (activation.empty())
        fail(scope, "an MLP without an activation after its input linears; Megatron-LM's MLP computes one");
    if (in.size() == 2) {
        if (activation != "Silu")
            fail(activationOp, "a gated MLP with " + activation + "; Megatron-LM's --swiglu gates with SiLU");
        m.swiglu = true;
    } else if (activation != "Gelu") {
        fail(activationOp, "an MLP with " + activation + "; Megatron-LM's GPT MLP computes GELU");
    }

    // Embeddings, the LM head and the loss.
    std::int64_t positions = 0;
    ir::TensorId logits;
    for (std::size_t i = 0; i < g.opCount(); ++i) {
        const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(i)));
        if (op.type == "SoftmaxCrossEntropyLoss" && !op.inputs.empty())
            logits = op.inputs[0];
        if (op.type == "Dropout")
            m.dropout = true;
    }
    if (!logits.valid())
        fail({}, "no cross-entropy loss on logits; pretrain_gpt.py trains a language model");
    m.vocab = g.tensor(logits).shape.back();
    const ir::OpId head = g.tensor(logits).producer;
    if (!head.valid() || g.op(head).type != "MatMul")
        fail(g.tensor(logits).name, "logits not computed by a linear LM head");
    m.untiedOutput = weightOf(g, g.op(head)).has_value();
    // Embedding tables: the tokens' (as wide as the vocabulary) and at
    // most one more, the positions'.
    std::set<std::int32_t> tables;
    bool tokens = false;
    for (std::size_t i = 0; i < g.opCount(); ++i) {
        const ir::Op &op = g.op(ir::OpId(static_cast<std::int32_t>(i)));
        if (op.type != "Gather" || op.inputs.empty() || g.tensor(op.inputs[0]).role != ir::Role::Parameter ||
            !tables.insert(op.inputs[0].value).second)
            continue;
        const ir::Tensor &table = g.tensor(op.inputs[0]);
        if (table.shape[0] == m.vocab && !tokens)
            tokens = true;
        else if (positions == 0)
            positions = table.shape[0];
        else
            fail(table.name, "a third embedding table (token types); Megatron-LM's GPT embeds tokens and "
                             "positions only");
    }
    if (positions > 0) {
        m.positionEmbedding = "learned_absolute";
        m.maxPositions = positions;
    } else {
        m.positionEmbedding = rotary ? "rope" : "none";
        m.maxPositions = m.seqLength;
    }
    return m;
}

std::vector<std::string> MegatronArguments::arguments() const
{
    std::vector<std::string> a{"--tensor-model-parallel-size", std::to_string(tensorParallel),
                               "--pipeline-model-parallel-size", std::to_string(pipelineParallel)};
    if (layersPerVirtualStage > 0)
        a.insert(a.end(), {"--num-layers-per-virtual-pipeline-stage", std::to_string(layersPerVirtualStage)});
    if (firstStageLayers > 0)
        a.insert(a.end(), {"--decoder-first-pipeline-num-layers", std::to_string(firstStageLayers)});
    if (lastStageLayers > 0)
        a.insert(a.end(), {"--decoder-last-pipeline-num-layers", std::to_string(lastStageLayers)});
    if (sequenceParallel)
        a.push_back("--sequence-parallel");
    // The model.
    a.insert(a.end(), {"--num-layers", std::to_string(model.layers), "--hidden-size", std::to_string(model.hidden),
                       "--ffn-hidden-size", std::to_string(model.ffnHidden), "--num-attention-heads",
                       std::to_string(model.heads)});
    if (model.queryGroups != model.heads)
        a.insert(a.end(), {"--group-query-attention", "--num-query-groups", std::to_string(model.queryGroups)});
    if (model.kvChannels > 0)
        a.insert(a.end(), {"--kv-channels", std::to_string(model.kvChannels)});
    if (model.swiglu)
        a.push_back("--swiglu");
    if (model.openaiGelu)
        a.push_back("--openai-gelu");
    a.insert(a.end(), {"--normalization", model.normalization, "--norm-epsilon", number(model.normEpsilon),
                       "--position-embedding-type", model.positionEmbedding, "--max-position-embeddings",
                       std::to_string(model.maxPositions), "--seq-length", std::to_string(model.seqLength)});
    if (model.untiedOutput)
        a.push_back("--untie-embeddings-and-output-weights");
    if (!model.linearBias)
        a.push_back("--disable-bias-linear");
    if (!model.dropout)
        a.insert(a.end(), {"--attention-dropout", "0.0", "--hidden-dropout", "0.0"});
    if (model.dtype == ir::DType::BF16)
        a.push_back("--bf16");
    else if (model.dtype == ir::DType::F16)
        a.push_back("--fp16");
    if (globalBatch > 0)
        a.insert(a.end(), {"--micro-batch-size", std::to_string(microBatchSize), "--global-batch-size",
                           std::to_string(globalBatch)});
    // The memory techniques. Without flash attention the plan keeps the
    // s x s scores, as the unfused backend does.
    a.insert(a.end(), {"--attention-backend", techniques.flashAttention ? "flash" : "unfused"});
    if (recompute == cost::Recompute::Selective)
        a.insert(a.end(), {"--recompute-granularity", "selective"});
    else if (recompute == cost::Recompute::Full)
        // Every layer keeps its input and runs its forward pass again.
        a.insert(a.end(), {"--recompute-granularity", "full", "--recompute-method", "uniform",
                           "--recompute-num-layers", "1"});
    if (techniques.zeroStage == 1 || techniques.zeroStage == 2)
        a.push_back("--use-distributed-optimizer");
    else if (techniques.zeroStage >= 3)
        a.insert(a.end(), {"--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"});
    if (techniques.offloadOptimizer)
        a.insert(a.end(), {"--optimizer-cpu-offload", "--use-precision-aware-optimizer"});
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
    // Megatron-LM's tensor-parallel ranks read one batch.
    if (in.tensorParallelAxis >= 0)
        for (auto t : g.tensorsWithRole(ir::Role::Input)) {
            const auto &p = in.specs[t.index()].placements[static_cast<std::size_t>(in.tensorParallelAxis)];
            if (p.isShard())
                throw TapestryError(Error{planInput, g.tensor(t).name,
                                          "megatron: split on dim " + std::to_string(p.dim) + " over axis " +
                                              mesh.axes[static_cast<std::size_t>(in.tensorParallelAxis)].name +
                                              ", which also splits the weights; Megatron-LM's tensor-parallel "
                                              "ranks read one batch"});
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
    out.model = megatronModel(g, planInput);

    out.techniques = in.plan.costOptions.techniques;
    out.recompute = cost::recomputeOf(out.techniques, cost::attentionLayerKinds(g).front());
    if (out.techniques.zeroStage >= 1) {
        // The distributed optimizer and Megatron-FSDP shard over the
        // data-parallel group: every axis but the tensor-parallel one.
        std::vector<std::string> data;
        for (int a : out.dataParallelAxes)
            if (mesh.axes[static_cast<std::size_t>(a)].size > 1)
                data.push_back(mesh.axes[static_cast<std::size_t>(a)].name);
        if (const auto &zero = out.techniques.zeroAxes) {
            std::vector<std::string> named;
            for (const auto &name : *zero)
                if (const auto it = std::find_if(mesh.axes.begin(), mesh.axes.end(),
                                                 [&](const auto &axis) { return axis.name == name; });
                    it != mesh.axes.end() && it->size > 1)
                    named.push_back(name);
            std::sort(named.begin(), named.end());
            auto sorted = data;
            std::sort(sorted.begin(), sorted.end());
            if (named != sorted) {
                auto list = [](const std::vector<std::string> &names) {
                    std::string s;
                    for (const auto &n : names)
                        s += (s.empty() ? "" : ", ") + n;
                    return s.empty() ? std::string("none") : s;
                };
                throw TapestryError(Error{planInput, {}, "megatron: ZeRO-" + std::to_string(out.techniques.zeroStage) +
                                                             " over axes " + list(named) +
                                                             ", where Megatron-LM shards over the data-parallel "
                                                             "axes (" + list(sorted) + ")"});
            }
        }
        if (data.empty())
            out.notes.push_back("ZeRO-" + std::to_string(out.techniques.zeroStage) +
                                " has no data-parallel group to shard over: Megatron-LM keeps the optimizer state "
                                "whole on each rank");
        else if (!out.techniques.zeroAxes && in.tensorParallelAxis >= 0)
            out.notes.push_back("Megatron-LM shards ZeRO's state over the data-parallel ranks only; the plan "
                                "costs norms and other replicated parameters sharded over the tensor-parallel "
                                "axis too");
    }
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
            if (op.isNorm() && !op.inputs.empty()) {
                const auto &p = in.specs[op.inputs[0].index()].placements[static_cast<std::size_t>(in.tensorParallelAxis)];
                out.sequenceParallel = out.sequenceParallel || (p.isShard() && p.dim == 1);
            }
        }

    if (const auto &pp = in.plan.pipeline) {
        // Megatron-LM runs 1F1B, interleaved where there are virtual stages;
        // its chunks are equal but for the first and the last stage's.
        if (pp->schedule == cost::Schedule::GPipe)
            throw TapestryError(Error{planInput, "$.pipeline.schedule",
                                      "megatron: Megatron-LM runs 1F1B pipelines, not GPipe; plan the pipeline "
                                      "with 1f1b (its memory is less, its step the same)"});
        std::vector<int> sizes;
        std::vector<int> bounds{0};
        bounds.insert(bounds.end(), pp->cuts.begin(), pp->cuts.end());
        bounds.push_back(pp->layers);
        for (std::size_t i = 0; i + 1 < bounds.size(); ++i)
            sizes.push_back(bounds[i + 1] - bounds[i]);
        out.pipelineParallel = pp->stages;
        if (pp->virtualStages > 1) {
            if (std::adjacent_find(sizes.begin(), sizes.end(), std::not_equal_to<>()) != sizes.end())
                throw TapestryError(Error{planInput, "$.pipeline.cuts",
                                          "megatron: interleaved chunks of " + std::to_string(sizes.front()) +
                                              " and " + std::to_string(*std::max_element(sizes.begin(), sizes.end())) +
                                              " layers; Megatron-LM's virtual stages are alike"});
            out.layersPerVirtualStage = sizes.front();
        } else if (sizes.size() > 2) {
            const int middle = sizes[1];
            for (std::size_t i = 1; i + 1 < sizes.size(); ++i)
                if (sizes[i] != middle)
                    throw TapestryError(Error{planInput, "$.pipeline.cuts",
                                              "megatron: stage " + std::to_string(i) + " of " +
                                                  std::to_string(sizes[i]) + " layers beside stages of " +
                                                  std::to_string(middle) +
                                                  "; Megatron-LM's stages between the first and the last are alike"});
            if (sizes.front() != middle)
                out.firstStageLayers = sizes.front();
            if (sizes.back() != middle)
                out.lastStageLayers = sizes.back();
        } else if (sizes.size() == 2 && sizes[0] != sizes[1]) {
            out.firstStageLayers = sizes[0];
            out.lastStageLayers = sizes[1];
        }
    }

    out.notes.push_back("the tokenizer sets the vocabulary: the plan's is " + std::to_string(out.model.vocab) +
                        ", which Megatron-LM pads to a multiple of --make-vocab-size-divisible-by (128) x " +
                        std::to_string(out.tensorParallel));
    if (out.model.positionEmbedding == "rope")
        out.notes.push_back("the rotary base is not in the graph: add --rotary-base as the model's config says "
                            "(Megatron-LM's default is 10000)");
    if (in.tensorParallelAxis >= 0 && in.tensorParallelAxis + 1 != static_cast<int>(mesh.axes.size()))
        out.notes.push_back("Megatron-LM numbers tensor-parallel ranks consecutively; the plan's tensor-parallel "
                            "axis " + mesh.axes[static_cast<std::size_t>(in.tensorParallelAxis)].name +
                            " is not its innermost, so the job's tensor-parallel groups are other devices than "
                            "the plan's");
    return out;
}

} // namespace tapestry::exports
