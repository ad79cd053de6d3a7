"""Plain-torch models with the module tree and parameter names of Hugging Face's
LlamaForCausalLM and GPT2LMHeadModel (transformers' modeling_llama.py and
modeling_gpt2.py), small sizes, float32, so that an exported Tapestry plan can be
applied to them as a training script applies it to the real ones.

Attention keeps HF's per-module head counts (num_heads, num_key_value_heads,
hidden_size; GPT-2's num_heads, split_size, embed_dim) and reshapes with them,
as HF's modeling code does: a tensor-parallel plan must set the local counts.
GPT-2's projections are HF's Conv1D (weight stored [in, out], y = x @ W + b) and
its query, key and value are one fused c_attn weight [hidden, 3 * hidden].
"""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, head_dim, base=500000.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim)),
                             persistent=False)

    def forward(self, x, position_ids):
        freqs = position_ids[:, :, None].float() * self.inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.hidden_size = c["hidden"]
        self.num_heads = c["heads"]
        self.num_key_value_heads = c["kv_heads"]
        self.head_dim = c["hidden"] // c["heads"]
        self.q_proj = nn.Linear(c["hidden"], c["heads"] * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c["hidden"], c["kv_heads"] * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c["hidden"], c["kv_heads"] * self.head_dim, bias=False)
        self.o_proj = nn.Linear(c["heads"] * self.head_dim, c["hidden"], bias=False)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None):
        bsz, q_len, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.num_heads // self.num_key_value_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(bsz, q_len, self.num_heads * self.head_dim)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden"], c["ffn"], bias=False)
        self.up_proj = nn.Linear(c["hidden"], c["ffn"], bias=False)
        self.down_proj = nn.Linear(c["ffn"], c["hidden"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        self.mlp = LlamaMLP(c)
        self.input_layernorm = LlamaRMSNorm(c["hidden"])
        self.post_attention_layernorm = LlamaRMSNorm(c["hidden"])

    def forward(self, hidden_states, position_embeddings=None):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(hidden_states=hidden_states, position_embeddings=position_embeddings)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states = self.mlp(hidden_states)
        return residual + hidden_states


class LlamaModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c["layers"]))
        self.norm = LlamaRMSNorm(c["hidden"])
        self.rotary_emb = LlamaRotaryEmbedding(c["hidden"] // c["heads"])

    def forward(self, input_ids):
        hidden_states = self.embed_tokens(input_ids)
        # Positions numbered by the embedding output's length, as HF's LlamaModel numbers
        # them (cache_position from inputs_embeds.shape[1]): a sequence-parallel plan must
        # hand the layers a stream of the global length.
        position_ids = torch.arange(hidden_states.shape[1], device=input_ids.device)[None, :]
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings=position_embeddings)
        return self.norm(hidden_states)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids))


class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer whose weight is stored [in, out]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.size(-1)), self.weight).view(*x.size()[:-1], self.nf)


class GPT2Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_dim = c["hidden"]
        self.num_heads = c["heads"]
        self.head_dim = c["hidden"] // c["heads"]
        self.split_size = c["hidden"]
        self.c_attn = Conv1D(3 * c["hidden"], c["hidden"])
        self.c_proj = Conv1D(c["hidden"], c["hidden"])

    def forward(self, hidden_states):
        bsz, q_len, _ = hidden_states.shape
        q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (bsz, q_len, self.num_heads, self.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(bsz, q_len, self.num_heads * self.head_dim))


class GPT2MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = Conv1D(c["ffn"], c["hidden"])
        self.c_proj = Conv1D(c["hidden"], c["ffn"])

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c["hidden"])
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c["hidden"])
        self.mlp = GPT2MLP(c)

    def forward(self, hidden_states):
        hidden_states = hidden_states + self.attn(self.ln_1(hidden_states))
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab"], c["hidden"])
        self.wpe = nn.Embedding(c["positions"], c["hidden"])
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c["layers"]))
        self.ln_f = nn.LayerNorm(c["hidden"])

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
        hidden_states = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.h:
            hidden_states = block(hidden_states)
        return self.ln_f(hidden_states)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as HF ties them

    def forward(self, input_ids):
        return self.lm_head(self.transformer(input_ids))


def build_transformers(family, c):
    """The same model from Hugging Face's transformers, its own modeling code, with random
    weights from a config of the same sizes (no dropout, no cache, untied LLaMA head, tied
    GPT-2 head). Its forward pass returns an output whose .logits are the logits."""
    import transformers
    if family == "llama":
        config = transformers.LlamaConfig(
            vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["ffn"],
            num_hidden_layers=c["layers"], num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"],
            max_position_embeddings=max(c["seq"], 64), rms_norm_eps=1e-5, tie_word_embeddings=False,
            attention_dropout=0.0, use_cache=False)
        return transformers.LlamaForCausalLM(config)
    config = transformers.GPT2Config(
        vocab_size=c["vocab"], n_embd=c["hidden"], n_inner=c["ffn"], n_layer=c["layers"], n_head=c["heads"],
        n_positions=c["positions"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        activation_function="gelu_new", layer_norm_epsilon=1e-5, use_cache=False)
    return transformers.GPT2LMHeadModel(config)


def build(family, c, source="twin"):
    """The model: the plain-torch twin above, or with source "transformers" Hugging Face's own."""
    if source == "transformers":
        return build_transformers(family, c)
    return {"llama": LlamaForCausalLM, "gpt2": GPT2LMHeadModel}[family](c)


def logits_of(output):
    """The logits of a forward pass: the twin returns them, transformers an output holding them."""
    return getattr(output, "logits", output)
