#pragma once

#include "tensorview.h"

#include <vector>

namespace tapestry::exec::kernels {

// out = a · b with numpy matmul semantics: a[..., M, K], b[..., K, N],
// out[..., M, N], the batch dims broadcast. Both operands have rank >= 2 (the
// zoo's x[b,s,h]·W[h,o] and q·kᵀ as [b,a,s,d]·[b,a,d,s]). All GEMMs go to
// OpenBLAS; a weight without batch dims makes the whole product one GEMM.
// With `transB`, b is a matrix stored transposed, [N, K] (a parameter read
// through its transpose, as a tied LM head reads the embedding), and db is
// laid out as b is.
void matmulForward(const TensorView &out, const TensorView &a, const TensorView &b, bool transB = false);

// da += dout · bᵀ and db += aᵀ · dout, summed over the batch dims an operand
// was broadcast along. A view without data is skipped (no gradient wanted).
void matmulBackward(const TensorView &dout, const TensorView &a, const TensorView &b,
                    const TensorView &da, const TensorView &db, bool transB = false);

// One cblas_sgemm shape the kernels above issue (row-major), `count` times.
struct GemmCall {
    bool transA = false, transB = false;
    std::int64_t m = 0, n = 0, k = 0, count = 1;
};

// The GEMMs matmulForward (`backward` false) or matmulBackward (with the
// gradients wanted) issue for these shapes, so that a benchmark can time
// OpenBLAS alone on exactly the calls a step makes.
std::vector<GemmCall> matmulGemms(const ir::Shape &out, const ir::Shape &a, const ir::Shape &b, bool backward,
                                  bool wantDa, bool wantDb, bool transB = false);

// Multiply-adds of the forward product times two.
double matmulFlops(const TensorView &out, const TensorView &a);

} // namespace tapestry::exec::kernels
