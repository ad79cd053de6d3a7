#include "kernels/rmsnorm.h"

#include <cmath>

namespace tapestry::exec::kernels {

void rmsnormForward(const TensorView &out, const TensorView &rstd, const TensorView &x,
                    const TensorView &weight, float epsilon)
{
    const std::int64_t rows = x.rows(), n = x.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *in = x.data + r * n;
        float *o = out.data + r * n;
        double ss = 0.0;
        for (std::int64_t i = 0; i < n; ++i)
            ss += static_cast<double>(in[i]) * in[i];
        const float s = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + epsilon));
        for (std::int64_t i = 0; i < n; ++i)
            o[i] = in[i] * s * weight.data[i];
        rstd.data[r] = s;
    }
}

void rmsnormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
                     const TensorView &rstd, const TensorView &dx, const TensorView &dweight)
{
    const std::int64_t rows = x.rows(), n = x.cols();
    const float invN = 1.0f / static_cast<float>(n);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *g = dout.data + r * n, *in = x.data + r * n;
        const float s = rstd.data[r];
        // dx = rstd·(dŷ − x̂·mean(dŷ·x̂)), with x̂ = x·rstd and dŷ = dout·weight.
        float sumGX = 0.0f;
        for (std::int64_t i = 0; i < n; ++i) {
            const float xhat = in[i] * s;
            sumGX += g[i] * weight.data[i] * xhat;
            if (dweight)
                dweight.data[i] += g[i] * xhat;
        }
        if (!dx)
            continue;
        float *d = dx.data + r * n;
        for (std::int64_t i = 0; i < n; ++i)
            d[i] += s * (g[i] * weight.data[i] - in[i] * s * sumGX * invN);
    }
}

} // namespace tapestry::exec::kernels
