#include "kernels/gather.h"

#include <cstring>

namespace tapestry::exec::kernels {

namespace {
std::int64_t rowSize(const TensorView &table)
{
    return table.size() / table.dim(0);
}
} // namespace

void gatherForward(const TensorView &out, const TensorView &table, const IndexView &ids)
{
    const std::int64_t h = rowSize(table), n = ids.size();
    for (std::int64_t i = 0; i < n; ++i)
        std::memcpy(out.data + i * h, table.data + ids.data[i] * h,
                    static_cast<std::size_t>(h) * sizeof(float));
}

void gatherBackward(const TensorView &dout, const IndexView &ids, const TensorView &dtable)
{
    const std::int64_t h = rowSize(dtable), n = ids.size();
    for (std::int64_t i = 0; i < n; ++i) {
        float *d = dtable.data + ids.data[i] * h;
        const float *g = dout.data + i * h;
        for (std::int64_t k = 0; k < h; ++k)
            d[k] += g[k];
    }
}

} // namespace tapestry::exec::kernels
