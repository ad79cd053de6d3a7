// The vocabulary-parallel embedding and cross-entropy (kernels/vocabparallel
// on the CPU): each rank holds the table rows / logit classes from `offset`.
#include "common.cuh"
#include "launch.h"

namespace tapestry::exec::gpu {

namespace {

__global__ void gatherKernel(float *out, const float *table, const std::int64_t *ids, std::int64_t offset,
    std::int64_t tableRows, std::int64_t hidden, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        const std::int64_t r = ids[i / hidden] - offset;
        out[i] = r >= 0 && r < tableRows ? table[r * hidden + i % hidden] : 0.0f;
    }
}

// Repeated ids add into one row: atomics.
__global__ void gatherGradKernel(const float *dout, const std::int64_t *ids, std::int64_t offset, float *dtable,
    std::int64_t tableRows, std::int64_t hidden, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        const std::int64_t r = ids[i / hidden] - offset;
        if (r >= 0 && r < tableRows)
            atomicAdd(dtable + r * hidden + i % hidden, dout[i]);
    }
}

__global__ void rowMaxKernel(const float *logits, float *rowMax, std::int64_t cols)
{
    const float *z = logits + blockIdx.x * cols;
    float m = -INFINITY;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        m = fmaxf(m, z[i]);
    m = blockReduce(m, Max {});
    if (threadIdx.x == 0)
        rowMax[blockIdx.x] = m;
}

__global__ void rowSumsKernel(const float *logits, const std::int64_t *labels, std::int64_t offset,
    const float *rowMax, float *sumExp, float *target, std::int64_t cols)
{
    const float *z = logits + blockIdx.x * cols;
    const float m = rowMax[blockIdx.x];
    float s = 0.0f;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        s += expf(z[i] - m);
    s = blockReduce(s, Sum {});
    if (threadIdx.x == 0) {
        sumExp[blockIdx.x] = s;
        const std::int64_t label = labels[blockIdx.x] - offset;
        target[blockIdx.x] = label >= 0 && label < cols ? z[label] : 0.0f;
    }
}

// One block: lse per token and the loss, summed in double as on the CPU.
__global__ void finishKernel(float *loss, float *lse, const float *rowMax, const float *sumExp,
    const float *target, std::int64_t rows, double denominator)
{
    double total = 0.0;
    for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        const double l = static_cast<double>(rowMax[r]) + log(static_cast<double>(sumExp[r]));
        lse[r] = static_cast<float>(l);
        total += l - target[r];
    }
    total = blockReduce(total, Sum {});
    if (threadIdx.x == 0)
        loss[0] = static_cast<float>(total / denominator);
}

__global__ void crossEntropyGradKernel(const float *dloss, const float *logits, const std::int64_t *labels,
    std::int64_t offset, const float *lse, double denominator, float *dlogits, std::int64_t cols,
    std::int64_t n)
{
    const float scale = static_cast<float>(dloss[0] / denominator);
    TAPESTRY_GRID_STRIDE(i, n)
    {
        const std::int64_t r = i / cols, c = i % cols;
        float d = scale * expf(logits[i] - lse[r]);
        if (labels[r] - offset == c)
            d -= scale;
        dlogits[i] += d;
    }
}

} // namespace

void gatherForward(cudaStream_t stream, float *out, const float *table, const std::int64_t *ids,
    std::int64_t offset, std::int64_t tokens, std::int64_t tableRows, std::int64_t hidden)
{
    const std::int64_t n = tokens * hidden;
    if (n > 0)
        gatherKernel<<<blocksFor(n), kThreads, 0, stream>>>(out, table, ids, offset, tableRows, hidden, n);
}

void gatherBackward(cudaStream_t stream, const float *dout, const std::int64_t *ids, std::int64_t offset,
    float *dtable, std::int64_t tokens, std::int64_t tableRows, std::int64_t hidden)
{
    const std::int64_t n = tokens * hidden;
    if (n > 0)
        gatherGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(
            dout, ids, offset, dtable, tableRows, hidden, n);
}

void crossEntropyRowMax(
    cudaStream_t stream, const float *logits, float *rowMax, std::int64_t rows, std::int64_t cols)
{
    if (rows > 0)
        rowMaxKernel<<<rowBlocks(rows), kThreads, 0, stream>>>(logits, rowMax, cols);
}

void crossEntropyRowSums(cudaStream_t stream, const float *logits, const std::int64_t *labels,
    std::int64_t offset, const float *rowMax, float *sumExp, float *target, std::int64_t rows,
    std::int64_t cols)
{
    if (rows > 0)
        rowSumsKernel<<<rowBlocks(rows), kThreads, 0, stream>>>(
            logits, labels, offset, rowMax, sumExp, target, cols);
}

void crossEntropyFinish(cudaStream_t stream, float *loss, float *lse, const float *rowMax, const float *sumExp,
    const float *target, std::int64_t rows, double denominator)
{
    finishKernel<<<1, kThreads, 0, stream>>>(loss, lse, rowMax, sumExp, target, rows, denominator);
}

void crossEntropyBackward(cudaStream_t stream, const float *dloss, const float *logits,
    const std::int64_t *labels, std::int64_t offset, const float *lse, double denominator, float *dlogits,
    std::int64_t rows, std::int64_t cols)
{
    const std::int64_t n = rows * cols;
    if (n > 0)
        crossEntropyGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(
            dloss, logits, labels, offset, lse, denominator, dlogits, cols, n);
}

} // namespace tapestry::exec::gpu
