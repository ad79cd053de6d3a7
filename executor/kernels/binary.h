#pragma once

#include "tensorview.h"

namespace tapestry::exec::kernels {

enum class BinaryOp { Add, Sub, Mul, Div };

// out = a op b with numpy broadcasting (shapes aligned on the right, dims of
// 1 stretched): bias adds, the attention mask added before Softmax, the
// rotary embedding's cos/sin products.
void binaryForward(BinaryOp op, const TensorView &out, const TensorView &a, const TensorView &b);

// da += dout·∂out/∂a and db += dout·∂out/∂b, summed over the dims each
// operand was broadcast along. A view without data is skipped.
void binaryBackward(BinaryOp op, const TensorView &dout, const TensorView &a, const TensorView &b,
                    const TensorView &da, const TensorView &db);

} // namespace tapestry::exec::kernels
