#include "kernels/layernorm.h"

#include <cmath>

namespace tapestry::exec::kernels {

void layernormForward(const TensorView &out, const TensorView &mean, const TensorView &rstd,
                      const TensorView &x, const TensorView &weight, const TensorView &bias,
                      float epsilon)
{
    const std::int64_t rows = x.rows(), n = x.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *in = x.data + r * n;
        float *o = out.data + r * n;
        // Two passes in double: rows of a few thousand floats lose digits in
        // a float sum, and this is the reference the sharded run is checked
        // against.
        double m = 0.0;
        for (std::int64_t i = 0; i < n; ++i)
            m += in[i];
        m /= static_cast<double>(n);
        double v = 0.0;
        for (std::int64_t i = 0; i < n; ++i)
            v += (in[i] - m) * (in[i] - m);
        v /= static_cast<double>(n);
        const float s = static_cast<float>(1.0 / std::sqrt(v + epsilon));
        const float mf = static_cast<float>(m);
        for (std::int64_t i = 0; i < n; ++i) {
            float y = (in[i] - mf) * s * weight.data[i];
            if (bias)
                y += bias.data[i];
            o[i] = y;
        }
        mean.data[r] = mf;
        rstd.data[r] = s;
    }
}

void layernormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
                       const TensorView &mean, const TensorView &rstd, const TensorView &dx,
                       const TensorView &dweight, const TensorView &dbias)
{
    const std::int64_t rows = x.rows(), n = x.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *g = dout.data + r * n, *in = x.data + r * n;
        const float m = mean.data[r], s = rstd.data[r];
        // dx = rstd·(dŷ − mean(dŷ) − x̂·mean(dŷ·x̂)), with dŷ = dout·weight.
        float sumG = 0.0f, sumGX = 0.0f;
        for (std::int64_t i = 0; i < n; ++i) {
            const float xhat = (in[i] - m) * s;
            const float gh = g[i] * weight.data[i];
            sumG += gh;
            sumGX += gh * xhat;
            if (dweight)
                dweight.data[i] += g[i] * xhat;
            if (dbias)
                dbias.data[i] += g[i];
        }
        if (!dx)
            continue;
        const float invN = 1.0f / static_cast<float>(n);
        float *d = dx.data + r * n;
        for (std::int64_t i = 0; i < n; ++i) {
            const float xhat = (in[i] - m) * s;
            d[i] += s * (g[i] * weight.data[i] - sumG * invN - xhat * sumGX * invN);
        }
    }
}

} // namespace tapestry::exec::kernels
