#include "kernels/matmul.h"

#include "kernels/strided.h"

#include <cblas.h>

namespace tapestry::exec::kernels {

namespace {

int blasInt(std::int64_t v)
{
    return static_cast<int>(v);
}

// Walks the output's batch dims and hands each batch's matrix offsets (in
// elements) of out, a and b to `body`; broadcast batch dims repeat an
// operand's matrix.
template <typename Body>
void forEachBatch(const TensorView &out, const TensorView &a, const TensorView &b, Body body)
{
    const std::size_t r = out.rank() - 2;
    const std::span<const std::int64_t> batch(out.shape.data(), r);
    const Dims sa = broadcastStrides({a.shape.data(), a.rank() - 2}, batch);
    const Dims sb = broadcastStrides({b.shape.data(), b.rank() - 2}, batch);
    const std::int64_t aMat = a.dim(a.rank() - 2) * a.dim(a.rank() - 1);
    const std::int64_t bMat = b.dim(b.rank() - 2) * b.dim(b.rank() - 1);
    const std::int64_t oMat = out.dim(out.rank() - 2) * out.dim(out.rank() - 1);
    std::int64_t count = 1;
    for (auto d : batch)
        count *= d;
    Dims idx{};
    std::int64_t aOff = 0, bOff = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        body(i * oMat, aOff * aMat, bOff * bMat);
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
}

} // namespace

void matmulForward(const TensorView &out, const TensorView &a, const TensorView &b, bool transB)
{
    const std::int64_t K = a.cols();
    if (transB) {
        const std::int64_t M = a.rows(), N = b.dim(0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasInt(M), blasInt(N), blasInt(K), 1.0f, a.data,
                    blasInt(K), b.data, blasInt(K), 0.0f, out.data, blasInt(N));
        return;
    }
    const std::int64_t N = b.cols();
    if (b.rank() == 2) {
        const std::int64_t M = a.rows();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasInt(M), blasInt(N), blasInt(K),
                    1.0f, a.data, blasInt(K), b.data, blasInt(N), 0.0f, out.data, blasInt(N));
        return;
    }
    const std::int64_t M = a.dim(a.rank() - 2);
    forEachBatch(out, a, b, [&](std::int64_t o, std::int64_t ao, std::int64_t bo) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasInt(M), blasInt(N), blasInt(K),
                    1.0f, a.data + ao, blasInt(K), b.data + bo, blasInt(N), 0.0f, out.data + o,
                    blasInt(N));
    });
}

void matmulBackward(const TensorView &dout, const TensorView &a, const TensorView &b,
                    const TensorView &da, const TensorView &db, bool transB)
{
    const std::int64_t K = a.cols();
    if (transB) {
        // b [N, K]: da[M, K] += dout[M, N] · b, db[N, K] += doutᵀ · a.
        const std::int64_t M = a.rows(), N = b.dim(0);
        if (da)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blasInt(M), blasInt(K), blasInt(N), 1.0f,
                        dout.data, blasInt(N), b.data, blasInt(K), 1.0f, da.data, blasInt(K));
        if (db)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasInt(N), blasInt(K), blasInt(M), 1.0f,
                        dout.data, blasInt(N), a.data, blasInt(K), 1.0f, db.data, blasInt(K));
        return;
    }
    const std::int64_t N = b.cols();
    if (b.rank() == 2) {
        const std::int64_t M = a.rows();
        if (da)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasInt(M), blasInt(K), blasInt(N),
                        1.0f, dout.data, blasInt(N), b.data, blasInt(N), 1.0f, da.data, blasInt(K));
        if (db)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasInt(K), blasInt(N), blasInt(M),
                        1.0f, a.data, blasInt(K), dout.data, blasInt(N), 1.0f, db.data, blasInt(N));
        return;
    }
    const std::int64_t M = a.dim(a.rank() - 2);
    forEachBatch(dout, a, b, [&](std::int64_t o, std::int64_t ao, std::int64_t bo) {
        if (da)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasInt(M), blasInt(K), blasInt(N),
                        1.0f, dout.data + o, blasInt(N), b.data + bo, blasInt(N), 1.0f,
                        da.data + ao, blasInt(K));
        if (db)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blasInt(K), blasInt(N), blasInt(M),
                        1.0f, a.data + ao, blasInt(K), dout.data + o, blasInt(N), 1.0f,
                        db.data + bo, blasInt(N));
    });
}

std::vector<GemmCall> matmulGemms(const ir::Shape &out, const ir::Shape &a, const ir::Shape &b, bool backward,
                                  bool wantDa, bool wantDb, bool transB)
{
    const std::int64_t K = a.back();
    if (transB) {
        std::int64_t M = 1;
        for (std::size_t i = 0; i + 1 < a.size(); ++i)
            M *= a[i];
        const std::int64_t N = b.front();
        if (!backward)
            return {{false, true, M, N, K, 1}};
        std::vector<GemmCall> calls;
        if (wantDa)
            calls.push_back({false, false, M, K, N, 1});
        if (wantDb)
            calls.push_back({true, false, N, K, M, 1});
        return calls;
    }
    const std::int64_t N = b.back();
    std::int64_t M = a[a.size() - 2], count = 1;
    if (b.size() == 2) {
        M = 1;
        for (std::size_t i = 0; i + 1 < a.size(); ++i)
            M *= a[i];
    } else {
        for (std::size_t i = 0; i + 2 < out.size(); ++i)
            count *= out[i];
    }
    if (!backward)
        return {{false, false, M, N, K, count}};
    std::vector<GemmCall> calls;
    if (wantDa)
        calls.push_back({false, true, M, K, N, count});
    if (wantDb)
        calls.push_back({true, false, K, N, M, count});
    return calls;
}

double matmulFlops(const TensorView &out, const TensorView &a)
{
    return 2.0 * static_cast<double>(out.size()) * static_cast<double>(a.cols());
}

} // namespace tapestry::exec::kernels
