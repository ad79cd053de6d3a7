#include "kernels/crossentropy.h"

#include "kernels/vecmath.h"

#include <algorithm>
#include <cmath>

namespace tapestry::exec::kernels {

// In vectorised clones (kernels/vecmath.h), 8 lanes at a time: each row's
// maximum, then its exponentials (vec::exp, within 2 ulp) summed in float
// lanes folded into a double every 256 classes.
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
        const F8 mv = splat(maxv);
        F8 lanes = splat(0.0f);
        double sum = 0.0;
        std::int64_t folded = 0;
        forEach8(c, [&](std::int64_t i, std::int64_t count) {
            const F8 e = vec::exp(load(z + i, count) - mv);
            lanes += count == 8 ? e : select(iota() < static_cast<int>(count), e, splat(0.0f));
            if (++folded == 32) {
                for (int k = 0; k < 8; ++k)
                    sum += lanes[k];
                lanes = splat(0.0f);
                folded = 0;
            }
        });
        for (int k = 0; k < 8; ++k)
            sum += lanes[k];
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
