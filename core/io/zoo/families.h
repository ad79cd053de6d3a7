#pragma once

#include "io/zoo/zoo.h"

namespace tapestry::io::zoo {

// One builder per model family, each in its own file. Knobs are complete
// (every key of the preset present) and positive; each builder rejects
// combinations that make no model (KnobCheck), naming the knob.
ir::Graph buildMlp(const std::string &name, const Knobs &knobs);
ir::Graph buildAbc(const std::string &name, const Knobs &knobs);

// Transformer training graphs (forward pass of a step, loss included), with
// Hugging Face module names. Knobs: layers, hidden, heads, ffn, vocab,
// batch, seq, and per family:
ir::Graph buildGpt2(const std::string &name, const Knobs &knobs);  // + positions; fp32
ir::Graph buildGpt3(const std::string &name, const Knobs &knobs);  // + positions; bf16
ir::Graph buildBert(const std::string &name, const Knobs &knobs);  // + positions, type_vocab
// The BERT encoder with the pre-training heads of BERT (pooler and
// next-sentence head), RoBERTa (masked LM only, lm_head's names) or ELECTRA's
// discriminator (replaced-token detection, one logit per token; its
// embeddings of the optional knob `embedding` wide, projected to the hidden
// size where the two differ).
enum class EncoderHead { NextSentence, MaskedLm, Discriminator };
ir::Graph buildEncoder(const std::string &name, EncoderHead head, const Knobs &knobs);
// + decoder_layers, head_dim, target_seq (the decoder's length)
ir::Graph buildT5(const std::string &name, const Knobs &knobs);
// + decoder_layers, positions, target_seq, optional scale_embedding
ir::Graph buildBart(const std::string &name, const Knobs &knobs);
// + kv_heads, optional tied_embeddings; both are DecoderArch builds (decoder.h)
ir::Graph buildLlama(const std::string &name, const Knobs &knobs);
// + kv_heads, experts, top_k, optional tied_embeddings
ir::Graph buildMixtral(const std::string &name, const Knobs &knobs);

} // namespace tapestry::io::zoo
