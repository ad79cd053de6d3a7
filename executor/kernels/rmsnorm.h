#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

// RMSNorm over the last axis (T5, LLaMA): out = x·rstd·weight with
// rstd = 1/√(mean(x²) + ε), saved per row for the backward pass.
void rmsnormForward(const TensorView &out, const TensorView &rstd, const TensorView &x,
                    const TensorView &weight, float epsilon);

// Adds into dx and dweight; a view without data is skipped.
void rmsnormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
                     const TensorView &rstd, const TensorView &dx, const TensorView &dweight);

} // namespace tapestry::exec::kernels
