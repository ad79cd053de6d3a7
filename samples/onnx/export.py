#!/usr/bin/python3
"""Exports the ONNX samples Tapestry's loader is tested on, and expected.json.

Run with Debian's python (python3-torch 1.13, python3-torchvision 0.14,
python3-onnx 1.12):  /usr/bin/python3 samples/onnx/export.py

Every sample is a real torch.onnx.export of a PyTorch module:
  transformer-encoder.onnx  nn.TransformerEncoder, 4 layers, d_model 64, opset 17
  gpt-tiny.onnx             GPT-style decoder (modules h.0.attn ...), 4 layers, opset 14
  resnet18-shapes.onnx      torchvision resnet18, opset 15; weight bytes stripped after
                            export (dims kept) so the file stays small
  gpt2-external.onnx        the GPT decoder at GPT-2 small size, weights saved as
                            external data whose file is not shipped, opset 14

transformer-2x3.onnx (torch.nn.Transformer as PyTorch 2.6 exports it) is made by
export_transformer.py, which runs in the torch root; tst_onnx checks it on its own,
it has no entry in expected.json.

expected.json holds what the loader must report for each sample: op counts per type
after shape subgraphs are folded, parameter counts and a few tensor shapes. They are
computed here with python onnx's own shape inference and an independent reading of
the folding rule, so the C++ loader is checked against a second implementation.
"""

import json
import math
import os
import sys

import onnx
import onnx.numpy_helper
import onnx.shape_inference
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BYTES = 5 * 1024 * 1024


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.n_head))
        mask = torch.ones(t, t, device=x.device).tril()
        att = att.masked_fill(mask == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = Mlp(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_embd, n_head):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# Input positions of each op type that carry shapes or constants, not data.
# The same table as core/io/onnx/shapeinputs.cpp, written out again here so
# expected.json is an independent statement of the folding rule.
SHAPE_INPUTS = {
    "Reshape": {1}, "Expand": {1}, "Tile": {1}, "Slice": {1, 2, 3, 4},
    "ConstantOfShape": {0}, "Range": {0, 1, 2}, "Unsqueeze": {1}, "Squeeze": {1},
    "ReduceSum": {1}, "ReduceMean": {1}, "ReduceMax": {1}, "ReduceMin": {1},
    "ReduceProd": {1}, "ReduceL1": {1}, "ReduceL2": {1}, "ReduceLogSum": {1},
    "ReduceLogSumExp": {1}, "ReduceSumSquare": {1}, "Split": {1}, "Pad": {1, 2, 3},
    "Resize": {1, 2, 3}, "Upsample": {1}, "TopK": {1}, "OneHot": {1}, "CumSum": {1},
    "Clip": {1, 2}, "Dropout": {1, 2}, "Trilu": {1},
}


def fold(model):
    """Op counts, parameter elements and parameter tensors left after folding,
    and the names of the tensors that stay."""
    g = model.graph
    outputs = {o.name for o in g.output}
    uses = {}
    for i, n in enumerate(g.node):
        for slot, name in enumerate(n.input):
            if name and slot not in SHAPE_INPUTS.get(n.op_type, ()):
                uses.setdefault(name, set()).add(i)
    alive = set(range(len(g.node)))
    changed = True
    while changed:
        changed = False
        for i in sorted(alive):
            n = g.node[i]
            if any(o in outputs for o in n.output):
                continue
            if not any(uses.get(o, set()) & alive for o in n.output if o):
                alive.discard(i)
                changed = True
    used = set()
    for i in alive:
        used.update(uses_of_node(g.node[i]))
    ops = {}
    params = 0
    param_tensors = 0
    kept = set(used) | outputs
    for i in sorted(alive):
        n = g.node[i]
        kept.update(o for o in n.output if o)
        if n.op_type == "Constant" and n.output[0] not in outputs:
            continue  # a constant, not a trained weight
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    # Trained weights: float initializers of more than one element, less
    # BatchNormalization's running statistics (buffers).
    buffers = {n.input[s] for n in g.node if n.op_type == "BatchNormalization"
               for s in (3, 4) if len(n.input) > s}
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
              onnx.TensorProto.DOUBLE}
    for init in g.initializer:
        if (init.name in used and init.data_type in floats and math.prod(init.dims) > 1
                and init.name not in buffers):
            params += math.prod(init.dims)
            param_tensors += 1
    return ops, params, param_tensors, kept


def uses_of_node(node):
    return [name for slot, name in enumerate(node.input)
            if name and slot not in SHAPE_INPUTS.get(node.op_type, ())]


def bind_inputs(model, binding):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    init_names = {i.name for i in m.graph.initializer}
    for inp in m.graph.input:
        if inp.name in init_names:
            continue
        for d in inp.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.dim_value = binding[d.dim_param]
    del m.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)


def shapes_of(model):
    shapes = {}
    for vi in list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [d.dim_value for d in t.shape.dim]
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    return shapes


def pick_tensors(model, kept):
    """A few telling tensors: the first and last compute op outputs of some
    types, the graph outputs, and the first initializers."""
    names = [o.name for o in model.graph.output]
    for op_type in ("MatMul", "Gemm", "Conv", "Softmax", "LayerNormalization", "Gather", "Add"):
        hits = [n for n in model.graph.node if n.op_type == op_type and n.output[0] in kept]
        if hits:
            names.append(hits[0].output[0])
            names.append(hits[-1].output[0])
    names += [i.name for i in model.graph.initializer if len(i.dims) >= 2][:3]
    return list(dict.fromkeys(names))


