#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// Softmax along the last axis, rows treated independently. The causal mask is
// not part of the kernel: the zoo adds a mask input (0 or a large negative
// number) to the scores before Softmax, which this handles like any logits.
void softmaxForward(const TensorView &out, const TensorView &x);

// dx += y ⊙ (dy − Σ dy⊙y), from the forward output y.
void softmaxBackward(const TensorView &dout, const TensorView &out, const TensorView &dx);

} // namespace tapestry::exec::kernels
