#pragma once

#include "ir/graph.h"

#include <array>
#include <cstdint>
#include <span>

namespace tapestry::exec::kernels {

// The deepest tensor the executor handles; layouts live on the stack so that
// no kernel allocates inside a step.
inline constexpr std::size_t kMaxRank = 8;
using Dims = std::array<std::int64_t, kMaxRank>;

// One block copy between two strided layouts: `shape` elements, walked in
// row-major order, read from src at srcStride and written to dst at
// dstStride. A stride of 0 broadcasts (on the source) or sums (on an
// accumulating destination). Transpose, Split, Concat, Slice, Expand and their
// backward passes are all this one copy with different strides.
struct StridedBlock {
    std::size_t rank = 0;
    Dims shape{};
    Dims dstStride{};
    Dims srcStride{};
};

// Row-major strides of a contiguous tensor.
Dims contiguousStrides(std::span<const std::int64_t> shape);

// Copies (or with `accumulate`, adds) the block from src to dst.
void stridedCopy(const StridedBlock &block, float *dst, const float *src, bool accumulate);

// Strides of `shape` read as if broadcast (numpy rules, aligned on the right)
// to `outShape`: 0 on the dims it is broadcast along. Spans, so that a kernel
// can pass sub-ranges of shapes without allocating.
Dims broadcastStrides(std::span<const std::int64_t> shape, std::span<const std::int64_t> outShape);

} // namespace tapestry::exec::kernels
