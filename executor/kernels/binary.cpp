#include "kernels/binary.h"

#include "kernels/strided.h"

namespace tapestry::exec::kernels {

namespace {

// Calls f(outIndex, aIndex, bIndex) for every output element, in order.
template <typename F>
void broadcastWalk(const TensorView &out, const TensorView &a, const TensorView &b, F f)
{
    const std::size_t r = out.rank();
    const std::int64_t total = out.size();
    if (a.shape == out.shape && b.shape == out.shape) {
        for (std::int64_t i = 0; i < total; ++i)
            f(i, i, i);
        return;
    }
    if (r == 0 || total == 0) {
        if (total)
            f(0, 0, 0);
        return;
    }
    const Dims sa = broadcastStrides(a.shape, out.shape), sb = broadcastStrides(b.shape, out.shape);
    const std::int64_t n = out.shape[r - 1], ia = sa[r - 1], ib = sb[r - 1];
    Dims idx{};
    std::int64_t aOff = 0, bOff = 0;
    for (std::int64_t o = 0; o < total; o += n) {
        for (std::int64_t k = 0; k < n; ++k)
            f(o + k, aOff + k * ia, bOff + k * ib);
        for (std::size_t axis = r - 1; axis-- > 0;) {
            ++idx[axis];
            aOff += sa[axis];
            bOff += sb[axis];
            if (idx[axis] < out.shape[axis])
                break;
            aOff -= sa[axis] * out.shape[axis];
            bOff -= sb[axis] * out.shape[axis];
            idx[axis] = 0;
        }
    }
}

} // namespace

void binaryForward(BinaryOp op, const TensorView &out, const TensorView &a, const TensorView &b)
{
    float *o = out.data;
    const float *x = a.data, *y = b.data;
    switch (op) {
    case BinaryOp::Add:
        broadcastWalk(out, a, b, [&](auto i, auto j, auto k) { o[i] = x[j] + y[k]; });
        break;
    case BinaryOp::Sub:
        broadcastWalk(out, a, b, [&](auto i, auto j, auto k) { o[i] = x[j] - y[k]; });
        break;
    case BinaryOp::Mul:
        broadcastWalk(out, a, b, [&](auto i, auto j, auto k) { o[i] = x[j] * y[k]; });
        break;
    case BinaryOp::Div:
        broadcastWalk(out, a, b, [&](auto i, auto j, auto k) { o[i] = x[j] / y[k]; });
        break;
    }
}

void binaryBackward(BinaryOp op, const TensorView &dout, const TensorView &a, const TensorView &b,
                    const TensorView &da, const TensorView &db)
{
    const float *g = dout.data, *x = a.data, *y = b.data;
    float *gx = da.data, *gy = db.data;
    if (gx) {
        switch (op) {
        case BinaryOp::Add:
        case BinaryOp::Sub:
            broadcastWalk(dout, a, b, [&](auto i, auto j, auto) { gx[j] += g[i]; });
            break;
        case BinaryOp::Mul:
            broadcastWalk(dout, a, b, [&](auto i, auto j, auto k) { gx[j] += g[i] * y[k]; });
            break;
        case BinaryOp::Div:
            broadcastWalk(dout, a, b, [&](auto i, auto j, auto k) { gx[j] += g[i] / y[k]; });
            break;
        }
    }
    if (gy) {
        switch (op) {
        case BinaryOp::Add:
            broadcastWalk(dout, a, b, [&](auto i, auto, auto k) { gy[k] += g[i]; });
            break;
        case BinaryOp::Sub:
            broadcastWalk(dout, a, b, [&](auto i, auto, auto k) { gy[k] -= g[i]; });
            break;
        case BinaryOp::Mul:
            broadcastWalk(dout, a, b, [&](auto i, auto j, auto k) { gy[k] += g[i] * x[j]; });
            break;
        case BinaryOp::Div:
            broadcastWalk(dout, a, b,
                          [&](auto i, auto j, auto k) { gy[k] -= g[i] * x[j] / (y[k] * y[k]); });
            break;
        }
    }
}

} // namespace tapestry::exec::kernels
