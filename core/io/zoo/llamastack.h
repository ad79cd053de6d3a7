#pragma once

#include "io/zoo/graphbuilder.h"
#include "io/zoo/zoo.h"

#include <functional>

namespace tapestry::io::zoo {

// The feed-forward part of a decoder layer, built in the layer's scope:
// RMS-normed activations [b, s, hidden] in, [b, s, hidden] out.
using FeedForward = std::function<ir::TensorId(GraphBuilder &, ir::TensorId)>;

// The LLaMA-style decoder shared by LLaMA and Mixtral, with Hugging Face's
// module names: model/embed_tokens, model/layers.N/{input_layernorm,
// self_attn/{q,k,v,o}_proj, post_attention_layernorm, <ffn>}, model/norm,
// lm_head, then the loss. Attention is grouped-query with rotary embedding as
// ops. Knobs: layers, hidden, heads, kv_heads, vocab, batch, seq, and
// optionally tied_embeddings (non-zero: the LM head reuses embed_tokens).
// bf16 parameters and activations, as these models are trained.
ir::Graph buildLlamaStack(const std::string &name, const Knobs &knobs, const FeedForward &ffn);

// SwiGLU: down(silu(gate(x)) * up(x)), with the three projections named as
// given (gate_proj/up_proj/down_proj in LLaMA, w1/w3/w2 in Mixtral's experts).
ir::TensorId swiGlu(GraphBuilder &g, ir::TensorId x, std::int64_t ffn, const std::string &gate,
                    const std::string &up, const std::string &down);

} // namespace tapestry::io::zoo
