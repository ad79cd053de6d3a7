#include "kernels/crossentropy.h"

#include "kernels/vecmath.h"

#include <algorithm>
#include <cmath>

namespace tapestry::exec::kernels {

// In vectorised clones (kernels/vecmath.h), 8 lanes at a time: each row's
// maximum, then the sum of its exponentials (vec::sumExp).
TAPESTRY_VECTOR_CLONES
void crossEntropyForward(const TensorView &loss, const TensorView &lse, const TensorView &logits,
                         const IndexView &labels)
{
    using namespace vec;
    const std::int64_t rows = logits.rows(), c = logits.cols();
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float maxv = z[0];
        for (std::int64_t i = 1; i < c; ++i)
            maxv = std::max(maxv, z[i]);
        const double sum = sumExp(z, c, maxv);
        const double l = maxv + std::log(sum);
        lse.data[r] = static_cast<float>(l);
        total += l - z[labels.data[r]];
    }
    loss.data[0] = static_cast<float>(total / static_cast<double>(rows));
}

// dlogits += scale·(softmax − onehot), the softmax from the saved
// log-sum-exp, 8 lanes at a time.
TAPESTRY_VECTOR_CLONES
void crossEntropyBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
                          const TensorView &lse, const TensorView &dlogits)
{
    using namespace vec;
    const std::int64_t rows = logits.rows(), c = logits.cols();
    const float scale = dloss.data[0] / static_cast<float>(rows);
    const F8 sv = splat(scale);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float *d = dlogits.data + r * c;
        const F8 lv = splat(lse.data[r]);
        forEach8(c, [&](std::int64_t i, std::int64_t count) {
            store(d + i, load(d + i, count) + sv * vec::exp(load(z + i, count) - lv), count);
        });
        d[labels.data[r]] -= scale;
    }
}

} // namespace tapestry::exec::kernels
