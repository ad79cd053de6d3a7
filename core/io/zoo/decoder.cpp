#include "io/zoo/decoder.h"

#include "io/zoo/attention.h"
#include "io/zoo/families.h"
#include "io/zoo/knobcheck.h"

#include <cmath>

namespace tapestry::io::zoo {

namespace {

// A knob the family may leave out.
std::int64_t knobOr(const Knobs &knobs, const std::string &knob, std::int64_t fallback)
{
    const auto it = knobs.find(knob);
    return it == knobs.end() ? fallback : it->second;
}

// Enters the scope `name` unless it is empty; leaves it when destroyed.
class Scope {
public:
    Scope(GraphBuilder &g, const std::string &name) : m_g(g), m_entered(!name.empty())
    {
        if (m_entered)
            m_g.push(name);
    }
    ~Scope()
    {
        if (m_entered)
            m_g.pop();
    }
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

private:
    GraphBuilder &m_g;
    bool m_entered;
};

// The sizes of one model, read from the knobs once.
struct Dims {
    std::int64_t hidden, heads, kvHeads, headDim, ffn, vocab, batch, seq;
    std::int64_t rotaryDim;
    std::int64_t experts, topK, sharedFfn, denseLayers, denseFfn;
    std::int64_t kvLora, qLora, ropeDim, valueDim;
};

class DecoderBuilder {
public:
    DecoderBuilder(const std::string &name, const DecoderArch &arch, const Knobs &knobs)
        : m_arch(arch), m_names(arch.names), m_check(name, knobs), m_g(name, arch.dtype)
    {
        if (!knobs.count("head_dim"))
            m_check.divides("heads", "hidden");
        if (knobs.count("kv_heads"))
            m_check.divides("kv_heads", "heads");
        if (!knobs.count("head_dim") && arch.positions == PositionKind::Rotary &&
            arch.attention != AttentionKind::Latent && !knobs.count("rotary_dim"))
            m_check.evenQuotient("hidden", "heads");
        const std::int64_t h = m_check["hidden"], heads = m_check["heads"];
        m_dims.hidden = h;
        m_dims.heads = heads;
        m_dims.kvHeads = knobOr(knobs, "kv_heads", heads);
        m_dims.headDim = knobOr(knobs, "head_dim", h / heads);
        m_dims.ffn = m_check["ffn"];
        m_dims.vocab = m_check["vocab"];
        m_dims.batch = m_check["batch"];
        m_dims.seq = m_check["seq"];
        m_dims.rotaryDim = knobOr(knobs, "rotary_dim", 0);
        if (m_dims.rotaryDim > m_dims.headDim)
            m_check.fail("rotary_dim", "rotary_dim=" + std::to_string(m_dims.rotaryDim) +
                                           " exceeds the head's " + std::to_string(m_dims.headDim) + " dims");
        if (arch.positions == PositionKind::Rotary && arch.attention != AttentionKind::Latent &&
            (m_dims.rotaryDim ? m_dims.rotaryDim : m_dims.headDim) % 2 != 0)
            m_check.fail(knobs.count("rotary_dim") ? "rotary_dim" : "head_dim",
                         "the rotary embedding turns pairs of dims: " +
                             std::to_string(m_dims.rotaryDim ? m_dims.rotaryDim : m_dims.headDim) + " is odd");
        if (arch.positions == PositionKind::Learned)
            m_check.atMost("seq", "positions");
        if (arch.moe != MoeKind::None) {
            m_check.atMost("top_k", "experts");
            m_dims.experts = m_check["experts"];
            m_dims.topK = m_check["top_k"];
            m_dims.sharedFfn = arch.moe == MoeKind::Routed ? 0 : m_check["shared_ffn"];
            m_dims.denseLayers = knobOr(knobs, "dense_layers", 0);
            m_dims.denseFfn = knobOr(knobs, "dense_ffn", m_dims.ffn);
        }
        if (arch.attention == AttentionKind::Latent) {
            m_dims.kvLora = m_check["kv_lora"];
            m_dims.qLora = knobOr(knobs, "q_lora", 0);
            m_dims.ropeDim = m_check["rope_dim"];
            m_dims.valueDim = m_check["v_head_dim"];
            if (m_dims.ropeDim % 2 != 0)
                m_check.fail("rope_dim", "the rotary embedding turns pairs of dims: " +
                                             std::to_string(m_dims.ropeDim) + " is odd");
        }
        m_layers = m_check["layers"];
        m_tied = knobOr(knobs, "tied_embeddings", 0) != 0;
    }

