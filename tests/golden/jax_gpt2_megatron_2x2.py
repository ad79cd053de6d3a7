"""A Tapestry plan as JAX runs it: the device mesh, a NamedSharding for every parameter
and graph input, and the activation layouts the plan assumes at module boundaries and
at each linear's input.

Exported by `tapestry-cli export --to jax` from a tapestry.plan:
  model zoo:gpt2?layers=2&batch=4&seq=32&hidden=64&heads=4&ffn=256&vocab=256&positions=128 (fnv1a64:c6c00505decbd594)
  method megatron, mesh 2x2 (data, model), techniques none
Mesh axes, named by what each carries:
  axis data (2) carries data
  axis model (2) carries tensor
Note: c_attn (transformer.h.0.attn.c_attn.weight and the other layers'): specs are of q, k and v stacked, [3, in, out]; Flax's FlaxConv1D kernel [3 * out, in] is that with kernel.reshape(3, out, in).transpose(0, 2, 1), and a split of out is by heads

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

mesh_shape = (2, 2)
mesh_axis_names = ('data', 'model')
# Every parameter's PartitionSpec, by the plan's (torch-style) name.
partition_specs = {
    'transformer.wte.weight': P('model', None),
    'transformer.wpe.weight': P(None, None),
    'transformer.h.0.ln_1.weight': P(None),
    'transformer.h.0.ln_1.bias': P(None),
    'transformer.h.0.attn.c_attn.weight': P(None, None, 'model'),
    'transformer.h.0.attn.c_attn.bias': P(None, None, 'model'),
    'transformer.h.0.attn.c_proj.weight': P('model', None),
    'transformer.h.0.attn.c_proj.bias': P(None),
    'transformer.h.0.ln_2.weight': P(None),
    'transformer.h.0.ln_2.bias': P(None),
    'transformer.h.0.mlp.c_fc.weight': P(None, 'model'),
    'transformer.h.0.mlp.c_fc.bias': P('model'),
    'transformer.h.0.mlp.c_proj.weight': P('model', None),
    'transformer.h.0.mlp.c_proj.bias': P(None),
    'transformer.h.1.ln_1.weight': P(None),
    'transformer.h.1.ln_1.bias': P(None),
    'transformer.h.1.attn.c_attn.weight': P(None, None, 'model'),
    'transformer.h.1.attn.c_attn.bias': P(None, None, 'model'),
    'transformer.h.1.attn.c_proj.weight': P('model', None),
    'transformer.h.1.attn.c_proj.bias': P(None),
    'transformer.h.1.ln_2.weight': P(None),
    'transformer.h.1.ln_2.bias': P(None),
    'transformer.h.1.mlp.c_fc.weight': P(None, 'model'),
    'transformer.h.1.mlp.c_fc.bias': P('model'),
    'transformer.h.1.mlp.c_proj.weight': P('model', None),
    'transformer.h.1.mlp.c_proj.bias': P(None),
    'transformer.ln_f.weight': P(None),
    'transformer.ln_f.bias': P(None),
}
# The graph inputs' PartitionSpecs.
input_specs = {
    'input_ids': P('data', None),
    'position_ids': P(None, None),
    'labels': P('data', None),
    'attention_scale': P(),
    'attention_mask': P(None, None, None, None),
}
# The same parameters by their path in a Flax parameter tree (flax.linen, Hugging Face's
# Flax models: kernels [in, out], embedding tables [vocab, hidden]), and their shapes.
flax_paths = {
    'transformer.wte.weight': ('transformer', 'wte', 'embedding'),
    'transformer.wpe.weight': ('transformer', 'wpe', 'embedding'),
    'transformer.h.0.ln_1.weight': ('transformer', 'h', '0', 'ln_1', 'scale'),
    'transformer.h.0.ln_1.bias': ('transformer', 'h', '0', 'ln_1', 'bias'),
    'transformer.h.0.attn.c_attn.weight': ('transformer', 'h', '0', 'attn', 'c_attn', 'weight'),
    'transformer.h.0.attn.c_attn.bias': ('transformer', 'h', '0', 'attn', 'c_attn', 'bias'),
    'transformer.h.0.attn.c_proj.weight': ('transformer', 'h', '0', 'attn', 'c_proj', 'kernel'),
    'transformer.h.0.attn.c_proj.bias': ('transformer', 'h', '0', 'attn', 'c_proj', 'bias'),
    'transformer.h.0.ln_2.weight': ('transformer', 'h', '0', 'ln_2', 'scale'),
    'transformer.h.0.ln_2.bias': ('transformer', 'h', '0', 'ln_2', 'bias'),
    'transformer.h.0.mlp.c_fc.weight': ('transformer', 'h', '0', 'mlp', 'c_fc', 'kernel'),
    'transformer.h.0.mlp.c_fc.bias': ('transformer', 'h', '0', 'mlp', 'c_fc', 'bias'),
    'transformer.h.0.mlp.c_proj.weight': ('transformer', 'h', '0', 'mlp', 'c_proj', 'kernel'),
    'transformer.h.0.mlp.c_proj.bias': ('transformer', 'h', '0', 'mlp', 'c_proj', 'bias'),
    'transformer.h.1.ln_1.weight': ('transformer', 'h', '1', 'ln_1', 'scale'),
    'transformer.h.1.ln_1.bias': ('transformer', 'h', '1', 'ln_1', 'bias'),
    'transformer.h.1.attn.c_attn.weight': ('transformer', 'h', '1', 'attn', 'c_attn', 'weight'),
    'transformer.h.1.attn.c_attn.bias': ('transformer', 'h', '1', 'attn', 'c_attn', 'bias'),
    'transformer.h.1.attn.c_proj.weight': ('transformer', 'h', '1', 'attn', 'c_proj', 'kernel'),
    'transformer.h.1.attn.c_proj.bias': ('transformer', 'h', '1', 'attn', 'c_proj', 'bias'),
    'transformer.h.1.ln_2.weight': ('transformer', 'h', '1', 'ln_2', 'scale'),
    'transformer.h.1.ln_2.bias': ('transformer', 'h', '1', 'ln_2', 'bias'),
    'transformer.h.1.mlp.c_fc.weight': ('transformer', 'h', '1', 'mlp', 'c_fc', 'kernel'),
    'transformer.h.1.mlp.c_fc.bias': ('transformer', 'h', '1', 'mlp', 'c_fc', 'bias'),
    'transformer.h.1.mlp.c_proj.weight': ('transformer', 'h', '1', 'mlp', 'c_proj', 'kernel'),
    'transformer.h.1.mlp.c_proj.bias': ('transformer', 'h', '1', 'mlp', 'c_proj', 'bias'),
    'transformer.ln_f.weight': ('transformer', 'ln_f', 'scale'),
    'transformer.ln_f.bias': ('transformer', 'ln_f', 'bias'),
}
param_shapes = {
    'transformer.wte.weight': (256, 64),
    'transformer.wpe.weight': (128, 64),
    'transformer.h.0.ln_1.weight': (64,),
    'transformer.h.0.ln_1.bias': (64,),
    'transformer.h.0.attn.c_attn.weight': (3, 64, 64),
    'transformer.h.0.attn.c_attn.bias': (3, 1, 64),
    'transformer.h.0.attn.c_proj.weight': (64, 64),
    'transformer.h.0.attn.c_proj.bias': (64,),
    'transformer.h.0.ln_2.weight': (64,),
    'transformer.h.0.ln_2.bias': (64,),
    'transformer.h.0.mlp.c_fc.weight': (64, 256),
    'transformer.h.0.mlp.c_fc.bias': (256,),
    'transformer.h.0.mlp.c_proj.weight': (256, 64),
    'transformer.h.0.mlp.c_proj.bias': (64,),
    'transformer.h.1.ln_1.weight': (64,),
    'transformer.h.1.ln_1.bias': (64,),
    'transformer.h.1.attn.c_attn.weight': (3, 64, 64),
    'transformer.h.1.attn.c_attn.bias': (3, 1, 64),
    'transformer.h.1.attn.c_proj.weight': (64, 64),
    'transformer.h.1.attn.c_proj.bias': (64,),
    'transformer.h.1.ln_2.weight': (64,),
    'transformer.h.1.ln_2.bias': (64,),
    'transformer.h.1.mlp.c_fc.weight': (64, 256),
    'transformer.h.1.mlp.c_fc.bias': (256,),
    'transformer.h.1.mlp.c_proj.weight': (256, 64),
    'transformer.h.1.mlp.c_proj.bias': (64,),
    'transformer.ln_f.weight': (64,),
    'transformer.ln_f.bias': (64,),
}
# The activations at module boundaries as the plan lays them out, by "module:side"
# ("*" for every layer), and each linear's input as the linear computes on it (where
# the plan redistributes it between the boundary and the linear); each with the graph's
# tensor it stands for.
activation_constraints = {
    'lm_head:input': P('data', None, None),  # transformer/ln_f/LayerNormalization:0 as lm_head/MatMul reads it
    'lm_head:output': P('data', None, 'model'),  # lm_head/MatMul:0 as loss/SoftmaxCrossEntropyLoss reads it
    'transformer.h.*.attn.c_attn:input': P('data', None, None),  # transformer/h.0/ln_1/LayerNormalization:0 as transformer/h.0/attn/c_attn/MatMul reads it
    'transformer.h.*.attn.c_proj:input': P('data', None, 'model'),  # transformer/h.0/attn/Reshape_3:0 as transformer/h.0/attn/c_proj/MatMul reads it
    'transformer.h.*.attn.c_proj:output': P('data', None, None),  # transformer/h.0/attn/c_proj/MatMul:0 as transformer/h.0/attn/c_proj/Add reads it
    'transformer.h.*.attn:input': P('data', None, None),  # transformer/h.0/ln_1/LayerNormalization:0
    'transformer.h.*.attn:output': P('data', None, None),  # transformer/h.0/attn/c_proj/Add:0
    'transformer.h.*.mlp.c_fc:input': P('data', None, None),  # transformer/h.0/ln_2/LayerNormalization:0 as transformer/h.0/mlp/c_fc/MatMul reads it
    'transformer.h.*.mlp.c_fc:output': P('data', None, 'model'),  # transformer/h.0/mlp/c_fc/MatMul:0 as transformer/h.0/mlp/c_fc/Add reads it
    'transformer.h.*.mlp.c_proj:input': P('data', None, 'model'),  # transformer/h.0/mlp/Gelu:0 as transformer/h.0/mlp/c_proj/MatMul reads it
    'transformer.h.*.mlp.c_proj:output': P('data', None, None),  # transformer/h.0/mlp/c_proj/MatMul:0 as transformer/h.0/mlp/c_proj/Add reads it
    'transformer.h.*.mlp:input': P('data', None, None),  # transformer/h.0/ln_2/LayerNormalization:0
    'transformer.h.*.mlp:output': P('data', None, None),  # transformer/h.0/mlp/c_proj/Add:0
    'transformer.h.*:input': P('data', None, None),  # transformer/Add:0
    'transformer.h.*:output': P('data', None, None),  # transformer/h.0/Add_1:0
    'transformer.wpe:output': P(None, None, None),  # transformer/wpe/Gather:0
    'transformer.wte:output': P('data', None, None),  # transformer/wte/Gather:0
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
