#!/usr/bin/python3
"""Exports conformer-shapes.onnx: torchaudio's Conformer encoder as Debian 12's PyTorch 1.13
exports it for inference (opset 14, constant folding on, the defaults a user gets).

Run with Debian 12's python3-torch, python3-torchaudio and python3-onnx:
  cd samples/onnx && /usr/bin/python3 export_audio.py

  conformer-shapes.onnx  torchaudio.models.Conformer(input_dim=80, num_heads=4, ffn_dim=256,
                         num_layers=4, depthwise_conv_kernel_size=31), features [2, 100, 80] and
                         their lengths [2]; float weight bytes stripped after export (dims kept)

What it holds: four like conformer layers (two half-step feed-forward modules around
multi-head self-attention and a convolution module: pointwise conv, GLU, depthwise conv,
batch norm, SiLU, pointwise conv), a padding mask computed from the lengths (Range,
comparisons), and torch 1.13's MultiheadAttention in_proj. Constant folding folds each
convolution module's BatchNorm1d (eval mode) into the depthwise convolution before it: its
weight and bias (2 x 80 per layer) are gone from the export, the convolution gains a bias.

The trainable parameter counts are printed for the tests.
"""

import os

import onnx
import torch
import torchaudio

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(0)
    model = torchaudio.models.Conformer(input_dim=80, num_heads=4, ffn_dim=256, num_layers=4,
                                        depthwise_conv_kernel_size=31).eval()
    path = os.path.join(HERE, "conformer-shapes.onnx")
    torch.onnx.export(model, (torch.randn(2, 100, 80), torch.tensor([100, 100])), path, opset_version=14,
                      input_names=["features", "lengths"], output_names=["encoded", "encoded_lengths"])
    proto = onnx.load(path)
    for t in proto.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.ClearField("raw_data")
            t.ClearField("float_data")
    onnx.save(proto, path)
    norms = sum(p.numel() for n, p in model.named_parameters() if ".conv_module." in n and "sequential.3." in n)
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(path, os.path.getsize(path), "bytes;", total, "trainable parameters;", norms,
          "of them in the folded batch norms")


if __name__ == "__main__":
    main()