    ir::Graph build()
    {
        const std::int64_t b = m_dims.batch, s = m_dims.seq;
        auto inputIds = m_g.input("input_ids", {b, s}, ir::DType::I64);
        auto labels = m_g.input("labels", {b, s}, ir::DType::I64);
        std::optional<ir::TensorId> positionIds;
        if (m_arch.positions == PositionKind::Learned)
            positionIds = m_g.input("position_ids", {1, s}, ir::DType::I64);
        const std::int64_t qkDim = latent() ? m_dims.headDim + m_dims.ropeDim : m_dims.headDim;
        m_spec.heads = m_dims.heads;
        m_spec.kvHeads = latent() ? m_dims.heads : m_dims.kvHeads;
        m_spec.headDim = qkDim;
        m_spec.valueDim = latent() ? m_dims.valueDim : 0;
        m_spec.rotaryDim = latent() ? m_dims.ropeDim : m_dims.rotaryDim;
        m_spec.scale = m_g.input("attention_scale", {}, m_arch.dtype);
        m_spec.mask = m_g.input("attention_mask", {1, 1, s, s}, m_arch.dtype);  // causal
        if (m_arch.positions == PositionKind::Rotary) {
            const std::int64_t turned = m_spec.rotaryDim ? m_spec.rotaryDim : qkDim;
            m_spec.rotary = Rotary{m_g.input("rotary_cos", {1, 1, s, turned}, m_arch.dtype),
                                   m_g.input("rotary_sin", {1, 1, s, turned}, m_arch.dtype)};
        }
        std::optional<ir::TensorId> embeddingScale;
        if (m_arch.scaleEmbedding)
            embeddingScale = m_g.input("embedding_scale", {}, m_arch.dtype);  // sqrt(hidden)
        if (m_arch.positions == PositionKind::Alibi) {
            // ALiBi: a slope per head times the key's distance, added to the
            // causal mask once for every layer.
            auto alibi = m_g.input("alibi", {1, m_dims.heads, s, s}, m_arch.dtype);
            m_spec.mask = m_g.op("Add", {alibi, m_spec.mask}, {1, m_dims.heads, s, s});
        }

        for (const auto &scope : m_names.root)
            m_g.push(scope);
        const auto embed = table(m_names.embed, m_dims.vocab);
        auto x = m_g.embedding(m_names.embed, embed, inputIds);
        if (embeddingScale)
            x = m_g.op("Mul", {x, *embeddingScale}, m_g.shape(x));
        if (positionIds) {
            const auto positions = table(m_names.positions, m_check["positions"] + m_arch.positionOffset);
            x = m_g.op("Add", {x, m_g.embedding(m_names.positions, positions, *positionIds)}, m_g.shape(x));
        }
        if (m_arch.embeddingNorm)
            x = norm(m_names.embedNorm, x);
        for (std::int64_t i = 0; i < m_layers; ++i) {
            m_g.push(m_names.layer + std::to_string(i));
            x = layer(x, i);
            m_g.pop();
        }
        x = norm(m_names.finalNorm, x);
        for (std::size_t i = 0; i < m_names.root.size(); ++i)
            m_g.pop();

        ir::TensorId logits;
        if (m_tied) {
            m_g.push(m_names.head);
            logits = m_g.matmul(x, m_g.transpose(embed, {1, 0}));
            m_g.pop();
        } else {
            logits = m_g.linear(m_names.head, x, m_dims.vocab, m_arch.headBias);
        }
        m_g.markOutput(m_g.crossEntropyLoss(logits, labels));
        return m_g.take();
    }

private:
    bool latent() const { return m_arch.attention == AttentionKind::Latent; }

