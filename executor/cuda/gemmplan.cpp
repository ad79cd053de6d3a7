#include "cuda/gemmplan.h"

#include "kernels/strided.h"

#include <span>

namespace tapestry::exec::gpu {

namespace {

using Operand = GemmOp::Operand;

// A row-major product C[M,N] = op(X)[M,K]·op(Y)[K,N] with X and Y stored
// row-major at leading dims ldX and ldY.
struct RowGemm {
    Operand x, y;
    bool transX, transY;
    std::int64_t M, N, K, ldX, ldY, ldC;
    float beta;
    bool outIsDa;
};

GemmOp toColumnMajor(const RowGemm &g)
{
    GemmOp op;
    op.transFirst = g.transY;
    op.transSecond = g.transX;
    op.m = g.N;
    op.n = g.M;
    op.k = g.K;
    op.first = g.y;
    op.second = g.x;
    op.ldFirst = g.ldY;
    op.ldSecond = g.ldX;
    op.ldOut = g.ldC;
    op.beta = g.beta;
    op.outIsDa = g.outIsDa;
    return op;
}

struct BatchOffsets {
    std::int64_t out, a, b;
};

// Per batch entry of the output, the matrix offsets (elements) of out, a
// and b; broadcast batch dims repeat an operand's matrix (kernels/matmul.cpp).
std::vector<BatchOffsets> batches(const ir::Shape &out, const ir::Shape &a, const ir::Shape &b)
{
    const std::size_t r = out.size() - 2;
    const std::span<const std::int64_t> batch(out.data(), r);
    const kernels::Dims sa = kernels::broadcastStrides({a.data(), a.size() - 2}, batch);
    const kernels::Dims sb = kernels::broadcastStrides({b.data(), b.size() - 2}, batch);
    const std::int64_t aMat = a[a.size() - 2] * a.back(), bMat = b[b.size() - 2] * b.back();
    const std::int64_t oMat = out[out.size() - 2] * out.back();
    std::int64_t count = 1;
    for (auto d : batch)
        count *= d;
    std::vector<BatchOffsets> offsets;
    kernels::Dims idx {};
    std::int64_t aOff = 0, bOff = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        offsets.push_back({i * oMat, aOff * aMat, bOff * bMat});
        for (std::size_t axis = r; axis-- > 0;) {
            ++idx[axis];
            aOff += sa[axis];
            bOff += sb[axis];
            if (idx[axis] < batch[axis])
                break;
            aOff -= sa[axis] * batch[axis];
            bOff -= sb[axis] * batch[axis];
            idx[axis] = 0;
        }
    }
    return offsets;
}

bool sameBatch(const ir::Shape &x, const ir::Shape &out)
{
    return x.size() == out.size() && std::equal(x.begin(), x.end() - 2, out.begin());
}

std::int64_t matrix(const ir::Shape &s)
{
    return s[s.size() - 2] * s.back();
}

// The GEMMs of `g` over the batch: one batch when `batched`, else one each.
void expand(const RowGemm &g, const ir::Shape &out, const ir::Shape &a, const ir::Shape &b, bool batched,
    std::vector<GemmOp> &ops)
{
    const auto offsets = batches(out, a, b);
    auto offsetOf = [](Operand o, const BatchOffsets &e) {
        return o == Operand::A ? e.a : o == Operand::B ? e.b : e.out;
    };
    auto strideOf = [&](Operand o) { return matrix(o == Operand::A ? a : o == Operand::B ? b : out); };
    const Operand target = g.outIsDa ? Operand::A : (g.beta == 0.0f ? Operand::Dout : Operand::B);
    if (batched) {
        GemmOp op = toColumnMajor(g);
        op.batch = static_cast<std::int64_t>(offsets.size());
        op.strideFirst = strideOf(op.first);
        op.strideSecond = strideOf(op.second);
        op.strideOut = strideOf(target);
        ops.push_back(op);
        return;
    }
    for (const BatchOffsets &e : offsets) {
        GemmOp op = toColumnMajor(g);
        op.firstOffset = offsetOf(op.first, e);
        op.secondOffset = offsetOf(op.second, e);
        op.outOffset = offsetOf(target, e);
        ops.push_back(op);
    }
}

// The rows of a read as a matrix: every dim but the last.
std::int64_t rowsOf(const ir::Shape &a)
{
    std::int64_t M = 1;
    for (std::size_t i = 0; i + 1 < a.size(); ++i)
        M *= a[i];
    return M;
}

} // namespace

