#include "kernels/layernorm.h"

#include "kernels/vecmath.h"

#include <algorithm>
#include <cmath>

namespace tapestry::exec::kernels {

namespace {

// Row sums run in 8 float lanes, folded into a double every kChunk
// elements: rows of a few thousand floats lose digits in one float sum.
constexpr std::int64_t kChunk = 256;

} // namespace

// In vectorised clones (kernels/vecmath.h), 8 lanes at a time: the mean and
// the variance about it in two passes, then the normalised row scaled and
// shifted in one.
TAPESTRY_VECTOR_CLONES
void layernormForward(const TensorView &out, const TensorView &mean, const TensorView &rstd,
                      const TensorView &x, const TensorView &weight, const TensorView &bias,
                      float epsilon)
{
    using namespace vec;
    const std::int64_t rows = x.rows(), n = x.cols();
    const float *w = weight.data, *b = bias.data;
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *in = x.data + r * n;
        float *o = out.data + r * n;
        double sum = 0.0;
        for (std::int64_t start = 0; start < n; start += kChunk) {
            F8 lanes = splat(0.0f);
            forEach8(std::min(kChunk, n - start), [&](std::int64_t i, std::int64_t count) {
                lanes += load(in + start + i, count);  // a short tail is padded with zeros
            });
            for (int k = 0; k < 8; ++k)
                sum += lanes[k];
        }
        const double m = sum / static_cast<double>(n);
        const F8 mv = splat(static_cast<float>(m));
        double squares = 0.0;
        for (std::int64_t start = 0; start < n; start += kChunk) {
            F8 lanes = splat(0.0f);
            forEach8(std::min(kChunk, n - start), [&](std::int64_t i, std::int64_t count) {
                const F8 d = load(in + start + i, count) - mv;
                lanes += count == 8 ? d * d : select(iota() < static_cast<int>(count), d * d, splat(0.0f));
            });
            for (int k = 0; k < 8; ++k)
                squares += lanes[k];
        }
        const float s = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(n) + epsilon));
        const F8 sv = splat(s);
        forEach8(n, [&](std::int64_t i, std::int64_t count) {
            F8 y = (load(in + i, count) - mv) * sv * load(w + i, count);
            if (b)
                y += load(b + i, count);
            store(o + i, y, count);
        });
        mean.data[r] = static_cast<float>(m);
        rstd.data[r] = s;
    }
}

// dx = rstd·(dŷ − mean(dŷ) − x̂·mean(dŷ·x̂)), with dŷ = dout·weight, 8 lanes at
// a time; the weight's and the bias's gradients summed over the rows.
TAPESTRY_VECTOR_CLONES
void layernormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
                       const TensorView &mean, const TensorView &rstd, const TensorView &dx,
                       const TensorView &dweight, const TensorView &dbias)
{
    using namespace vec;
    const std::int64_t rows = x.rows(), n = x.cols();
    const float *w = weight.data;
    float *dw = dweight.data, *db = dbias.data;
    const float invN = 1.0f / static_cast<float>(n);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *g = dout.data + r * n, *in = x.data + r * n;
        const F8 mv = splat(mean.data[r]), sv = splat(rstd.data[r]);
        // A short tail loads zeros for g, so its terms add nothing.
        F8 sumG = splat(0.0f), sumGX = splat(0.0f);
        forEach8(n, [&](std::int64_t i, std::int64_t count) {
            const F8 gi = load(g + i, count);
            const F8 xhat = (load(in + i, count) - mv) * sv;
            const F8 gh = gi * load(w + i, count);
            sumG += gh;
            sumGX += gh * xhat;
            if (dw)
                store(dw + i, load(dw + i, count) + gi * xhat, count);
            if (db)
                store(db + i, load(db + i, count) + gi, count);
        });
        if (!dx)
            continue;
        float totalG = 0.0f, totalGX = 0.0f;
        for (int k = 0; k < 8; ++k) {
            totalG += sumG[k];
            totalGX += sumGX[k];
        }
        const F8 meanG = splat(totalG * invN), meanGX = splat(totalGX * invN);
        float *d = dx.data + r * n;
        forEach8(n, [&](std::int64_t i, std::int64_t count) {
            const F8 xhat = (load(in + i, count) - mv) * sv;
            const F8 gh = load(g + i, count) * load(w + i, count);
            store(d + i, load(d + i, count) + sv * (gh - meanG - xhat * meanGX), count);
        });
    }
}

} // namespace tapestry::exec::kernels
