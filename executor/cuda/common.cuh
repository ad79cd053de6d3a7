#pragma once

// Launch sizes and block reductions shared by the .cu files.

#include <cuda_runtime.h>

#include <cstdint>

namespace tapestry::exec::gpu {

inline constexpr int kThreads = 256;

// Blocks for one thread per element, capped: the kernels loop grid-stride.
inline unsigned int blocksFor(std::int64_t n)
{
    const std::int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned int>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// A sum of `repeat` terms for each of `count` outputs, split into chunks of
// `chunk` terms run by separate threads (added atomically) when `count` alone
// has too few threads to fill the device: a bias or norm weight gradient has
// a thousand outputs, each a sum over every token.
struct SplitSum {
    std::int64_t chunk = 1, parts = 1;
    __host__ __device__ bool atomic() const { return parts > 1; }
};
inline SplitSum splitSum(std::int64_t count, std::int64_t repeat)
{
    constexpr std::int64_t kThreadsWanted = std::int64_t(1) << 17;  // several waves on a 132-SM GPU
    constexpr std::int64_t kMinChunk = 32;
    SplitSum s;
    if (repeat <= kMinChunk || count >= kThreadsWanted) {
        s.chunk = repeat < 1 ? 1 : repeat;
        return s;
    }
    std::int64_t parts = (kThreadsWanted + count - 1) / count;
    if (parts > repeat / kMinChunk)
        parts = repeat / kMinChunk;
    s.chunk = (repeat + parts - 1) / parts;
    s.parts = (repeat + s.chunk - 1) / s.chunk;
    return s;
}

// Rows get a block each (grid.x allows 2^31 − 1).
inline unsigned int rowBlocks(std::int64_t rows)
{
    return static_cast<unsigned int>(rows < 1 ? 1 : rows);
}

struct Sum {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Max {
    template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

// The reduction of `v` over the block's threads, returned to every thread.
// blockDim.x must be a multiple of 32 (kThreads).
template <typename T, typename Op> __device__ T blockReduce(T v, Op op)
{
    __shared__ T partial[32];
    for (int offset = 16; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    __syncthreads();  // `partial` may still be read by a previous reduction
    if (lane == 0)
        partial[warp] = v;
    __syncthreads();
    v = partial[0];
    for (int w = 1; w < warps; ++w)
        v = op(v, partial[w]);
    return v;
}

#define TAPESTRY_GRID_STRIDE(i, n)                                                                             \
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);           \
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

} // namespace tapestry::exec::gpu
