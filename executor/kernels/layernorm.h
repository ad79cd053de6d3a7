#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// LayerNormalization over the last axis: out = (x − mean)·rstd·weight + bias.
// mean and rstd (one per row) are saved for the backward pass; bias may be
// absent (no data).
void layernormForward(const TensorView &out, const TensorView &mean, const TensorView &rstd,
                      const TensorView &x, const TensorView &weight, const TensorView &bias,
                      float epsilon);

// Adds into dx, dweight and dbias; a view without data is skipped.
void layernormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
                       const TensorView &mean, const TensorView &rstd, const TensorView &dx,
                       const TensorView &dweight, const TensorView &dbias);

} // namespace tapestry::exec::kernels
