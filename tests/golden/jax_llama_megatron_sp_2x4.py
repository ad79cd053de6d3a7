"""A Tapestry plan as JAX runs it: the device mesh, a NamedSharding for every parameter
and graph input, and the activation layouts the plan assumes at module boundaries and
at each linear's input.

Exported by `tapestry-cli export --to jax` from a tapestry.plan:
  model zoo:llama3-8b?layers=2&batch=8&seq=64&hidden=256&heads=8&kv_heads=4&ffn=512&vocab=1024 (fnv1a64:95a14d3bc4f8b89a)
  method megatron, mesh 2x4 (data, model), techniques none
Mesh axes, named by what each carries:
  axis data (2) carries data
  axis model (4) carries tensor+sequence

In the training script:
    mesh = make_mesh()                                   # jax.devices(), row-major
    params = jax.device_put(params, param_shardings(params, mesh))
    batch = {k: jax.device_put(v, input_shardings(mesh)[k]) for k, v in batch.items()}
    # in the model's code, where it has the activation:
    x = constrain(x, "model.layers.0.self_attn:input", mesh)
    # and each linear's input as it reads it, before the projection:
    q = q_proj(constrain(x, "model.layers.0.self_attn.q_proj:input", mesh))
    # the layers remat_modules names under jax.checkpoint; gradients accumulated
    # over micro_batches slices of the global batch
"""
from collections.abc import Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

