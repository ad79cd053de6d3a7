#!/usr/bin/python3
"""Exports transformer-2x3.onnx: torch.nn.Transformer (encoder and decoder) as
PyTorch 2.x's TorchScript exporter writes it.

Run with PyTorch 2.6 and python3-onnx from the torch root (Debian 13):
  cd samples/onnx && ../../../shared/tools/torch-root run python3 export_transformer.py
(Debian 12's torch 1.13, which export.py uses, writes this model differently.)

  transformer-2x3.onnx  nn.Transformer, d_model 32, 4 heads, 2 encoder + 3 decoder
                        layers, ffn 64, batch_first, src [8, 16, 32], tgt [8, 8, 32],
                        opset 17, static shapes

The module is exported fresh, as a user would export it, not perturbed as in
export.py: torch.onnx then merges parameters that hold equal values (LayerNorm
weights, zero biases, the cloned layers' weights) into one initializer read
through Identity nodes. The attention reshapes are sized by Shape -> Slice ->
Concat arithmetic with a Mod, and the attention scale is computed from a Shape
(Cast -> Sqrt -> Div): the shape inference and folding these need is what the
sample tests. Three decoder layers, so that two of them repeat exactly: the
transposition of the encoder's memory, which every decoder layer reads, is
exported once, inside the first decoder layer.
"""

import os
import sys

import onnx
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_BYTES = 512 * 1024


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3,
                                dim_feedforward=64, dropout=0.0, batch_first=True)

    def forward(self, src, tgt):
        return self.t(src, tgt)


def main():
    torch.manual_seed(0)
    model = Seq2Seq().eval()
    src, tgt = torch.randn(8, 16, 32), torch.randn(8, 8, 32)
    path = os.path.join(HERE, "transformer-2x3.onnx")
    torch.onnx.export(model, (src, tgt), path, opset_version=17, dynamo=False,
                      input_names=["src", "tgt"], output_names=["out"])
    onnx.checker.check_model(onnx.load(path))
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        sys.exit(f"{path} is {size} bytes, over the {MAX_BYTES} limit for this sample")
    params = sum(p.numel() for p in model.parameters())
    print(f"{os.path.basename(path)}: {size} bytes, {params} torch parameters")


if __name__ == "__main__":
    main()
