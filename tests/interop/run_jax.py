"""Runs a Tapestry plan's JAX export on host devices and checks it against the
unsharded model and against the plan.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python3 run_jax.py PLAN.json EXPORT.py

PLAN.json is a tapestry.plan for zoo:llama3-8b or zoo:gpt2 given with every knob;
EXPORT.py is `tapestry-cli export PLAN.json --to jax`. The model is written here in
flax.linen with the parameter paths the export names (Hugging Face's Flax layout:
kernels [in, out], `embedding` tables, GPT-2's c_attn as q, k and v stacked) and
calls the export's constrain() at every module boundary and linear input and output it lists. One training
step's loss and gradients are computed under jax.jit on the plan's mesh, with the
parameters and inputs placed by param_shardings() and input_shardings(), and
compared with the same step on one device (float32, 1e-5 relative to the largest
element). The compiled programs' collectives (forward alone, and forward with
backward) are counted by kind and printed beside the plan's. Exits non-zero when
the numbers differ or the export cannot be applied.
"""
import importlib.util
import json
import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_source import model_of  # noqa: E402

TOLERANCE = 1e-5
KINDS = {"all-reduce": "all-reduce", "all-gather": "all-gather", "reduce-scatter": "reduce-scatter",
         "all-to-all": "all-to-all", "collective-permute": "collective-permute"}


class Constrain:
    """The export's constrain(), or nothing on one device (the unsharded reference)."""

    def __init__(self, export, mesh):
        self.export, self.mesh, self.applied = export, mesh, set()

    def __call__(self, x, name):
        if self.mesh is None:
            return x
        try:
            spec = self.export.activation_spec(name)
        except KeyError:
            return x
        self.applied.add(name)
        return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(self.mesh, spec))


class RMSNorm(nn.Module):
    eps: float = 1e-5

    @nn.compact
    def __call__(self, x):
        weight = self.param("weight", nn.initializers.ones, (x.shape[-1],))
        return weight * (x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps))


