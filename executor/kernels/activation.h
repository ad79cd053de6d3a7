#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// Pointwise activations, forward and backward. Backward kernels add into dx
// (gradients accumulate where a tensor has several consumers).
void reluForward(const TensorView &out, const TensorView &x);
void reluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx);

// ONNX Gelu: the exact form x·Φ(x) with erf, or (approximate="tanh") GPT-2's
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
enum class GeluForm { Erf, Tanh };
void geluForward(GeluForm form, const TensorView &out, const TensorView &x);
void geluBackward(GeluForm form, const TensorView &dout, const TensorView &x, const TensorView &dx);

// SiLU (swish): x·σ(x), LLaMA's SwiGLU gate.
void siluForward(const TensorView &out, const TensorView &x);
void siluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx);

// Neg: the rotary embedding's rotate-half.
void negForward(const TensorView &out, const TensorView &x);
void negBackward(const TensorView &dout, const TensorView &dx);

} // namespace tapestry::exec::kernels
