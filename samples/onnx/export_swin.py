#!/usr/bin/python3
"""Exports swin-t-shapes.onnx: torchvision's Swin Transformer (swin_t) as Debian 12's PyTorch 1.13
exports it for inference (opset 14, constant folding on, the defaults a user gets).

Run with Debian 12's python3-torch, python3-torchvision and python3-onnx:
  cd samples/onnx && /usr/bin/python3 export_swin.py

  swin-t-shapes.onnx  torchvision.models.swin_t(), images [1, 3, 224, 224]; float weight bytes
                      stripped after export (dims kept) so the file stays small

What it holds that other exports do not:
- each shifted-window attention pads its input to whole windows with F.pad, whose pads torch
  lowers to Shape/Mod/Concat arithmetic, then a Reshape to [k, 2], a Slice of step -1 over its
  rows, a Transpose and a Cast: values the loader computes at load time to size the Pad;
- constant folding gathers each block's relative position bias table by its index buffer into
  a [1, heads, 49, 49] constant named onnx::Add_N: the table (169 x heads trainable values) is
  gone from the graph, so the export's trainable parameters are torch's less the tables;
- the stages hold 2, 2, 6 and 2 blocks, alternating window and shifted-window attention
  (torchvision's swin_t depths; the last stage's shift is dropped, its 7x7 map being one window).

The trainable parameter counts are printed for the tests.
"""

import os

import onnx
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(0)
    model = torchvision.models.swin_t().eval()
    path = os.path.join(HERE, "swin-t-shapes.onnx")
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), path, opset_version=14,
                      input_names=["images"], output_names=["logits"])
    proto = onnx.load(path)
    for t in proto.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.ClearField("raw_data")
            t.ClearField("float_data")
    onnx.save(proto, path)
    tables = sum(p.numel() for n, p in model.named_parameters() if n.endswith("relative_position_bias_table"))
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(path, os.path.getsize(path), "bytes;", total, "trainable parameters;", tables,
          "of them in the relative position bias tables;", total - tables, "in the export")


if __name__ == "__main__":
    main()
