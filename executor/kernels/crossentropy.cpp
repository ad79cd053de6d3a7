#include "kernels/crossentropy.h"

#include <cmath>

namespace tapestry::exec::kernels {

void crossEntropyForward(const TensorView &loss, const TensorView &lse, const TensorView &logits,
                         const IndexView &labels)
{
    const std::int64_t rows = logits.rows(), c = logits.cols();
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float maxv = z[0];
        for (std::int64_t i = 1; i < c; ++i)
            maxv = std::max(maxv, z[i]);
        double sum = 0.0;
        for (std::int64_t i = 0; i < c; ++i)
            sum += std::exp(static_cast<double>(z[i] - maxv));
        const double l = maxv + std::log(sum);
        lse.data[r] = static_cast<float>(l);
        total += l - z[labels.data[r]];
    }
    loss.data[0] = static_cast<float>(total / static_cast<double>(rows));
}

void crossEntropyBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
                          const TensorView &lse, const TensorView &dlogits)
{
    const std::int64_t rows = logits.rows(), c = logits.cols();
    const float scale = dloss.data[0] / static_cast<float>(rows);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float *d = dlogits.data + r * c;
        const float l = lse.data[r];
        for (std::int64_t i = 0; i < c; ++i)
            d[i] += scale * std::exp(z[i] - l);
        d[labels.data[r]] -= scale;
    }
}

} // namespace tapestry::exec::kernels
