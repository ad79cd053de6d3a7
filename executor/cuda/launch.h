#pragma once

// The launchers of the CUDA kernels (the .cu files), callable from host C++.
// Plain pointers into device memory, sizes and small by-value layouts only,
// so that nvcc compiles small translation units that see nothing of the rest
// of Tapestry. Every launcher queues its kernel on `stream` and returns; the
// kernels have the meaning of their CPU counterparts in executor/kernels/.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tapestry::exec::gpu {

inline constexpr int kMaxRank = 8;  // kernels::kMaxRank

// A strided block copy (kernels::StridedBlock).
struct Block {
    int rank = 0;
    std::int64_t shape[kMaxRank] = {};
    std::int64_t dst[kMaxRank] = {};
    std::int64_t src[kMaxRank] = {};
};

// The output's shape and contiguous strides, and the strides at which two
// operands broadcast to it are read (0 along broadcast dims).
struct Broadcast {
    int rank = 0;
    std::int64_t shape[kMaxRank] = {};
    std::int64_t out[kMaxRank] = {};
    std::int64_t a[kMaxRank] = {};
    std::int64_t b[kMaxRank] = {};
};

enum class Binary { Add, Sub, Mul, Div };
enum class Pointwise { Relu, GeluErf, GeluTanh, Silu, Neg };

// Whole buffers.
void fill(cudaStream_t stream, float *x, std::int64_t n, float value);
void scale(cudaStream_t stream, float *x, std::int64_t n, float factor);
void addInto(cudaStream_t stream, float *dst, const float *src, std::int64_t n);
// dst (+)= src over the block; `atomic` when several source elements land on
// one destination element (a destination stride of 0 on a dim longer than 1).
void stridedCopy(
    cudaStream_t stream, const Block &block, float *dst, const float *src, bool accumulate, bool atomic);

// out = a op b, broadcast.
void binaryForward(cudaStream_t stream, Binary op, const Broadcast &layout, float *out, const float *a,
    const float *b, std::int64_t n);
// grad += ∂(a op b)/∂operand · dout, summed over the dims the operand (0: a,
// 1: b) is broadcast along (chunks of the sum added atomically where the
// operand alone has too few elements to fill the device).
void binaryBackward(cudaStream_t stream, Binary op, int operand, const Broadcast &layout, const float *dout,
    const float *a, const float *b, float *grad, std::int64_t gradCount);

void pointwiseForward(cudaStream_t stream, Pointwise op, float *out, const float *x, std::int64_t n);
// dx += dout · f'(x).
void pointwiseBackward(
    cudaStream_t stream, Pointwise op, const float *dout, const float *x, float *dx, std::int64_t n);

// Rows of `cols` floats, one block per row.
void softmaxForward(cudaStream_t stream, float *out, const float *x, std::int64_t rows, std::int64_t cols);
void softmaxBackward(
    cudaStream_t stream, const float *dout, const float *y, float *dx, std::int64_t rows, std::int64_t cols);
// bias may be null. mean is null for RMSNorm (no centring).
void normForward(cudaStream_t stream, float *out, float *mean, float *rstd, const float *x, const float *weight,
    const float *bias, std::int64_t rows, std::int64_t cols, float epsilon);
// dx (may be null) per row; dweight and dbias (may be null) per column.
void normBackward(cudaStream_t stream, const float *dout, const float *x, const float *weight,
    const float *mean, const float *rstd, float *dx, float *dweight, float *dbias, std::int64_t rows,
    std::int64_t cols);

// Vocabulary-parallel embedding and loss (kernels/vocabparallel.h).
void gatherForward(cudaStream_t stream, float *out, const float *table, const std::int64_t *ids,
    std::int64_t offset, std::int64_t tokens, std::int64_t tableRows, std::int64_t hidden);
void gatherBackward(cudaStream_t stream, const float *dout, const std::int64_t *ids, std::int64_t offset,
    float *dtable, std::int64_t tokens, std::int64_t tableRows, std::int64_t hidden);
void crossEntropyRowMax(
    cudaStream_t stream, const float *logits, float *rowMax, std::int64_t rows, std::int64_t cols);
void crossEntropyRowSums(cudaStream_t stream, const float *logits, const std::int64_t *labels,
    std::int64_t offset, const float *rowMax, float *sumExp, float *target, std::int64_t rows,
    std::int64_t cols);
void crossEntropyFinish(cudaStream_t stream, float *loss, float *lse, const float *rowMax, const float *sumExp,
    const float *target, std::int64_t rows, double denominator);
void crossEntropyBackward(cudaStream_t stream, const float *dloss, const float *logits,
    const std::int64_t *labels, std::int64_t offset, const float *lse, double denominator, float *dlogits,
    std::int64_t rows, std::int64_t cols);

void sgdUpdate(cudaStream_t stream, float *param, const float *grad, float learningRate, std::int64_t n);
// c1, c2: the bias corrections 1 − β^step.
void adamUpdate(cudaStream_t stream, float *param, const float *grad, float *m, float *v, float learningRate,
    float beta1, float beta2, float epsilon, float c1, float c2, std::int64_t n);

} // namespace tapestry::exec::gpu