mesh_shape = (2, 4)
mesh_axis_names = ('data', 'model')
# Every parameter's PartitionSpec, by the plan's (torch-style) name.
partition_specs = {
    'model.embed_tokens.weight': P('model', None),
    'model.layers.0.input_layernorm.weight': P(None),
    'model.layers.0.self_attn.q_proj.weight': P(None, 'model'),
    'model.layers.0.self_attn.k_proj.weight': P(None, 'model'),
    'model.layers.0.self_attn.v_proj.weight': P(None, 'model'),
    'model.layers.0.self_attn.o_proj.weight': P('model', None),
    'model.layers.0.post_attention_layernorm.weight': P(None),
    'model.layers.0.mlp.gate_proj.weight': P(None, 'model'),
    'model.layers.0.mlp.up_proj.weight': P(None, 'model'),
    'model.layers.0.mlp.down_proj.weight': P('model', None),
    'model.layers.1.input_layernorm.weight': P(None),
    'model.layers.1.self_attn.q_proj.weight': P(None, 'model'),
    'model.layers.1.self_attn.k_proj.weight': P(None, 'model'),
    'model.layers.1.self_attn.v_proj.weight': P(None, 'model'),
    'model.layers.1.self_attn.o_proj.weight': P('model', None),
    'model.layers.1.post_attention_layernorm.weight': P(None),
    'model.layers.1.mlp.gate_proj.weight': P(None, 'model'),
    'model.layers.1.mlp.up_proj.weight': P(None, 'model'),
    'model.layers.1.mlp.down_proj.weight': P('model', None),
    'model.norm.weight': P(None),
    'lm_head.weight': P(None, 'model'),
}
# The graph inputs' PartitionSpecs.
input_specs = {
    'input_ids': P('data', None),
    'labels': P('data', None),
    'attention_scale': P(),
    'attention_mask': P(None, None, None, None),
    'rotary_cos': P(None, None, None, None),
    'rotary_sin': P(None, None, None, None),
}
# The same parameters by their path in a Flax parameter tree (flax.linen, Hugging Face's
# Flax models: kernels [in, out], embedding tables [vocab, hidden]), and their shapes.
flax_paths = {
    'model.embed_tokens.weight': ('model', 'embed_tokens', 'embedding'),
    'model.layers.0.input_layernorm.weight': ('model', 'layers', '0', 'input_layernorm', 'weight'),
    'model.layers.0.self_attn.q_proj.weight': ('model', 'layers', '0', 'self_attn', 'q_proj', 'kernel'),
    'model.layers.0.self_attn.k_proj.weight': ('model', 'layers', '0', 'self_attn', 'k_proj', 'kernel'),
    'model.layers.0.self_attn.v_proj.weight': ('model', 'layers', '0', 'self_attn', 'v_proj', 'kernel'),
    'model.layers.0.self_attn.o_proj.weight': ('model', 'layers', '0', 'self_attn', 'o_proj', 'kernel'),
    'model.layers.0.post_attention_layernorm.weight': ('model', 'layers', '0', 'post_attention_layernorm', 'weight'),
    'model.layers.0.mlp.gate_proj.weight': ('model', 'layers', '0', 'mlp', 'gate_proj', 'kernel'),
    'model.layers.0.mlp.up_proj.weight': ('model', 'layers', '0', 'mlp', 'up_proj', 'kernel'),
    'model.layers.0.mlp.down_proj.weight': ('model', 'layers', '0', 'mlp', 'down_proj', 'kernel'),
    'model.layers.1.input_layernorm.weight': ('model', 'layers', '1', 'input_layernorm', 'weight'),
    'model.layers.1.self_attn.q_proj.weight': ('model', 'layers', '1', 'self_attn', 'q_proj', 'kernel'),
    'model.layers.1.self_attn.k_proj.weight': ('model', 'layers', '1', 'self_attn', 'k_proj', 'kernel'),
    'model.layers.1.self_attn.v_proj.weight': ('model', 'layers', '1', 'self_attn', 'v_proj', 'kernel'),
    'model.layers.1.self_attn.o_proj.weight': ('model', 'layers', '1', 'self_attn', 'o_proj', 'kernel'),
    'model.layers.1.post_attention_layernorm.weight': ('model', 'layers', '1', 'post_attention_layernorm', 'weight'),
    'model.layers.1.mlp.gate_proj.weight': ('model', 'layers', '1', 'mlp', 'gate_proj', 'kernel'),
    'model.layers.1.mlp.up_proj.weight': ('model', 'layers', '1', 'mlp', 'up_proj', 'kernel'),
    'model.layers.1.mlp.down_proj.weight': ('model', 'layers', '1', 'mlp', 'down_proj', 'kernel'),
    'model.norm.weight': ('model', 'norm', 'weight'),
    'lm_head.weight': ('lm_head', 'kernel'),
}
param_shapes = {
    'model.embed_tokens.weight': (1024, 256),
    'model.layers.0.input_layernorm.weight': (256,),
    'model.layers.0.self_attn.q_proj.weight': (256, 256),
    'model.layers.0.self_attn.k_proj.weight': (256, 128),
    'model.layers.0.self_attn.v_proj.weight': (256, 128),
    'model.layers.0.self_attn.o_proj.weight': (256, 256),
    'model.layers.0.post_attention_layernorm.weight': (256,),
    'model.layers.0.mlp.gate_proj.weight': (256, 512),
    'model.layers.0.mlp.up_proj.weight': (256, 512),
    'model.layers.0.mlp.down_proj.weight': (512, 256),
    'model.layers.1.input_layernorm.weight': (256,),
    'model.layers.1.self_attn.q_proj.weight': (256, 256),
    'model.layers.1.self_attn.k_proj.weight': (256, 128),
    'model.layers.1.self_attn.v_proj.weight': (256, 128),
    'model.layers.1.self_attn.o_proj.weight': (256, 256),
    'model.layers.1.post_attention_layernorm.weight': (256,),
    'model.layers.1.mlp.gate_proj.weight': (256, 512),
    'model.layers.1.mlp.up_proj.weight': (256, 512),
    'model.layers.1.mlp.down_proj.weight': (512, 256),
    'model.norm.weight': (256,),
    'lm_head.weight': (256, 1024),
}
# The activations at module boundaries as the plan lays them out, by "module:side"
# ("*" for every layer), and each linear's input as the linear computes on it (where
# the plan redistributes it between the boundary and the linear); each with the graph's
# tensor it stands for.
activation_constraints = {
    'lm_head:input': P('data', None, None),  # model/norm/RMSNorm:0 as lm_head/MatMul reads it
    'lm_head:output': P('data', None, 'model'),  # lm_head/MatMul:0 as loss/SoftmaxCrossEntropyLoss reads it
    'model.embed_tokens:output': P('data', 'model', None),  # model/embed_tokens/Gather:0
    'model.layers.*.mlp.down_proj:input': P('data', None, 'model'),  # model/layers.0/mlp/Mul:0 as model/layers.0/mlp/down_proj/MatMul reads it
    'model.layers.*.mlp.down_proj:output': P('data', 'model', None),  # model/layers.0/mlp/down_proj/MatMul:0 as model/layers.0/Add_1 reads it
    'model.layers.*.mlp.gate_proj:input': P('data', None, None),  # model/layers.0/post_attention_layernorm/RMSNorm:0 as model/layers.0/mlp/gate_proj/MatMul reads it
    'model.layers.*.mlp.gate_proj:output': P('data', None, 'model'),  # model/layers.0/mlp/gate_proj/MatMul:0 as model/layers.0/mlp/Silu reads it
    'model.layers.*.mlp.up_proj:input': P('data', None, None),  # model/layers.0/post_attention_layernorm/RMSNorm:0 as model/layers.0/mlp/up_proj/MatMul reads it
    'model.layers.*.mlp.up_proj:output': P('data', None, 'model'),  # model/layers.0/mlp/up_proj/MatMul:0 as model/layers.0/mlp/Mul reads it
    'model.layers.*.mlp:input': P('data', 'model', None),  # model/layers.0/post_attention_layernorm/RMSNorm:0
    'model.layers.*.mlp:output': P('data', 'model', None),  # model/layers.0/mlp/down_proj/MatMul:0
    'model.layers.*.self_attn.k_proj:input': P('data', None, None),  # model/layers.0/input_layernorm/RMSNorm:0 as model/layers.0/self_attn/k_proj/MatMul reads it
    'model.layers.*.self_attn.k_proj:output': P('data', None, 'model'),  # model/layers.0/self_attn/k_proj/MatMul:0 as model/layers.0/self_attn/Reshape_1 reads it
    'model.layers.*.self_attn.o_proj:input': P('data', None, 'model'),  # model/layers.0/self_attn/Reshape_7:0 as model/layers.0/self_attn/o_proj/MatMul reads it
    'model.layers.*.self_attn.o_proj:output': P('data', 'model', None),  # model/layers.0/self_attn/o_proj/MatMul:0 as model/layers.0/Add reads it
    'model.layers.*.self_attn.q_proj:input': P('data', None, None),  # model/layers.0/input_layernorm/RMSNorm:0 as model/layers.0/self_attn/q_proj/MatMul reads it
    'model.layers.*.self_attn.q_proj:output': P('data', None, 'model'),  # model/layers.0/self_attn/q_proj/MatMul:0 as model/layers.0/self_attn/Reshape reads it
    'model.layers.*.self_attn.v_proj:input': P('data', None, None),  # model/layers.0/input_layernorm/RMSNorm:0 as model/layers.0/self_attn/v_proj/MatMul reads it
    'model.layers.*.self_attn.v_proj:output': P('data', None, 'model'),  # model/layers.0/self_attn/v_proj/MatMul:0 as model/layers.0/self_attn/Reshape_2 reads it
    'model.layers.*.self_attn:input': P('data', 'model', None),  # model/layers.0/input_layernorm/RMSNorm:0
    'model.layers.*.self_attn:output': P('data', 'model', None),  # model/layers.0/self_attn/o_proj/MatMul:0
    'model.layers.*:input': P('data', 'model', None),  # model/embed_tokens/Gather:0
    'model.layers.*:output': P('data', 'model', None),  # model/layers.0/Add_1:0
}
# The global batch runs as this many micro-batches per optimizer step (gradient accumulation).
micro_batches = 1
# Layers recomputed whole in the backward pass (jax.checkpoint, flax.linen.remat).
remat_modules = ()


