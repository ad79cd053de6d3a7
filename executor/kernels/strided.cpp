#include "kernels/strided.h"

namespace tapestry::exec::kernels {

Dims contiguousStrides(std::span<const std::int64_t> shape)
{
    Dims s{};
    std::int64_t step = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
        s[i] = step;
        step *= shape[i];
    }
    return s;
}

Dims broadcastStrides(std::span<const std::int64_t> shape, std::span<const std::int64_t> outShape)
{
    const std::size_t outRank = outShape.size();
    Dims s{};
    const Dims own = contiguousStrides(shape);
    const std::size_t lead = outRank - shape.size();
    for (std::size_t i = 0; i < shape.size(); ++i)
        s[lead + i] = (shape[i] == 1 && outShape[lead + i] != 1) ? 0 : own[i];
    return s;
}

void stridedCopy(const StridedBlock &block, float *dst, const float *src, bool accumulate)
{
    const std::size_t r = block.rank;
    if (r == 0) {
        *dst = accumulate ? *dst + *src : *src;
        return;
    }
    for (std::size_t i = 0; i < r; ++i)
        if (block.shape[i] == 0)
            return;
    // Odometer over the outer dims, a tight loop over the innermost one.
    const std::int64_t n = block.shape[r - 1];
    const std::int64_t ds = block.dstStride[r - 1], ss = block.srcStride[r - 1];
    Dims idx{};
    std::int64_t dOff = 0, sOff = 0;
    for (;;) {
        float *d = dst + dOff;
        const float *s = src + sOff;
        if (accumulate) {
            for (std::int64_t k = 0; k < n; ++k)
                d[k * ds] += s[k * ss];
        } else {
            for (std::int64_t k = 0; k < n; ++k)
                d[k * ds] = s[k * ss];
        }
        std::size_t axis = r - 1;
        for (;;) {
            if (axis == 0)
                return;
            --axis;
            ++idx[axis];
            dOff += block.dstStride[axis];
            sOff += block.srcStride[axis];
            if (idx[axis] < block.shape[axis])
                break;
            dOff -= block.dstStride[axis] * block.shape[axis];
            sOff -= block.srcStride[axis] * block.shape[axis];
            idx[axis] = 0;
        }
    }
}

} // namespace tapestry::exec::kernels
