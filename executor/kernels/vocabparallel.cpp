#include "kernels/vocabparallel.h"

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

void crossEntropyRowSums(const TensorView &logits, const IndexView &labels, std::int64_t offset,
                         const TensorView &rowMax, const TensorView &sumExp, const TensorView &target)
{
    const std::int64_t rows = logits.rows(), c = logits.cols();
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        double sum = 0.0;
        for (std::int64_t i = 0; i < c; ++i)
            sum += std::exp(static_cast<double>(z[i] - rowMax.data[r]));
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

void crossEntropyShardBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
                               std::int64_t offset, const TensorView &lse, double denominator,
                               const TensorView &dlogits)
{
    const std::int64_t rows = logits.rows(), c = logits.cols();
    const auto scale = static_cast<float>(dloss.data[0] / denominator);
    for (std::int64_t r = 0; r < rows; ++r) {
        const float *z = logits.data + r * c;
        float *d = dlogits.data + r * c;
        const float l = lse.data[r];
        for (std::int64_t i = 0; i < c; ++i)
            d[i] += scale * std::exp(z[i] - l);
        const std::int64_t label = labels.data[r] - offset;
        if (label >= 0 && label < c)
            d[label] -= scale;
    }
}

} // namespace tapestry::exec::kernels
