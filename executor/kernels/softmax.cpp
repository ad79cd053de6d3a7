#include "kernels/softmax.h"

#include <cmath>

namespace tapestry::exec::kernels {

void softmaxForward(const TensorView &out, const TensorView &x)
{
    const std::int64_t rows = x.rows(), n = x.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *in = x.data + r * n;
        float *o = out.data + r * n;
        float maxv = in[0];
        for (std::int64_t i = 1; i < n; ++i)
            maxv = std::max(maxv, in[i]);
        float sum = 0.0f;
        for (std::int64_t i = 0; i < n; ++i) {
            o[i] = std::exp(in[i] - maxv);
            sum += o[i];
        }
        const float inv = 1.0f / sum;
        for (std::int64_t i = 0; i < n; ++i)
            o[i] *= inv;
    }
}

void softmaxBackward(const TensorView &dout, const TensorView &out, const TensorView &dx)
{
    const std::int64_t rows = out.rows(), n = out.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *g = dout.data + r * n, *y = out.data + r * n;
        float *d = dx.data + r * n;
        float dot = 0.0f;
        for (std::int64_t i = 0; i < n; ++i)
            dot += g[i] * y[i];
        for (std::int64_t i = 0; i < n; ++i)
            d[i] += y[i] * (g[i] - dot);
    }
}

} // namespace tapestry::exec::kernels