def rotary(seq, head_dim, base=500000.0):
    inv = 1.0 / (base ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = jnp.arange(seq, dtype=jnp.float32)[:, None] * inv[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def rotate_half(x):
    x1, x2 = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([-x2, x1], axis=-1)


def causal_attention(q, k, v):  # [b, heads, s, d]
    s = q.shape[2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


class LlamaLayer(nn.Module):
    c: dict
    constrain: Constrain
    prefix: str

    @nn.compact
    def __call__(self, x):
        c, con, p = self.c, self.constrain, self.prefix
        b, s, h = x.shape
        d = h // c["heads"]

        def dense(n, name, scope):  # a linear, its input and output laid out as the plan reads them
            layer, key = nn.Dense(n, use_bias=False, name=name), f"{p}.{scope}.{name}"
            return lambda y: con(layer(con(y, f"{key}:input")), f"{key}:output")

        x = con(x, f"{p}:input")
        y = con(RMSNorm(name="input_layernorm")(x), f"{p}.self_attn:input")

        def attention(y):
            q = dense(c["heads"] * d, "q_proj", "self_attn")(y).reshape(b, s, c["heads"], d).transpose(0, 2, 1, 3)
            k = dense(c["kv_heads"] * d, "k_proj", "self_attn")(y).reshape(b, s, c["kv_heads"], d).transpose(0, 2, 1, 3)
            v = dense(c["kv_heads"] * d, "v_proj", "self_attn")(y).reshape(b, s, c["kv_heads"], d).transpose(0, 2, 1, 3)
            cos, sin = rotary(s, d)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            groups = c["heads"] // c["kv_heads"]
            k, v = jnp.repeat(k, groups, axis=1), jnp.repeat(v, groups, axis=1)
            o = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, h)
            return dense(h, "o_proj", "self_attn")(o)

        x = x + con(_Named(attention, name="self_attn")(y), f"{p}.self_attn:output")
        y = con(RMSNorm(name="post_attention_layernorm")(x), f"{p}.mlp:input")

        def mlp(y):
            gate, up = dense(c["ffn"], "gate_proj", "mlp")(y), dense(c["ffn"], "up_proj", "mlp")(y)
            return dense(h, "down_proj", "mlp")(nn.silu(gate) * up)

        x = x + con(_Named(mlp, name="mlp")(y), f"{p}.mlp:output")
        return con(x, f"{p}:output")


class _Named(nn.Module):
    """A function run as a named submodule, so that its parameters sit under that name."""
    fn: object

    @nn.compact
    def __call__(self, *args):
        return self.fn(*args)


class Stack(nn.Module):
    """Numbered layers ("layers" / "h"), each named by its index."""
    c: dict
    constrain: Constrain
    prefix: str
    layer: type

    @nn.compact
    def __call__(self, x):
        for i in range(self.c["layers"]):
            x = self.layer(self.c, self.constrain, f"{self.prefix}.{i}", name=str(i))(x)
        return x


class Llama(nn.Module):
    c: dict
    constrain: Constrain

    @nn.compact
    def __call__(self, ids):
        c, con = self.c, self.constrain

        def model(ids):
            x = con(nn.Embed(c["vocab"], c["hidden"], name="embed_tokens")(ids), "model.embed_tokens:output")
            x = Stack(c, con, "model.layers", LlamaLayer, name="layers")(x)
            return RMSNorm(name="norm")(x)

        x = con(_Named(model, name="model")(ids), "lm_head:input")
        return con(nn.Dense(c["vocab"], use_bias=False, name="lm_head")(x), "lm_head:output")


class FusedQKV(nn.Module):
    """GPT-2's c_attn as the export lays it out: q, k and v stacked, weight [3, in, out], bias [3, 1, out]."""

    @nn.compact
    def __call__(self, y):
        h = y.shape[-1]
        w = self.param("weight", nn.initializers.normal(0.02), (3, h, h))
        bias = self.param("bias", nn.initializers.normal(0.02), (3, 1, h))
        return jnp.einsum("bsi,pio->pbso", y, w) + bias[:, None]


class GPT2Layer(nn.Module):
    c: dict
    constrain: Constrain
    prefix: str

    @nn.compact
    def __call__(self, x):
        c, con, p = self.c, self.constrain, self.prefix
        b, s, h = x.shape
        heads, d = c["heads"], h // c["heads"]
        x = con(x, f"{p}:input")
        y = con(nn.LayerNorm(epsilon=1e-5, name="ln_1")(x), f"{p}.attn:input")

        def attention(y):
            qkv = FusedQKV(name="c_attn")(con(y, f"{p}.attn.c_attn:input"))
            q, k, v = (t.reshape(b, s, heads, d).transpose(0, 2, 1, 3) for t in qkv)
            o = causal_attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, h)
            return con(nn.Dense(h, name="c_proj")(con(o, f"{p}.attn.c_proj:input")), f"{p}.attn.c_proj:output")

        x = x + con(_Named(attention, name="attn")(y), f"{p}.attn:output")
        y = con(nn.LayerNorm(epsilon=1e-5, name="ln_2")(x), f"{p}.mlp:input")

        def mlp(y):
            z = con(nn.Dense(c["ffn"], name="c_fc")(con(y, f"{p}.mlp.c_fc:input")), f"{p}.mlp.c_fc:output")
            z = nn.gelu(z, approximate=True)
            return con(nn.Dense(h, name="c_proj")(con(z, f"{p}.mlp.c_proj:input")), f"{p}.mlp.c_proj:output")

        x = x + con(_Named(mlp, name="mlp")(y), f"{p}.mlp:output")
        return con(x, f"{p}:output")


class GPT2(nn.Module):
    c: dict
    constrain: Constrain

    @nn.compact
    def __call__(self, ids):
        c, con = self.c, self.constrain

        def transformer(ids):
            wte = nn.Embed(c["vocab"], c["hidden"], name="wte")
            x = con(wte(ids), "transformer.wte:output")
            x = x + con(nn.Embed(c["positions"], c["hidden"], name="wpe")(jnp.arange(ids.shape[1])[None, :]),
                        "transformer.wpe:output")
            x = Stack(c, con, "transformer.h", GPT2Layer, name="h")(x)
            return nn.LayerNorm(epsilon=1e-5, name="ln_f")(x), wte.variables["params"]["embedding"]

        x, embedding = _Named(transformer, name="transformer")(ids)
        x = con(x, "lm_head:input")
        return con(x @ embedding.T, "lm_head:output")  # the LM head tied to wte, as Hugging Face ties them


def loss_of(model):
    def loss(params, ids, labels):
        logits = model.apply(params, ids)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))
    return loss


