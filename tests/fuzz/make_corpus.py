#!/usr/bin/python3
"""Writes the seed corpus of fuzz_onnx: small valid ONNX models that reach
every part of the loader, and broken variants of them.

Run with Debian's python (python3-onnx 1.12): /usr/bin/python3 tests/fuzz/make_corpus.py
The outputs are committed; CI only reads them.
"""

import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def save(name, graph, opset=17, extra_opsets=(), metadata=None):
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="tapestry-fuzz-seed")
    model.ir_version = 8
    for k, v in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, str(v)
    path = os.path.join(CORPUS, name)
    onnx.save(model, path)
    return path


def f32(name, *dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))


def const_i64(name, values):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, dtype=np.int64)))


def main():
    os.makedirs(CORPUS, exist_ok=True)
    written = []

    # MLP with weights as initializers and a symbolic batch.
    w1 = numpy_helper.from_array(np.zeros((8, 16), np.float32), "fc1.weight")
    w2 = numpy_helper.from_array(np.zeros((16, 4), np.float32), "fc2.weight")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "fc1.weight"], ["h"], name="/fc1/MatMul"),
         helper.make_node("Relu", ["h"], ["a"], name="/act/Relu"),
         helper.make_node("MatMul", ["a", "fc2.weight"], ["y"], name="/fc2/MatMul")],
        "mlp", [f32("x", "batch", 8)], [f32("y", "batch", 4)], [w1, w2])
    written.append(save("mlp.onnx", g))

    # The PyTorch shape chain: Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
    # a Slice with computed ends and a Range over the sequence length.
    g = helper.make_graph(
        [helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
         const_i64("i0", 0), const_i64("i1", 1), const_i64("ax", [0]),
         helper.make_node("Gather", ["s", "i0"], ["b"], name="/Gather"),
         helper.make_node("Gather", ["s", "i1"], ["t"], name="/Gather_1"),
         helper.make_node("Unsqueeze", ["b", "ax"], ["bu"], name="/Unsqueeze"),
         helper.make_node("Unsqueeze", ["t", "ax"], ["tu"], name="/Unsqueeze_1"),
         const_i64("heads", [2, -1]),
         helper.make_node("Concat", ["bu", "tu", "heads"], ["target"], axis=0, name="/Concat"),
         helper.make_node("Reshape", ["x", "target"], ["r"], name="/attn/Reshape"),
         const_i64("two", 2),
         helper.make_node("Div", ["t", "two"], ["half"], name="/Div"),
         helper.make_node("Unsqueeze", ["half", "ax"], ["halfu"], name="/Unsqueeze_2"),
         const_i64("zero", [0]), const_i64("one", [1]),
         helper.make_node("Slice", ["r", "zero", "halfu", "one"], ["sl"], name="/attn/Slice"),
         const_i64("start", 0), const_i64("step", 1),
         helper.make_node("Range", ["start", "t", "step"], ["pos"], name="/Range"),
         helper.make_node("Transpose", ["sl"], ["y"], perm=[1, 0, 2, 3], name="/attn/Transpose")],
        "shapes", [f32("x", "batch", "seq", 8)],
        [f32("y", None, None, None, None), helper.make_tensor_value_info("pos", TensorProto.INT64, [None])])
    written.append(save("shape-chain.onnx", g, metadata={"max_position_embeddings": 16}))

    # An opaque custom op with declared shapes, attributes of every kind and
    # an unnamed node.
    g = helper.make_graph(
        [helper.make_node("FusedThing", ["x"], ["z"], domain="com.example", name="blk/FusedThing",
                          alpha=0.5, axis=-1, mode="fast", perm=[1, 0], scales=[1.5, 2.0], tags=["a", "b"]),
         helper.make_node("Softmax", ["z"], ["y"], axis=-1)],
        "custom", [f32("x", "N", 6)], [f32("y", "N", 6)], value_info=[f32("z", "N", 6)])
    written.append(save("custom-op.onnx", g, extra_opsets=[("com.example", 1)]))

    # LayerNormalization, Gemm with a bias, Where on a causal mask, Split.
    scale = numpy_helper.from_array(np.ones(4, np.float32), "ln.weight")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "ln.bias")
    wq = numpy_helper.from_array(np.zeros((12, 4), np.float32), "qkv.weight")
    bq = numpy_helper.from_array(np.zeros(12, np.float32), "qkv.bias")
    split = numpy_helper.from_array(np.array([4, 4, 4], np.int64), "split")
    g = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "ln.weight", "ln.bias"], ["n"], axis=-1, name="/ln/LN"),
         helper.make_node("Gemm", ["n", "qkv.weight", "qkv.bias"], ["qkv"], transB=1, name="/qkv/Gemm"),
         helper.make_node("Split", ["qkv", "split"], ["q", "k", "v"], axis=1, name="/Split"),
         helper.make_node("Gemm", ["q", "k"], ["s"], transB=1, name="/scores/Gemm"),
         helper.make_node("Shape", ["s"], ["ss"]),
         helper.make_node("ConstantOfShape", ["ss"], ["ones"],
                          value=numpy_helper.from_array(np.array([1], np.int64))),
         helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
         const_i64("z0", 0),
         helper.make_node("Equal", ["tri", "z0"], ["masked"]),
         helper.make_node("Constant", [], ["ninf"], value_float=-1e9),
         helper.make_node("Where", ["masked", "ninf", "s"], ["sm"]),
         helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
         helper.make_node("MatMul", ["p", "v"], ["y"], name="/attn/MatMul")],
        "attention", [f32("x", 5, 4)], [f32("y", 5, 4)], [scale, bias, wq, bq, split])
    written.append(save("attention.onnx", g))

    # The torchvision sample: real Conv/BatchNorm-folded structure, small.
    shutil.copy(os.path.join(HERE, "..", "..", "samples", "onnx", "resnet18-shapes.onnx"),
                os.path.join(CORPUS, "resnet18-shapes.onnx"))
    # A real export without its weights: every parameter a graph input.
    shutil.copy(os.path.join(HERE, "..", "..", "samples", "onnx", "encoder-weightless.onnx"),
                os.path.join(CORPUS, "encoder-weightless.onnx"))

    # Broken variants: cut short, bytes flipped, an opset out of range, a cycle.
    with open(written[1], "rb") as f:
        data = f.read()
    with open(os.path.join(CORPUS, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    flipped = bytearray(data)
    for i in range(7, len(flipped), 61):
        flipped[i] ^= 0x5A
    with open(os.path.join(CORPUS, "flipped.onnx"), "wb") as f:
        f.write(bytes(flipped))
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "old", [f32("x", 2)], [f32("y", 2)])
    save("opset9.onnx", g, opset=9)
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["a"], name="a"), helper.make_node("Relu", ["a"], ["b"], name="b")],
        "cycle", [f32("x", 2)], [f32("a", 2)])
    save("cycle.onnx", g)


if __name__ == "__main__":
    main()