def describe(path, options, binding, torch_params, note, known_shapes=None, batch_norm_folded=False):
    model = onnx.load(path, load_external_data=False)
    bound = bind_inputs(model, binding)
    ops, params, param_tensors, kept = fold(bound)
    shapes = shapes_of(bound)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    # python onnx 1.12 gives a Range whose limit comes from a Shape op length 0
    # (Tapestry's loader evaluates it); such shapes are stated by the caller
    # from the module's configuration instead.
    picked = {name: shapes[name] for name in pick_tensors(bound, kept)
              if name in shapes and 0 not in shapes[name]}
    return {
        "file": os.path.basename(path),
        "note": note,
        "opset": opset,
        "options": options,
        "bind": binding,
        "onnx_nodes": len(model.graph.node),
        "ops": sum(ops.values()),
        "op_counts": dict(sorted(ops.items())),
        "parameters": params,
        "parameter_tensors": param_tensors,
        "torch_parameters": torch_params,
        # torch.onnx's eval-mode export folds BatchNormalization into the
        # convolutions before them: the file holds fewer weights than torch.
        "batch_norm_folded": batch_norm_folded,
        "shapes": dict(picked, **(known_shapes or {})),
    }


def export(module, args, path, opset, input_names, output_names, dynamic_axes):
    # Freshly built modules repeat the same initial values (LayerNorm ones,
    # cloned encoder layers); torch.onnx then shares one initializer through
    # Identity nodes. Trained weights differ, so make these differ too.
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    # Grad stays enabled: in eval mode under no_grad, nn.TransformerEncoderLayer
    # takes its fused fast path, which has no ONNX export.
    module.eval()
    torch.onnx.export(module, args, path, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes,
                      do_constant_folding=True)


def set_metadata(path, key, value, **save_args):
    model = onnx.load(path, load_external_data=False)
    entry = model.metadata_props.add()
    entry.key, entry.value = key, str(value)
    onnx.save(model, path, **save_args)


def strip_weights(path):
    """Keeps dims, dtype and name of every float initializer, drops its bytes,
    so a full-size torchvision model ships as a small shapes-only file."""
    model = onnx.load(path)
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT and math.prod(init.dims) > 64:
            init.ClearField("raw_data")
            init.ClearField("float_data")
    onnx.save(model, path)


def main():
    torch.manual_seed(0)
    samples = []

    path = os.path.join(HERE, "transformer-encoder.onnx")
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                       batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=4, enable_nested_tensor=False)
    export(encoder, (torch.randn(2, 16, 64),), path, 17, ["src"], ["memory"],
           {"src": {0: "batch", 1: "sequence"}, "memory": {0: "batch", 1: "sequence"}})
    set_metadata(path, "max_sequence_length", 512)
    samples.append(describe(path, {}, {"batch": 1, "sequence": 512},
                            sum(p.numel() for p in encoder.parameters()),
                            "torch.nn.TransformerEncoder, 4 layers, d_model 64, defaults"))
    samples.append(describe(path, {"batch": 8, "seq": 32}, {"batch": 8, "sequence": 32},
                            sum(p.numel() for p in encoder.parameters()),
                            "the same file with --batch 8 --seq 32"))

    path = os.path.join(HERE, "gpt-tiny.onnx")
    gpt = Gpt(vocab=512, block_size=128, n_layer=4, n_embd=64, n_head=4)
    export(gpt, (torch.randint(0, 512, (2, 16)),), path, 14, ["idx"], ["logits"],
           {"idx": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    set_metadata(path, "max_position_embeddings", 128)
    samples.append(describe(path, {"batch": 4, "seq": 64}, {"batch": 4, "seq": 64},
                            sum(p.numel() for p in gpt.parameters()),
                            "GPT-style decoder, 4 layers, n_embd 64, --batch 4 --seq 64",
                            {"/wpe/Gather_output_0": [64, 64], "/Range_output_0": [64]}))

    path = os.path.join(HERE, "resnet18-shapes.onnx")
    resnet = torchvision.models.resnet18()
    export(resnet, (torch.randn(1, 3, 224, 224),), path, 15, ["images"], ["logits"],
           {"images": {0: "N"}, "logits": {0: "N"}})
    strip_weights(path)
    samples.append(describe(path, {"batch": 2}, {"N": 2},
                            sum(p.numel() for p in resnet.parameters()),
                            "torchvision resnet18, weight bytes stripped, --batch 2",
                            batch_norm_folded=True))

    path = os.path.join(HERE, "gpt2-external.onnx")
    data = "gpt2-external.onnx.data"
    gpt2 = Gpt(vocab=50257, block_size=1024, n_layer=12, n_embd=768, n_head=12)
    export(gpt2, (torch.randint(0, 50257, (1, 8)),), path, 14, ["idx"], ["logits"],
           {"idx": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
    set_metadata(path, "max_position_embeddings", 1024, save_as_external_data=True,
                 all_tensors_to_one_file=True, location=data, size_threshold=1024)
    # The data file stays unshipped: the sample shows that a model whose
    # external weights are missing still loads.
    os.remove(os.path.join(HERE, data))
    samples.append(describe(path, {}, {"batch": 1, "seq": 1024},
                            sum(p.numel() for p in gpt2.parameters()),
                            "GPT-2 small sized decoder, external data file not shipped, defaults",
                            {"/wpe/Gather_output_0": [1024, 768], "/Range_output_0": [1024]}))

    for s in samples:
        size = os.path.getsize(os.path.join(HERE, s["file"]))
        if size > MAX_BYTES:
            sys.exit(f"{s['file']} is {size} bytes, over the {MAX_BYTES} limit for samples")
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump({"samples": samples}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
