#include "kernels/softmax.h"

#include "kernels/vecmath.h"

#include <algorithm>
#include <limits>

namespace tapestry::exec::kernels {

// In vectorised clones (kernels/vecmath.h), 8 lanes at a time: the row's
// maximum, the exponentials and their sum (in 8 partial sums, whose rounding
// differs from one running sum by a few ulp).
TAPESTRY_VECTOR_CLONES
void softmaxForward(const TensorView &out, const TensorView &x)
{
    using namespace vec;
    const std::int64_t rows = x.rows(), n = x.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *in = x.data + r * n;
        float *o = out.data + r * n;
        const float lowest = -std::numeric_limits<float>::infinity();
        F8 lanes = splat(lowest);
        forEach8(n, [&](std::int64_t i, std::int64_t count) {
            const F8 v = count == 8 ? load(in + i, 8) : select(iota() < static_cast<int>(count), load(in + i, count),
                                                                  splat(lowest));
            lanes = select(v > lanes, v, lanes);
        });
        float maxv = lowest;
        for (int k = 0; k < 8; ++k)
            maxv = std::max(maxv, lanes[k]);
        F8 sums = splat(0.0f);
        forEach8(n, [&](std::int64_t i, std::int64_t count) {
            const F8 e = vec::exp(load(in + i, count) - splat(maxv));
            store(o + i, e, count);
            sums += count == 8 ? e : select(iota() < static_cast<int>(count), e, splat(0.0f));
        });
        float sum = 0.0f;
        for (int k = 0; k < 8; ++k)
            sum += sums[k];
        const float inv = 1.0f / sum;
        for (std::int64_t i = 0; i < n; ++i)
            o[i] *= inv;
    }
}

// dx += y·(g − Σ g·y) per row, 8 lanes at a time (a short tail loads zeros,
// which add nothing to the sum).
TAPESTRY_VECTOR_CLONES
void softmaxBackward(const TensorView &dout, const TensorView &out, const TensorView &dx)
{
    using namespace vec;
    const std::int64_t rows = out.rows(), n = out.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *g = dout.data + r * n, *y = out.data + r * n;
        float *d = dx.data + r * n;
        F8 lanes = splat(0.0f);
        forEach8(n, [&](std::int64_t i, std::int64_t count) { lanes += load(g + i, count) * load(y + i, count); });
        float dot = 0.0f;
        for (int k = 0; k < 8; ++k)
            dot += lanes[k];
        const F8 dv = splat(dot);
        forEach8(n, [&](std::int64_t i, std::int64_t count) {
            store(d + i, load(d + i, count) + load(y + i, count) * (load(g + i, count) - dv), count);
        });
    }
}

} // namespace tapestry::exec::kernels