    ir::TensorId table(const std::string &module, std::int64_t rows)
    {
        m_g.push(module);
        auto w = m_g.parameter("weight", {rows, m_dims.hidden});
        m_g.pop();
        return w;
    }

    ir::TensorId norm(const std::string &module, ir::TensorId x)
    {
        switch (m_arch.norm) {
        case NormKind::Rms:
            return m_g.rmsNorm(module, x, m_arch.epsilon);
        case NormKind::Layer:
            return m_g.layerNorm(module, x, m_arch.epsilon);
        case NormKind::LayerNoBias:
        case NormKind::Parameterless: {
            const Scope scope(m_g, module);
            std::vector<ir::TensorId> inputs{x};
            if (m_arch.norm == NormKind::LayerNoBias)
                inputs.push_back(m_g.parameter("weight", {m_g.shape(x).back()}));
            return m_g.op("LayerNormalization", std::move(inputs), m_g.shape(x),
                          {{"axis", std::int64_t{-1}}, {"epsilon", m_arch.epsilon}});
        }
        }
        return x;
    }

    ir::TensorId add(ir::TensorId a, ir::TensorId b) { return m_g.op("Add", {a, b}, m_g.shape(a)); }

    ir::TensorId layer(ir::TensorId x, std::int64_t index)
    {
        switch (m_arch.block) {
        case BlockKind::Sequential: {
            x = add(x, attention(norm(m_names.inputNorm, x)));
            return add(x, feedForward(norm(m_names.postNorm, x), index));
        }
        case BlockKind::ParallelShared: {
            auto n = norm(m_names.inputNorm, x);
            auto a = attention(n);
            return add(add(x, a), feedForward(n, index));
        }
        case BlockKind::ParallelTwo: {
            auto a = attention(norm(m_names.inputNorm, x));
            auto f = feedForward(norm(m_names.postNorm, x), index);
            return add(add(x, a), f);
        }
        case BlockKind::Sandwich: {
            x = add(x, norm(m_names.postNorm, attention(norm(m_names.inputNorm, x))));
            auto f = feedForward(norm(m_names.preMlpNorm, x), index);
            return add(x, norm(m_names.postMlpNorm, f));
        }
        }
        return x;
    }

    // Per-head RMS norm of q or k ([b, s, n·d]), Qwen 3's q_norm / k_norm.
    ir::TensorId headNorm(const std::string &module, ir::TensorId t, std::int64_t heads)
    {
        const ir::Shape shape = m_g.shape(t);
        auto split = m_g.reshape(t, {shape[0], shape[1], heads, m_dims.headDim});
        return m_g.reshape(m_g.rmsNorm(module, split, m_arch.epsilon), shape);
    }

    ir::TensorId attention(ir::TensorId x)
    {
        const std::int64_t h = m_dims.hidden, d = m_dims.headDim, heads = m_dims.heads,
                           kv = m_dims.kvHeads;
        const Scope scope(m_g, m_names.attention);
        ir::TensorId q, k, v;
        if (m_arch.attention == AttentionKind::Separate) {
            q = m_g.linear(m_names.q, x, heads * d, m_arch.qkvBias);
            k = m_g.linear(m_names.k, x, kv * d, m_arch.qkvBias);
            v = m_g.linear(m_names.v, x, kv * d, m_arch.qkvBias);
        } else if (m_arch.attention == AttentionKind::Fused) {
            std::tie(q, k, v) = fusedQkv(x);
        } else {
            std::tie(q, k, v) = latentQkv(x);
        }
        if (m_arch.qkNorm) {
            q = headNorm(m_names.qNorm, q, heads);
            k = headNorm(m_names.kNorm, k, kv);
        }
        return m_g.linear(m_names.o, attentionCore(m_g, q, k, v, m_spec), h, m_arch.outBias);
    }

