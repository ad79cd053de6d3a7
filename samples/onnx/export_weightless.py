#!/usr/bin/python3
"""Exports encoder-weightless.onnx: a model exported without its weights.

Run with PyTorch 2.6 from the torch root (Debian 13):
  cd samples/onnx && ../../../shared/tools/torch-root run python3 export_weightless.py

  encoder-weightless.onnx  nn.TransformerEncoder, 2 layers, d_model 64, 4 heads,
                           ffn 128, batch_first, src [4, 32, 64], opset 17,
                           export_params=False: every parameter is a graph input

torch.onnx.export(..., export_params=False) is a common way to share a model's
structure without its weights; the loader must take those inputs as the weights
they are. The module's trainable parameter count is printed for the test.
"""

import os

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, dropout=0.0,
                                       batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    path = os.path.join(HERE, "encoder-weightless.onnx")
    torch.onnx.export(model, (torch.randn(4, 32, 64),), path, opset_version=17, dynamo=False,
                      export_params=False, input_names=["src"], output_names=["memory"])
    print(path, os.path.getsize(path), "bytes;",
          sum(p.numel() for p in model.parameters() if p.requires_grad), "trainable parameters")


if __name__ == "__main__":
    main()
