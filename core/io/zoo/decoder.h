#pragma once

#include "io/zoo/graphbuilder.h"
#include "io/zoo/zoo.h"

#include <string>
#include <vector>

namespace tapestry::io::zoo {

// The decoder-only transformer families as one builder: LLaMA and what
// derives from it (Mistral, Qwen, Gemma, Phi-3, OLMo, InternLM2, Granite),
// the GPT-style decoders (GPT-NeoX, GPT-J, OPT, BLOOM, Falcon, StarCoder),
// and their mixtures of experts (Mixtral, Qwen-MoE, DeepSeek with multi-head
// latent attention, DBRX). A DecoderArch says how a family's layer is
// wired; the sizes are knobs (below), checked like the zoo's presets.

enum class NormKind {
    Rms,            // RMSNorm with a weight (LLaMA)
    Layer,          // LayerNorm with weight and bias (GPT-NeoX, OPT, BLOOM)
    LayerNoBias,    // LayerNorm with a weight only (DBRX)
    Parameterless,  // LayerNorm without weight or bias (OLMo 1)
};

enum class PositionKind {
    Rotary,   // rotary tables applied to q and k, no parameters
    Learned,  // a table of positions added to the token embedding (OPT, StarCoder 1)
    Alibi,    // a per-head linear bias added to the scores (BLOOM)
};

enum class AttentionKind {
    Separate,  // q, k and v projections of their own
    Fused,     // one projection; its weight [kvHeads, hidden, (groups + 2)·headDim] holds
               // each key/value head's queries, key and value together, as GPT-NeoX,
               // BLOOM, Falcon and InternLM2 lay them out, so splitting it splits heads
    Latent,    // DeepSeek's multi-head latent attention: keys and values from a
               // low-rank latent (kv_lora), queries optionally too (q_lora)
};

enum class BlockKind {
    Sequential,     // x + attn(norm1(x)), then + mlp(norm2(·))
    ParallelShared, // x + attn(norm(x)) + mlp(norm(x)), one norm (GPT-J, Falcon 7B)
    ParallelTwo,    // x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX)
    Sandwich,       // each sub-layer's output normed too, four norms (Gemma 2)
};

enum class MlpKind {
    Gated,       // down(act(gate(x)) · up(x)): SwiGLU, GeGLU
    GatedFused,  // the same with gate and up in one weight [2, hidden, ffn] (Phi-3)
    Plain,       // down(act(up(x)))
};

enum class MoeKind {
    None,
    Routed,       // top-k of the experts (Mixtral, DBRX)
    SharedGated,  // plus a shared expert scaled by a sigmoid gate (Qwen-MoE)
    Shared,       // plus shared experts always on (DeepSeek)
};

// Hugging Face's module names of a family. A name that is empty is not a
// scope: OPT's fc1 and fc2 sit in the layer itself.
struct DecoderNames {
    std::vector<std::string> root{"model"};
    std::string embed = "embed_tokens";
    std::string positions = "embed_positions";
    std::string embedNorm = "embed_layernorm";
    std::string layer = "layers.";
    std::string inputNorm = "input_layernorm";
    std::string attention = "self_attn";
    std::string q = "q_proj", k = "k_proj", v = "v_proj", o = "o_proj";
    std::string qkv = "qkv_proj";  // AttentionKind::Fused
    std::string qNorm = "q_norm", kNorm = "k_norm";
    std::string postNorm = "post_attention_layernorm";  // before the MLP, or the second parallel norm
    std::string preMlpNorm = "pre_feedforward_layernorm", postMlpNorm = "post_feedforward_layernorm";
    std::string mlp = "mlp";
    std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
    std::string gateUp = "gate_up_proj";  // MlpKind::GatedFused
    std::string router = "gate", experts = "experts.", sharedExpert = "shared_expert",
                sharedExpertGate = "shared_expert_gate";
    std::string finalNorm = "norm";
    std::string head = "lm_head";
};

enum class Activation { Silu, Gelu, GeluTanh, Relu };

struct DecoderArch {
    DecoderNames names;
    ir::DType dtype = ir::DType::BF16;
    NormKind norm = NormKind::Rms;
    double epsilon = 1e-5;
    PositionKind positions = PositionKind::Rotary;
    std::int64_t positionOffset = 0;  // extra rows of a learned table (OPT's 2)
    bool scaleEmbedding = false;      // embeddings times sqrt(hidden) (Gemma)
    bool embeddingNorm = false;       // a norm right after the embedding (BLOOM)
    AttentionKind attention = AttentionKind::Separate;
    bool qkvBias = false, outBias = false;
    bool qkNorm = false;  // RMS norms of each query and key head (Qwen 3)
    BlockKind block = BlockKind::Sequential;
    MlpKind mlp = MlpKind::Gated;
    Activation activation = Activation::Silu;
    bool mlpBias = false;
    bool headBias = false;  // the LM head has a bias (GPT-J)
    MoeKind moe = MoeKind::None;
    bool renormaliseTopK = true;  // the chosen experts' weights sum to 1 (Mixtral)
    bool sigmoidRouter = false;   // experts scored by a sigmoid, not a softmax (DeepSeek V3)
    bool routerBias = false;      // a per-expert bias added to the scores to choose (DeepSeek V3's
                                  // e_score_correction_bias, load balancing without a loss)
};

// Knobs: layers, hidden, heads, ffn, vocab, batch, seq, and optionally
//   kv_heads (default heads), head_dim (default hidden/heads),
//   rotary_dim (leading dims of a head that rotate; default all),
//   positions (PositionKind::Learned: the table's rows),
//   tied_embeddings (non-zero: the LM head reuses the token embedding),
//   experts, top_k, shared_ffn (the shared experts' width together),
//   dense_layers and dense_ffn (leading layers with a dense MLP, DeepSeek),
//   kv_lora, q_lora, rope_dim, v_head_dim (AttentionKind::Latent; head_dim
//   is then the query/key head's non-rotary part).
// With experts, `ffn` is each expert's width.
ir::Graph buildDecoder(const std::string &name, const DecoderArch &arch, const Knobs &knobs);

} // namespace tapestry::io::zoo