    // One projection for q, k and v, grouped per key/value head: weight
    // [kv, h, (g + 2)·d] (g query heads per key/value head), bias [kv, 1,
    // (g + 2)·d]; [b, 1, s, h] · W -> [b, kv, s, (g + 2)·d], split into the
    // group's queries, key and value, each merged back to [b, s, n·d].
    std::tuple<ir::TensorId, ir::TensorId, ir::TensorId> fusedQkv(ir::TensorId x)
    {
        const std::int64_t b = m_dims.batch, s = m_dims.seq, h = m_dims.hidden, d = m_dims.headDim,
                           kv = m_dims.kvHeads, groups = m_dims.heads / m_dims.kvHeads;
        const Scope scope(m_g, m_names.qkv);
        auto w = m_g.parameter("weight", {kv, h, (groups + 2) * d});
        auto y = m_g.matmul(m_g.reshape(x, {b, 1, s, h}), w);
        if (m_arch.qkvBias)
            y = m_g.op("Add", {y, m_g.parameter("bias", {kv, 1, (groups + 2) * d})}, m_g.shape(y));
        auto parts = m_g.opMulti("Split", {y}, {{b, kv, s, groups * d}, {b, kv, s, d}, {b, kv, s, d}},
                                 {{"axis", std::int64_t{-1}},
                                  {"split", std::vector<std::int64_t>{groups * d, d, d}}});
        auto merge = [&](ir::TensorId t) {
            const ir::Shape ts = m_g.shape(t);
            return m_g.reshape(m_g.transpose(t, {0, 2, 1, 3}), {b, s, ts[1] * ts[3]});
        };
        return {merge(parts[0]), merge(parts[1]), merge(parts[2])};
    }

    // DeepSeek's multi-head latent attention, in training form: queries from
    // x (or through the q_lora latent); keys and values from the kv_lora
    // latent expanded per head, each head's key joined with one rotary part
    // shared by all heads. A head's rotary part leads its query and key here
    // (Hugging Face puts it last; the cost is the same).
    std::tuple<ir::TensorId, ir::TensorId, ir::TensorId> latentQkv(ir::TensorId x)
    {
        const std::int64_t b = m_dims.batch, s = m_dims.seq, heads = m_dims.heads, nope = m_dims.headDim,
                           rope = m_dims.ropeDim, vd = m_dims.valueDim, lora = m_dims.kvLora;
        ir::TensorId q;
        if (m_dims.qLora) {
            auto latentQ = m_g.rmsNorm("q_a_layernorm", m_g.linear("q_a_proj", x, m_dims.qLora, false),
                                       m_arch.epsilon);
            q = m_g.linear("q_b_proj", latentQ, heads * (nope + rope), false);
        } else {
            q = m_g.linear(m_names.q, x, heads * (nope + rope), false);
        }
        auto compressed = m_g.linear("kv_a_proj_with_mqa", x, lora + rope, false);
        auto parts = m_g.opMulti("Split", {compressed}, {{b, s, lora}, {b, s, rope}},
                                 {{"axis", std::int64_t{-1}}, {"split", std::vector<std::int64_t>{lora, rope}}});
        auto latentKv = m_g.rmsNorm("kv_a_layernorm", parts[0], m_arch.epsilon);
        auto kvHeads = m_g.reshape(m_g.linear("kv_b_proj", latentKv, heads * (nope + vd), false),
                                   {b, s, heads, nope + vd});
        auto kv = m_g.opMulti("Split", {kvHeads}, {{b, s, heads, nope}, {b, s, heads, vd}},
                              {{"axis", std::int64_t{-1}}, {"split", std::vector<std::int64_t>{nope, vd}}});
        const ir::Shape shared{b, s, heads, rope};
        auto keyRope = m_g.op("Expand", {m_g.reshape(parts[1], {b, s, 1, rope})}, shared, {{"shape", shared}});
        auto k = m_g.op("Concat", {keyRope, kv[0]}, {b, s, heads, rope + nope}, {{"axis", std::int64_t{-1}}});
        return {q, m_g.reshape(k, {b, s, heads * (rope + nope)}), m_g.reshape(kv[1], {b, s, heads * vd})};
    }

