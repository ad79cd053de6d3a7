#!/usr/bin/python3
"""Exports convnext-tiny-shapes.onnx and resnet18-train-shapes.onnx: torchvision models as
PyTorch 2.x exports them.

Run with PyTorch 2.6, python3-torchvision and python3-onnx from the torch root (Debian 13):
  ../../../shared/tools/torch-root   # once; then in it: apt-get install python3-torchvision python3-onnx
  cd samples/onnx && ../../../shared/tools/torch-root run python3 export_vision.py

  convnext-tiny-shapes.onnx  torchvision.models.convnext_tiny(), opset 17, images [N, 3, 224, 224];
                             weight bytes stripped after export (dims kept) so the file stays small

ConvNeXt's features.0..7 are numbered but unlike (stem, four stages, three
downsamplers); the like blocks are inside the stages, 3, 3, 9 and 3 of them
(torchvision's CNBlockConfig for convnext_tiny). torch 2.x names scopes with
the whole module path ("/features/features.1/features.1.0/block/block.0/Conv").

  resnet18-train-shapes.onnx  torchvision.models.resnet18() exported in training mode
                              (TrainingMode.TRAINING), opset 17, images [N, 3, 224, 224],
                              weight bytes stripped: BatchNormalization stays in the graph with its
                              running statistics, which are buffers, not weights (the eval-mode
                              export of export.py folds it into the convolutions)

The trainable parameter counts are printed for the tests.
"""

import os

import onnx
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))


def export(model, name, **options):
    path = os.path.join(HERE, name)
    torch.onnx.export(model, (torch.randn(2, 3, 224, 224),), path, opset_version=17, dynamo=False,
                      input_names=["images"], output_names=["logits"],
                      dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}}, **options)
    proto = onnx.load(path)
    for t in proto.graph.initializer:
        t.ClearField("raw_data")
        t.ClearField("float_data")
    onnx.save(proto, path)
    print(path, os.path.getsize(path), "bytes;",
          sum(p.numel() for p in model.parameters() if p.requires_grad), "trainable parameters")


def main():
    torch.manual_seed(0)
    export(torchvision.models.convnext_tiny().eval(), "convnext-tiny-shapes.onnx")
    export(torchvision.models.resnet18().train(), "resnet18-train-shapes.onnx",
           training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


if __name__ == "__main__":
    main()
