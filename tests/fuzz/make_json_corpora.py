#!/usr/bin/python3
"""Writes the seed corpora of the JSON readers' fuzz targets: valid samples
that reach every part of each reader, and the inputs that once broke them.

    python3 tests/fuzz/make_json_corpora.py BUILD/app/tapestry-cli

The models and plans of the zoo come from the CLI given (convert, plan). The
outputs are committed; CI only reads them.
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")

# fuzz_plan checks plans against these two models, built the same way there.
GPT_TINY = "zoo:gpt2?layers=1&hidden=64&heads=4&vocab=128&positions=16&seq=16&batch=4"
MLP = "zoo:mlp"


def corpus(name):
    path = os.path.join(HERE, "corpus-" + name)
    os.makedirs(path, exist_ok=True)
    return path


def sample(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def write(folder, name, text):
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


def replaced(text, old, new):
    assert old in text, old
    return text.replace(old, new, 1)


def cli(tool, *args):
    return subprocess.run([tool, *args], check=True, capture_output=True, text=True).stdout


def model_corpus(tool):
    out = corpus("jsonmodel")
    for name in ("mlp.json", "abc.json", "conv-stack.json"):
        shutil.copy(os.path.join(ROOT, "samples", "models", name), out)
    write(out, "gpt2-tiny.json", cli(tool, "convert", GPT_TINY, "-o", "-"))
    write(out, "mixtral-tiny.json",
          cli(tool, "convert", "zoo:mixtral-8x7b?layers=1&hidden=32&heads=4&kv_heads=2&ffn=64&vocab=64&experts=4",
              "--seq", "8", "--batch", "2", "-o", "-"))
    mlp = sample("samples", "models", "mlp.json")
    # Every kind of attribute value, and a domain.
    write(out, "attributes.json", replaced(
        mlp, '"type":"Relu",',
        '"type":"Relu","domain":"com.example","attributes":{"alpha":0.5,"axis":-1,"mode":"fast","perm":[1,0],'
        '"scales":[1.5,2],"tags":["a","b"],"none":[]},'))
    write(out, "number-overflow.json", replaced(mlp, '"shape":[8,4]', '"shape":[8,1e999]'))
    write(out, "huge-dims.json", replaced(mlp, '"shape":[8,4]', '"shape":[4611686018427387904,2]'))
    write(out, "truncated.json", mlp[: len(mlp) // 2])


def config_corpus():
    out = corpus("hfconfig")
    for name in ("gpt2.json", "bert-base-uncased.json", "t5-small.json", "llama3-8b.json", "mixtral-8x7b.json"):
        shutil.copy(os.path.join(ROOT, "samples", "configs", name), out)

    def edited(name, changes, removed=()):
        config = json.loads(sample("samples", "configs", name))
        config.update(changes)
        for field in removed:
            del config[field]
        return json.dumps(config, indent=2) + "\n"

    # Small models: they build in well under a millisecond.
    write(out, "gpt2-tiny.json", edited("gpt2.json", {"n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 128,
                                                      "n_positions": 16, "n_inner": 96}))
    write(out, "bert-tiny.json", edited("bert-base-uncased.json",
                                        {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                                         "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 16},
                                        removed=["model_type"]))
    write(out, "t5-tiny.json", edited("t5-small.json", {"num_layers": 1, "num_decoder_layers": 2, "d_model": 32,
                                                        "d_ff": 64, "num_heads": 2, "d_kv": 16, "vocab_size": 64}))
    write(out, "llama-tiny.json", edited("llama3-8b.json",
                                         {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4,
                                          "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 64,
                                          "max_position_embeddings": 16, "tie_word_embeddings": True}))
    write(out, "mixtral-tiny.json", edited("mixtral-8x7b.json",
                                           {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4,
                                            "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 64,
                                            "max_position_embeddings": 16, "num_local_experts": 4}))
    family_seeds(out)
    # Issue 27's reproducers: sizes whose products overflow 64 bits, a
    # model too deep to build, a number no double holds.
    write(out, "gpt2-huge-sizes.json", edited("gpt2.json", {"n_embd": 4611686018427387904,
                                                            "n_head": 72057594037927936}))
    write(out, "gpt2-billion-layers.json", edited("gpt2.json", {"n_layer": 1000000000}))
    write(out, "number-overflow.json", replaced(sample("samples", "configs", "gpt2.json"),
                                                '"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": 1e999'))


def plan_corpus(tool):
    out = corpus("plan")
    shutil.copy(os.path.join(ROOT, "samples", "plans", "mlp-2d-4x2.json"), out)
    scratch = os.path.join(out, "scratch.json")
    for name, args in [
        ("mlp-dp-2x2.json", [MLP, "--mesh", "2x2", "--search", "dp"]),
        ("gpt2-tiny-megatron-sp.json", [GPT_TINY, "--mesh", "2x2", "--search", "megatron", "--sequence-parallel",
                                        "--mesh-profile", "dgx-a100"]),
        ("gpt2-tiny-techniques.json", [GPT_TINY, "--mesh", "2x2x2 (data, model, sequence)", "--search",
                                       "megatron", "--recompute", "transformer/h.*/=full", "--zero", "1",
                                       "--micro-batches", "2", "--flash-attention", "on"]),
    ]:
        cli(tool, "plan", *args, "-o", scratch)
        os.replace(scratch, os.path.join(out, name))
    plan = sample("samples", "plans", "mlp-2d-4x2.json")
    # Issue 27's reproducers: negative sizes in bytes, a number no double holds.
    write(out, "negative-parameter-bytes.json", replaced(plan, '"parameter_bytes":2.0', '"parameter_bytes":-2.0'))
    write(out, "negative-memory-bytes.json", replaced(plan, '"memory_bytes":4294967296', '"memory_bytes":-4294967296'))
    write(out, "number-overflow.json", replaced(plan, '"step_time_s":', '"step_time_s":1e999,"was":'))
    # Axis sizes each in bounds whose product overflows 64 bits.
    write(out, "huge-mesh.json", replaced(replaced(plan, '"size":4,', '"size":999999,'), '"size":2,', '"size":999999,'))


def profile_corpus():
    out = corpus("meshprofile")
    h100 = sample("resources", "meshes", "dgx-h100.json")
    # The first line is a --mesh value, the rest a profile.
    for name, mesh, profile in [
        ("dgx-h100-4x2.txt", "4x2", "dgx-h100.json"),
        ("cpu-loopback-8.txt", "8", "cpu-loopback.json"),
        ("dgx-a100-3d.txt", "2x2x2 (dp, tp, pp)", "dgx-a100.json"),
        ("pcie-8x-named.txt", "2x4 (data, model)", "pcie-8x.json"),
    ]:
        write(out, name, mesh + "\n" + sample("resources", "meshes", profile))
    write(out, "huge-mesh.txt", "999999x999999x999999x999999 (a, b, c, d)\n" + h100)
    write(out, "number-overflow.txt", "4x2\n" + replaced(h100, '"latency_s": 2e-6', '"latency_s": 1e999'))
    write(out, "intra-node-overflow.txt", "4x2\n" + replaced(h100, '"intra_node_devices": 8',
                                                             '"intra_node_devices": 4294967304'))
    write(out, "version-overflow.txt", "4x2\n" + replaced(h100, '"version": 1', '"version": 4294967297'))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_json_corpora.py TAPESTRY-CLI")
    tool = sys.argv[1]
    model_corpus(tool)
    config_corpus()
    plan_corpus(tool)
    profile_corpus()


# Small sizes under every family's own field names, applied where a config
# has the field (a null stays null): each family's sample builds in well
# under a millisecond.
TINY = {
    "num_hidden_layers": 2, "n_layer": 2, "n_layers": 2, "num_layers": 1, "num_decoder_layers": 1,
    "hidden_size": 64, "n_embd": 64, "d_model": 64, "num_attention_heads": 4, "n_head": 4, "n_heads": 4,
    "num_key_value_heads": 2, "num_kv_heads": 2, "head_dim": 16, "d_kv": 16, "intermediate_size": 96,
    "n_inner": 96, "ffn_dim": 96, "d_ff": 96, "vocab_size": 128, "max_position_embeddings": 32,
    "n_positions": 32, "max_seq_len": 32, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
    "num_experts": 4, "n_routed_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
    "kv_lora_rank": 16, "q_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 16,
    "rotary_dim": 8, "first_k_dense_replace": 1, "word_embed_proj_dim": 64, "embedding_size": 32,
    "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
    "encoder_ffn_dim": 96, "decoder_ffn_dim": 96,
}
TINY_NESTED = {"attn_config": {"kv_n_heads": 2}, "ffn_config": {"ffn_hidden_size": 96, "moe_num_experts": 4,
                                                                 "moe_top_k": 2}}
FAMILY_SAMPLES = ("pythia-1b.json", "gpt-j-6b.json", "opt-1.3b.json", "bloom-560m.json", "falcon-7b.json",
                  "starcoderbase-1b.json", "starcoder2-3b.json", "qwen2-7b.json", "qwen3-8b.json", "gemma2-9b.json",
                  "phi3-mini-4k.json", "olmo-7b.json", "internlm2-7b.json", "roberta-base.json",
                  "electra-small-discriminator.json",
                  "flan-t5-base.json", "bart-base.json", "qwen1.5-moe-a2.7b.json", "qwen3-30b-a3b.json",
                  "deepseek-v2-lite.json",
                  "deepseek-v3.json", "dbrx-base.json")


def family_seeds(out):
    for name in FAMILY_SAMPLES:
        config = json.loads(sample("samples", "configs", name))
        for field, value in TINY.items():
            if config.get(field) is not None:
                config[field] = value
        for field, values in TINY_NESTED.items():
            if isinstance(config.get(field), dict):
                config[field].update(values)
        write(out, name.replace(".json", "-tiny.json"), json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
