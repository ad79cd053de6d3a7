// Row kernels, one block per row: softmax, LayerNorm and RMSNorm forward
// and backward (kernels/softmax, layernorm, rmsnorm on the CPU).
#include "common.cuh"
#include "launch.h"

namespace tapestry::exec::gpu {

namespace {

__global__ void softmaxKernel(float *out, const float *x, std::int64_t cols)
{
    const float *in = x + blockIdx.x * cols;
    float *o = out + blockIdx.x * cols;
    float m = -INFINITY;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        m = fmaxf(m, in[i]);
    m = blockReduce(m, Max {});
    float sum = 0.0f;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float e = expf(in[i] - m);
        o[i] = e;
        sum += e;
    }
    const float inv = 1.0f / blockReduce(sum, Sum {});
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        o[i] *= inv;
}

__global__ void softmaxGradKernel(const float *dout, const float *y, float *dx, std::int64_t cols)
{
    const std::int64_t row = blockIdx.x * cols;
    float dot = 0.0f;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        dot += dout[row + i] * y[row + i];
    dot = blockReduce(dot, Sum {});
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        dx[row + i] += y[row + i] * (dout[row + i] - dot);
}

// LayerNorm when `mean` is given, RMSNorm (no centring) when it is null.
__global__ void normKernel(float *out, float *mean, float *rstd, const float *x, const float *weight,
    const float *bias, std::int64_t cols, float epsilon)
{
    const float *in = x + blockIdx.x * cols;
    float *o = out + blockIdx.x * cols;
    float m = 0.0f;
    if (mean) {
        float s = 0.0f;
        for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
            s += in[i];
        m = blockReduce(s, Sum {}) / static_cast<float>(cols);
    }
    float ss = 0.0f;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        ss += (in[i] - m) * (in[i] - m);
    const float r = 1.0f / sqrtf(blockReduce(ss, Sum {}) / static_cast<float>(cols) + epsilon);
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        o[i] = (in[i] - m) * r * weight[i] + (bias ? bias[i] : 0.0f);
    if (threadIdx.x == 0) {
        if (mean)
            mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}

// dx = rstd·(dŷ − mean(dŷ) − x̂·mean(dŷ·x̂)) with dŷ = dout·weight; RMSNorm
// drops the mean(dŷ) term.
__global__ void normGradKernel(const float *dout, const float *x, const float *weight, const float *mean,
    const float *rstd, float *dx, std::int64_t cols)
{
    const std::int64_t row = blockIdx.x * cols;
    const float m = mean ? mean[blockIdx.x] : 0.0f, s = rstd[blockIdx.x];
    float sumG = 0.0f, sumGX = 0.0f;
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float gh = dout[row + i] * weight[i];
        sumG += gh;
        sumGX += gh * (x[row + i] - m) * s;
    }
    sumG = mean ? blockReduce(sumG, Sum {}) : 0.0f;
    sumGX = blockReduce(sumGX, Sum {});
    const float invN = 1.0f / static_cast<float>(cols);
    for (std::int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        const float xhat = (x[row + i] - m) * s;
        dx[row + i] += s * (dout[row + i] * weight[i] - sumG * invN - xhat * sumGX * invN);
    }
}

// One thread per column and chunk of rows (split.parts chunks), summing over
// its rows: coalesced; chunks of one column add atomically.
__global__ void normParamGradKernel(const float *dout, const float *x, const float *mean, const float *rstd,
    float *dweight, float *dbias, std::int64_t rows, std::int64_t cols, SplitSum split)
{
    TAPESTRY_GRID_STRIDE(i, cols * split.parts)
    {
        const std::int64_t c = i % cols, first = i / cols * split.chunk;
        const std::int64_t last = first + split.chunk < rows ? first + split.chunk : rows;
        float w = 0.0f, b = 0.0f;
        for (std::int64_t r = first; r < last; ++r) {
            const float g = dout[r * cols + c];
            w += g * (x[r * cols + c] - (mean ? mean[r] : 0.0f)) * rstd[r];
            b += g;
        }
        if (split.atomic()) {
            if (dweight)
                atomicAdd(dweight + c, w);
            if (dbias)
                atomicAdd(dbias + c, b);
        } else {
            if (dweight)
                dweight[c] += w;
            if (dbias)
                dbias[c] += b;
        }
    }
}

} // namespace

void softmaxForward(cudaStream_t stream, float *out, const float *x, std::int64_t rows, std::int64_t cols)
{
    if (rows > 0)
        softmaxKernel<<<rowBlocks(rows), kThreads, 0, stream>>>(out, x, cols);
}

void softmaxBackward(
    cudaStream_t stream, const float *dout, const float *y, float *dx, std::int64_t rows, std::int64_t cols)
{
    if (rows > 0)
        softmaxGradKernel<<<rowBlocks(rows), kThreads, 0, stream>>>(dout, y, dx, cols);
}

void normForward(cudaStream_t stream, float *out, float *mean, float *rstd, const float *x, const float *weight,
    const float *bias, std::int64_t rows, std::int64_t cols, float epsilon)
{
    if (rows > 0)
        normKernel<<<rowBlocks(rows), kThreads, 0, stream>>>(out, mean, rstd, x, weight, bias, cols, epsilon);
}

void normBackward(cudaStream_t stream, const float *dout, const float *x, const float *weight,
    const float *mean, const float *rstd, float *dx, float *dweight, float *dbias, std::int64_t rows,
    std::int64_t cols)
{
    if (rows <= 0)
        return;
    if (dx)
        normGradKernel<<<rowBlocks(rows), kThreads, 0, stream>>>(dout, x, weight, mean, rstd, dx, cols);
    if (dweight || dbias) {
        const SplitSum split = splitSum(cols, rows);
        normParamGradKernel<<<blocksFor(cols * split.parts), kThreads, 0, stream>>>(
            dout, x, mean, rstd, dweight, dbias, rows, cols, split);
    }
}

} // namespace tapestry::exec::gpu