def make_mesh(devices=None):
    """The plan's mesh over `devices` (jax.devices() by default), numbered row-major over
    mesh_shape as the plan numbers devices."""
    devices = list(jax.devices() if devices is None else devices)
    count = int(np.prod(mesh_shape))
    if len(devices) != count:
        raise ValueError(f"the plan's mesh {mesh_shape} needs {count} devices, got {len(devices)}")
    grid = np.empty(len(devices), dtype=object)
    grid[:] = devices
    return Mesh(grid.reshape(mesh_shape), mesh_axis_names)


def param_shardings(params, mesh, strict=True):
    """A NamedSharding for every leaf of a Flax parameter tree (nested mappings, with or
    without a top-level "params"), as a tree of the same structure for jax.device_put.
    Raises ValueError for a leaf whose shape is not the plan's, and with `strict` KeyError
    for leaves the plan does not have and plan parameters the tree lacks; without it those
    leaves are replicated."""
    by_path = {path: name for name, path in flax_paths.items()}
    unknown, seen = [], set()

    def walk(tree, path):
        out = {}
        for key, value in tree.items():
            here = path + (str(key),)
            if isinstance(value, Mapping):
                out[key] = walk(value, here)
                continue
            name = by_path.get(here) or (by_path.get(here[1:]) if here[0] == "params" else None)
            if name is None:
                unknown.append("/".join(here))
                out[key] = NamedSharding(mesh, P())
                continue
            shape = tuple(getattr(value, "shape", ()))
            if shape != param_shapes[name]:
                raise ValueError(f"{'/'.join(here)}: shape {shape}, where the plan's {name} is {param_shapes[name]}")
            seen.add(name)
            out[key] = NamedSharding(mesh, partition_specs[name])
        try:
            return type(tree)(out)
        except TypeError:
            return out

    shardings = walk(params, ())
    missing = [name for name in flax_paths if name not in seen]
    if strict and (unknown or missing):
        raise KeyError("the tree and the plan differ: not in the plan: " + (", ".join(unknown) or "none") +
                       "; not in the tree: " + (", ".join(missing) or "none"))
    return shardings


def input_shardings(mesh):
    """A NamedSharding for every graph input, by name."""
    return {name: NamedSharding(mesh, spec) for name, spec in input_specs.items()}


def activation_spec(name):
    """The PartitionSpec of the activation `name` ("model.layers.3.mlp:output"), matched
    atom by atom against activation_constraints, "*" standing for any layer index."""
    if name in activation_constraints:
        return activation_constraints[name]
    module, _, side = name.rpartition(":")
    atoms = module.split(".")
    for key, spec in activation_constraints.items():
        key_module, _, key_side = key.rpartition(":")
        key_atoms = key_module.split(".")
        if key_side == side and len(key_atoms) == len(atoms) and \
                all(k in ("*", a) for k, a in zip(key_atoms, atoms)):
            return spec
    raise KeyError(f"no activation constraint for {name}")


def constrain(x, name, mesh):
    """`x` laid out as the plan lays out the activation `name`."""
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, activation_spec(name)))