    ir::TensorId activate(ir::TensorId x)
    {
        switch (m_arch.activation) {
        case Activation::Silu:
            return m_g.op("Silu", {x}, m_g.shape(x));
        case Activation::Gelu:
            return m_g.op("Gelu", {x}, m_g.shape(x));
        case Activation::GeluTanh:
            return m_g.op("Gelu", {x}, m_g.shape(x), {{"approximate", std::string("tanh")}});
        case Activation::Relu:
            return m_g.op("Relu", {x}, m_g.shape(x));
        }
        return x;
    }

    // The MLP of one layer, or of one expert, in the current scope.
    ir::TensorId denseMlp(ir::TensorId x, std::int64_t ffn, const DecoderNames &n)
    {
        const std::int64_t h = m_g.shape(x).back();
        switch (m_arch.mlp) {
        case MlpKind::Gated: {
            auto gated = activate(m_g.linear(n.gate, x, ffn, m_arch.mlpBias));
            auto up = m_g.linear(n.up, x, ffn, m_arch.mlpBias);
            return m_g.linear(n.down, m_g.op("Mul", {gated, up}, m_g.shape(up)), h, m_arch.mlpBias);
        }
        case MlpKind::GatedFused: {
            // Weight [2, h, ffn]: gate's and up's [in, out] stacked, so that a
            // split of its last dim splits both by columns alike.
            const ir::Shape xs = m_g.shape(x);
            ir::Shape lifted = xs, half = xs;
            lifted.insert(lifted.end() - 2, 1);
            half.back() = ffn;
            ir::TensorId gated, up;
            {
                const Scope scope(m_g, n.gateUp);
                auto w = m_g.parameter("weight", {2, h, ffn});
                auto y = m_g.matmul(m_g.reshape(x, lifted), w);
                ir::Shape partShape = m_g.shape(y);
                partShape[partShape.size() - 3] = 1;
                auto parts = m_g.opMulti("Split", {y}, {partShape, partShape},
                                         {{"axis", std::int64_t(partShape.size()) - 3},
                                          {"split", std::vector<std::int64_t>{1, 1}}});
                gated = activate(m_g.reshape(parts[0], half));
                up = m_g.reshape(parts[1], half);
            }
            return m_g.linear(n.down, m_g.op("Mul", {gated, up}, half), h, m_arch.mlpBias);
        }
        case MlpKind::Plain:
            return m_g.linear(n.down, activate(m_g.linear(n.up, x, ffn, m_arch.mlpBias)), h, m_arch.mlpBias);
        }
        return x;
    }

    ir::TensorId feedForward(ir::TensorId x, std::int64_t index)
    {
        const Scope scope(m_g, m_names.mlp);
        if (m_arch.moe == MoeKind::None)
            return denseMlp(x, m_dims.ffn, m_names);
        if (index < m_dims.denseLayers)
            return denseMlp(x, m_dims.denseFfn, m_names);
        return mixture(x);
    }

