#pragma once

#include "tensorview.h"

#include <span>

namespace tapestry::exec::kernels {

// Ops that move elements without arithmetic. Forward copies into the output;
// backward adds the output's gradient back into the input's (dims a forward
// copy broadcast are summed). All of them are one strided block copy.

// Reshape (and Flatten, Squeeze, Unsqueeze, Identity): same elements, new shape.
void reshapeForward(const TensorView &out, const TensorView &x);
void reshapeBackward(const TensorView &dout, const TensorView &dx);

// out dim i is x dim perm[i].
void transposeForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm);
void transposeBackward(const TensorView &dout, std::span<const std::int64_t> perm,
                       const TensorView &dx);

// Split along `axis` into consecutive pieces the size of each output.
void splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis);
// Outputs whose gradient view has no data contribute nothing.
void splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx);

void concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis);
// Inputs whose gradient view has no data are skipped.
void concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs);

// out[i0, i1, ...] = x[starts[0] + i0·steps[0], ...]: one start and step per
// dim of x (dims not sliced have start 0, step 1; steps may be negative).
void sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
                  std::span<const std::int64_t> steps);
void sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
                   std::span<const std::int64_t> steps, const TensorView &dx);

// Numpy broadcast of x to the output's shape; backward sums the copies.
void expandForward(const TensorView &out, const TensorView &x);
void expandBackward(const TensorView &dout, const TensorView &dx);

} // namespace tapestry::exec::kernels