std::vector<GemmOp> planMatmulForward(const ir::Shape &out, const ir::Shape &a, const ir::Shape &b, bool transB)
{
    std::vector<GemmOp> ops;
    if (transB) {  // out[M,N] = a·bᵀ, b [N,K]
        const std::int64_t K = a.back(), N = b.front();
        ops.push_back(toColumnMajor({Operand::A, Operand::B, false, true, rowsOf(a), N, K, K, K, N, 0.0f, false}));
        return ops;
    }
    const std::int64_t K = a.back(), N = b.back();
    if (b.size() == 2) {
        std::int64_t M = 1;
        for (std::size_t i = 0; i + 1 < a.size(); ++i)
            M *= a[i];
        ops.push_back(toColumnMajor({Operand::A, Operand::B, false, false, M, N, K, K, N, N, 0.0f, false}));
        return ops;
    }
    const std::int64_t M = a[a.size() - 2];
    const RowGemm g {Operand::A, Operand::B, false, false, M, N, K, K, N, N, 0.0f, false};
    expand(g, out, a, b, sameBatch(a, out) && sameBatch(b, out), ops);
    return ops;
}

std::vector<GemmOp> planMatmulBackward(
    const ir::Shape &dout, const ir::Shape &a, const ir::Shape &b, bool wantDa, bool wantDb, bool transB)
{
    std::vector<GemmOp> ops;
    if (transB) {  // b [N,K]: da[M,K] += dout·b, db[N,K] += doutᵀ·a
        const std::int64_t K = a.back(), N = b.front(), M = rowsOf(a);
        if (wantDa)
            ops.push_back(toColumnMajor({Operand::Dout, Operand::B, false, false, M, K, N, N, K, K, 1.0f, true}));
        if (wantDb)
            ops.push_back(toColumnMajor({Operand::Dout, Operand::A, true, false, N, K, M, N, K, K, 1.0f, false}));
        return ops;
    }
    const std::int64_t K = a.back(), N = b.back();
    if (b.size() == 2) {
        std::int64_t M = 1;
        for (std::size_t i = 0; i + 1 < a.size(); ++i)
            M *= a[i];
        if (wantDa)  // da[M,K] += dout[M,N]·bᵀ
            ops.push_back(
                toColumnMajor({Operand::Dout, Operand::B, false, true, M, K, N, N, N, K, 1.0f, true}));
        if (wantDb)  // db[K,N] += aᵀ·dout
            ops.push_back(
                toColumnMajor({Operand::A, Operand::Dout, true, false, K, N, M, K, N, N, 1.0f, false}));
        return ops;
    }
    const std::int64_t M = a[a.size() - 2];
    const bool aWhole = sameBatch(a, dout), bWhole = sameBatch(b, dout);
    // A gradient can be one batch only when its own operand is not broadcast
    // (no two entries add into one matrix) and the other is not either (its
    // matrices follow at a fixed stride).
    if (wantDa)
        expand({Operand::Dout, Operand::B, false, true, M, K, N, N, N, K, 1.0f, true}, dout, a, b,
            aWhole && bWhole, ops);
    if (wantDb)
        expand({Operand::A, Operand::Dout, true, false, K, N, M, K, N, N, 1.0f, false}, dout, a, b,
            aWhole && bWhole, ops);
    return ops;
}

} // namespace tapestry::exec::gpu