def collectives(compiled_text):
    counts = {}
    # An instruction's opcode follows its shape ("... = f32[8,64]{1,0} all-reduce(...)", a tuple's
    # "(f32[..], f32[..]) all-reduce("); "-start" counts an asynchronous one once, "-done" not.
    for match in re.finditer(r"[\s)](all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)"
                             r"(-start)?\(", compiled_text):
        kind = KINDS[match.group(1)]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def plan_counts(plan):
    phases = {"forward": {}, "step": {}}
    for c in plan["collectives"]:
        for phase in (["forward", "step"] if c["phase"] == "forward" else ["step"]):
            phases[phase][c["kind"]] = phases[phase].get(c["kind"], 0) + 1
    return phases


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    plan_file, export_file = sys.argv[1], sys.argv[2]
    plan = json.load(open(plan_file))
    family, c = model_of(plan["model"]["source"], "run_jax")
    spec = importlib.util.spec_from_file_location("tapestry_export_jax", export_file)
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)

    count = int(np.prod(export.mesh_shape))
    mesh = export.make_mesh(jax.devices()[:count])
    Model = {"llama": Llama, "gpt2": GPT2}[family]
    reference_model, model = Model(c, Constrain(export, None)), Model(c, Constrain(export, mesh))

    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(0, c["vocab"], (c["batch"], c["seq"])), dtype=jnp.int32)
    labels = jnp.asarray(rng.integers(0, c["vocab"], (c["batch"], c["seq"])), dtype=jnp.int32)
    params = reference_model.init(jax.random.PRNGKey(0), ids)

    # The reference: one device, no constraints.
    ref_loss, ref_grads = jax.jit(jax.value_and_grad(loss_of(reference_model)))(params, ids, labels)

    # The plan: parameters and inputs placed as the export says, activations constrained.
    shardings = export.param_shardings(params, mesh)
    inputs = export.input_shardings(mesh)
    placed = jax.device_put(params, shardings)
    ids_s, labels_s = jax.device_put(ids, inputs["input_ids"]), jax.device_put(labels, inputs["labels"])
    step = jax.jit(jax.value_and_grad(loss_of(model)), in_shardings=(shardings, inputs["input_ids"], inputs["labels"]),
                   out_shardings=(jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()), shardings))
    loss, grads = step(placed, ids_s, labels_s)

    errors = {"loss": abs(float(loss) - float(ref_loss)) / max(abs(float(ref_loss)), 1e-12)}
    flat_ref = dict(jax.tree_util.tree_flatten_with_path(ref_grads)[0])
    for path, g in jax.tree_util.tree_flatten_with_path(grads)[0]:
        want = np.asarray(flat_ref[path])
        name = "/".join(str(getattr(k, "key", k)) for k in path)
        errors[name] = float(np.abs(np.asarray(g) - want).max() / max(np.abs(want).max(), 1e-12))
    worst = max(errors, key=errors.get)
    ok = errors[worst] <= TOLERANCE
    print(f"numerics {'ok' if ok else 'WRONG'}: loss and {len(errors) - 1} gradients on {count} devices, "
          f"worst {worst} {errors[worst]:.2e} (tolerance {TOLERANCE:g})")
    print(f"constraints applied at {len(model.constrain.applied)} module boundaries and linears "
          f"of {len(export.activation_constraints)} the export lists (patterns)")

    forward = jax.jit(loss_of(model), in_shardings=(shardings, inputs["input_ids"], inputs["labels"]))
    want = plan_counts(plan)
    for phase, fn in (("forward", forward), ("step", step)):
        text = fn.lower(placed, ids_s, labels_s).compile().as_text()
        if os.environ.get("TAPESTRY_JAX_HLO_DIR"):  # the compiled programs, to read where XLA moved what
            name = os.path.basename(plan_file).removesuffix(".json")
            with open(os.path.join(os.environ["TAPESTRY_JAX_HLO_DIR"], f"{name}-{phase}.hlo.txt"), "w") as f:
                f.write(text)
        got = collectives(text)
        same = got == want[phase]
        print(f"{phase} collectives {'equal' if same else 'differ'}: XLA {dict(sorted(got.items()))}, "
              f"plan {dict(sorted(want[phase].items()))}")
    print(f"{plan_file.rsplit('/', 1)[-1]}: {'passed' if ok else 'FAILED'} on {count} host devices, "
          f"jax {jax.__version__}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