    // Sparse mixture of experts: the router picks top_k experts per token
    // (Softmax, TopK, and with renormaliseTopK the weights renormalised over
    // the chosen k), MoEDispatch sends each expert its tokens (a fixed
    // capacity per expert, so that shapes are static), each expert is an MLP,
    // and MoECombine sums the weighted expert outputs back per token. Shared
    // experts see every token.
    ir::TensorId mixture(ir::TensorId x)
    {
        const ir::Shape xs = m_g.shape(x);
        const std::int64_t b = xs[0], s = xs[1], h = xs[2], tokens = b * s;
        const std::int64_t experts = m_dims.experts, topK = m_dims.topK;
        const std::int64_t capacity = (tokens * topK + experts - 1) / experts;
        auto flat = m_g.reshape(x, {tokens, h});
        auto routerLogits = m_g.linear(m_names.router, flat, experts, false);
        auto probs = m_arch.sigmoidRouter
                         ? m_g.op("Sigmoid", {routerLogits}, m_g.shape(routerLogits))
                         : m_g.op("Softmax", {routerLogits}, m_g.shape(routerLogits), {{"axis", std::int64_t{-1}}});
        if (m_arch.routerBias) {
            m_g.push(m_names.router);
            probs = m_g.op("Add", {probs, m_g.parameter("e_score_correction_bias", {experts})}, m_g.shape(probs));
            m_g.pop();
        }
        auto top = m_g.opMulti("TopK", {probs}, {{tokens, topK}, {tokens, topK}},
                               {{"axis", std::int64_t{-1}}, {"k", topK}});
        m_g.setDType(top[1], ir::DType::I64);
        auto weights = top[0];
        if (m_arch.renormaliseTopK) {
            auto sum = m_g.op("ReduceSum", {top[0]}, {tokens, 1},
                              {{"axes", std::vector<std::int64_t>{-1}}, {"keepdims", std::int64_t{1}}});
            weights = m_g.op("Div", {top[0], sum}, {tokens, topK});
        }
        const ir::Attributes routing{{"experts", experts}, {"top_k", topK}, {"capacity", capacity}};
        auto dispatched = m_g.opMulti("MoEDispatch", {flat, top[1]},
                                      std::vector<ir::Shape>(static_cast<std::size_t>(experts),
                                                             ir::Shape{capacity, h}),
                                      routing);
        std::vector<ir::TensorId> combineInputs;
        for (std::int64_t e = 0; e < experts; ++e) {
            m_g.push(m_names.experts + std::to_string(e));
            combineInputs.push_back(denseMlp(dispatched[static_cast<std::size_t>(e)], m_dims.ffn, m_names));
            m_g.pop();
        }
        combineInputs.push_back(weights);
        combineInputs.push_back(top[1]);
        auto combined = m_g.op("MoECombine", std::move(combineInputs), {tokens, h}, routing);
        if (m_arch.moe != MoeKind::Routed) {
            ir::TensorId shared;
            {
                const Scope scope(m_g, m_names.sharedExpert);
                shared = denseMlp(flat, m_dims.sharedFfn, m_names);
            }
            if (m_arch.moe == MoeKind::SharedGated) {
                auto gate = m_g.op("Sigmoid", {m_g.linear(m_names.sharedExpertGate, flat, 1, false)}, {tokens, 1});
                shared = m_g.op("Mul", {shared, gate}, {tokens, h});
            }
            combined = m_g.op("Add", {combined, shared}, {tokens, h});
        }
        return m_g.reshape(combined, {b, s, h});
    }

    const DecoderArch &m_arch;
    const DecoderNames &m_names;
    KnobCheck m_check;
    GraphBuilder m_g;
    Dims m_dims{};
    AttentionSpec m_spec;
    std::int64_t m_layers = 0;
    bool m_tied = false;
};

} // namespace

ir::Graph buildDecoder(const std::string &name, const DecoderArch &arch, const Knobs &knobs)
{
    return DecoderBuilder(name, arch, knobs).build();
}

// LLaMA 2 and 3: RMS norms, grouped-query attention with rotary embedding,
// a SwiGLU MLP in every layer; bf16, as these models are trained.
ir::Graph buildLlama(const std::string &name, const Knobs &knobs)
{
    return buildDecoder(name, DecoderArch{}, knobs);
}

// Mixtral: the LLaMA decoder with a sparse mixture of SwiGLU experts in
// place of the MLP.
ir::Graph buildMixtral(const std::string &name, const Knobs &knobs)
{
    DecoderArch arch;
    arch.moe = MoeKind::Routed;
    arch.names.mlp = "block_sparse_moe";
    arch.names.gate = "w1";
    arch.names.up = "w3";
    arch.names.down = "w2";
    return buildDecoder(name, arch, knobs);
}

} // namespace tapestry::io::zoo
