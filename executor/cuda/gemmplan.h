#pragma once

#include "ir/graph.h"

#include <cstdint>
#include <vector>

namespace tapestry::exec::gpu {

// One cuBLAS GEMM (column-major), or a strided batch of them, as a matmul
// kernel issues it. Host-side shape logic only, so it is tested without a GPU.
//
// A row-major product C[M,N] = op(X)·op(Y) is, read column-major, Cᵀ =
// op(Y)ᵀ·op(X)ᵀ: cuBLAS's first operand is Y and its second X, with the
// same transpose flags, m = N and n = M.
struct GemmOp {
    enum class Operand { A, B, Dout };  // the matmul's tensors
    bool transFirst = false, transSecond = false;
    std::int64_t m = 0, n = 0, k = 0;
    Operand first = Operand::B, second = Operand::A;  // cuBLAS's A and B
    std::int64_t firstOffset = 0, secondOffset = 0, outOffset = 0;
    std::int64_t ldFirst = 0, ldSecond = 0, ldOut = 0;
    float beta = 0.0f;  // 0: write, 1: add into (gradients)
    std::int64_t batch = 1;  // > 1: a strided batch
    std::int64_t strideFirst = 0, strideSecond = 0, strideOut = 0;
    bool outIsDa = false;  // backward: which gradient this GEMM writes
};

// out = a·b (numpy matmul, batch dims broadcast): one GEMM when b has no
// batch dims, one strided batch when neither operand is broadcast, else one
// GEMM per batch entry.
// With `transB`, b is a matrix stored [N, K] (kernels::matmulForward), its
// gradient laid out so.
std::vector<GemmOp> planMatmulForward(const ir::Shape &out, const ir::Shape &a, const ir::Shape &b,
                                      bool transB = false);
// da += dout·bᵀ, db += aᵀ·dout; a gradient whose operand is broadcast over
// batch entries is summed by issuing its GEMMs one after another (beta 1) on
// one stream, never as one batch that would race on the same output.
std::vector<GemmOp> planMatmulBackward(
    const ir::Shape &dout, const ir::Shape &a, const ir::Shape &b, bool wantDa, bool wantDb, bool transB = false);

} // namespace tapestry::exec::gpu
