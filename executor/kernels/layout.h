#pragma once

#include "kernels/strided.h"
#include "tensorview.h"

#include <span>

namespace tapestry::exec::kernels {

// Ops that move elements without arithmetic. Forward copies into the output;
// backward adds the output's gradient back into the input's (dims a forward
// copy broadcast are summed). All of them are one strided block copy, done
// by `copier`: on the host by default, or where a device keeps the data
// (the shape logic here is shared, only the copy differs).
class BlockCopier {
public:
    virtual ~BlockCopier() = default;
    virtual void copy(const StridedBlock &block, float *dst, const float *src, bool accumulate) const = 0;
};
const BlockCopier &hostCopier();  // stridedCopy

// Reshape (and Flatten, Squeeze, Unsqueeze, Identity): same elements, new shape.
void reshapeForward(const TensorView &out, const TensorView &x, const BlockCopier &copier = hostCopier());
void reshapeBackward(const TensorView &dout, const TensorView &dx, const BlockCopier &copier = hostCopier());

// out dim i is x dim perm[i].
void transposeForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm,
    const BlockCopier &copier = hostCopier());
void transposeBackward(const TensorView &dout, std::span<const std::int64_t> perm, const TensorView &dx,
    const BlockCopier &copier = hostCopier());

// Split along `axis` into consecutive pieces the size of each output.
void splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis,
    const BlockCopier &copier = hostCopier());
// Outputs whose gradient view has no data contribute nothing.
void splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx,
    const BlockCopier &copier = hostCopier());

void concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis,
    const BlockCopier &copier = hostCopier());
// Inputs whose gradient view has no data are skipped.
void concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs,
    const BlockCopier &copier = hostCopier());

// out[i0, i1, ...] = x[starts[0] + i0·steps[0], ...]: one start and step per
// dim of x (dims not sliced have start 0, step 1; steps may be negative).
void sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
    std::span<const std::int64_t> steps, const BlockCopier &copier = hostCopier());
void sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
    std::span<const std::int64_t> steps, const TensorView &dx, const BlockCopier &copier = hostCopier());

// Numpy broadcast of x to the output's shape; backward sums the copies.
void expandForward(const TensorView &out, const TensorView &x, const BlockCopier &copier = hostCopier());
void expandBackward(const TensorView &dout, const TensorView &dx, const BlockCopier &copier = hostCopier());

} // namespace tapestry::exec::kernels
