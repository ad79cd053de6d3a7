#include "kernels/vocabparallel.h"

#include "kernels/vecmath.h"

#include <cmath>
#include <cstring>

namespace tapestry::exec::kernels {

void shardedGatherForward(const TensorView &out, const TensorView &table, const IndexView &ids,
                          std::int64_t offset)
{
    const std::int64_t rows = table.dim(0), h = table.size() / rows, n = ids.size();
    for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = ids.data[i] - offset;
        float *o = out.data + i * h;
        if (r >= 0 && r < rows)
            std::memcpy(o, table.data + r * h, static_cast<std::size_t>(h) * sizeof(float));
        else
            std::memset(o, 0, static_cast<std::size_t>(h) * sizeof(float));
    }
}

void shardedGatherBackward(const TensorView &dout, const IndexView &ids, std::int64_t offset,
                           const TensorView &dtable)
{
    const std::int64_t rows = dtable.dim(0), h = dtable.size() / rows, n = ids.size();
    for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t r = ids.data[i] - offset;
        if (r < 0 || r >= rows)
            continue;
        float *d = dtable.data + r * h;
        const float *g = dout.data + i * h;
        for (std::int64_t k = 0; k < h; ++k)
            d[k] += g[k];
    }
}

void crossEntropyRowMax(const TensorView &logits, const TensorView &rowMax)
{
    const std::int64_t rows = logits.rows(), c = logits.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float m = z[0];
        for (std::int64_t i = 1; i < c; ++i)
            m = std::max(m, z[i]);
        rowMax.data[r] = m;
    }
}

// The exponentials in 8 float lanes (vec::sumExp; the scalar double exp
// took most of a vocabulary-parallel loss's time).
TAPESTRY_VECTOR_CLONES
void crossEntropyRowSums(const TensorView &logits, const IndexView &labels, std::int64_t offset,
                         const TensorView &rowMax, const TensorView &sumExp, const TensorView &target)
{
    const std::int64_t rows = logits.rows(), c = logits.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        const double sum = vec::sumExp(z, c, rowMax.data[r]);
        sumExp.data[r] = static_cast<float>(sum);
        const std::int64_t label = labels.data[r] - offset;
        target.data[r] = label >= 0 && label < c ? z[label] : 0.0f;
    }
}

void crossEntropyFinish(const TensorView &loss, const TensorView &lse, const TensorView &rowMax,
                        const TensorView &sumExp, const TensorView &target, double denominator)
{
    const std::int64_t rows = lse.size();
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
        const double l = rowMax.data[r] + std::log(static_cast<double>(sumExp.data[r]));
        lse.data[r] = static_cast<float>(l);
        total += l - target.data[r];
    }
    loss.data[0] = static_cast<float>(total / denominator);
}

TAPESTRY_VECTOR_CLONES
void crossEntropyShardBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
                               std::int64_t offset, const TensorView &lse, double denominator,
                               const TensorView &dlogits)
{
    using namespace vec;
    const std::int64_t rows = logits.rows(), c = logits.cols();
    const auto scale = static_cast<float>(dloss.data[0] / denominator);
    const F8 sv = splat(scale);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float *d = dlogits.data + r * c;
        const F8 lv = splat(lse.data[r]);
        forEach8(c, [&](std::int64_t i, std::int64_t count) {
            store(d + i, load(d + i, count) + sv * vec::exp(load(z + i, count) - lv), count);
        });
        const std::int64_t label = labels.data[r] - offset;
        if (label >= 0 && label < c)
            d[label] -= scale;
    }
}

} // namespace tapestry::exec::kernels
