// Element-wise kernels: whole-buffer fill/scale/add, the strided block copy
// every layout op and packed collective uses, broadcast binary ops,
// activations and the optimizers (kernels/binary, activation, strided,
// optimizer on the CPU).
#include "common.cuh"
#include "launch.h"

#include <optional>

namespace tapestry::exec::gpu {

namespace {

__global__ void fillKernel(float *x, std::int64_t n, float value)
{
    TAPESTRY_GRID_STRIDE(i, n) x[i] = value;
}

__global__ void scaleKernel(float *x, std::int64_t n, float factor)
{
    TAPESTRY_GRID_STRIDE(i, n) x[i] *= factor;
}

__global__ void addKernel(float *dst, const float *src, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ void stridedKernel(
    Block b, float *dst, const float *src, std::int64_t n, bool accumulate, bool atomic)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        std::int64_t rest = i, d = 0, s = 0;
        for (int k = b.rank - 1; k >= 0; --k) {
            const std::int64_t c = rest % b.shape[k];
            rest /= b.shape[k];
            d += c * b.dst[k];
            s += c * b.src[k];
        }
        if (!accumulate)
            dst[d] = src[s];
        else if (atomic)
            atomicAdd(dst + d, src[s]);
        else
            dst[d] += src[s];
    }
}

__device__ float apply(Binary op, float a, float b)
{
    switch (op) {
    case Binary::Add:
        return a + b;
    case Binary::Sub:
        return a - b;
    case Binary::Mul:
        return a * b;
    case Binary::Div:
        return a / b;
    }
    return 0.0f;
}

__global__ void binaryKernel(Binary op, Broadcast l, float *out, const float *a, const float *b, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        std::int64_t rest = i, ia = 0, ib = 0;
        for (int k = l.rank - 1; k >= 0; --k) {
            const std::int64_t c = rest % l.shape[k];
            rest /= l.shape[k];
            ia += c * l.a[k];
            ib += c * l.b[k];
        }
        out[i] = apply(op, a[ia], b[ib]);
    }
}

__device__ float partial(Binary op, int operand, float g, float a, float b)
{
    switch (op) {
    case Binary::Add:
        return g;
    case Binary::Sub:
        return operand == 0 ? g : -g;
    case Binary::Mul:
        return operand == 0 ? g * b : g * a;
    case Binary::Div:
        return operand == 0 ? g / b : -g * a / (b * b);
    }
    return 0.0f;
}

// One thread per element of the operand and chunk of the dims it is
// broadcast along (split.parts chunks): its coordinates on the dims it spans,
// then a loop over its chunk; chunks of one element add atomically.
__global__ void binaryGradKernel(Binary op, int operand, Broadcast l, const float *dout, const float *a,
    const float *b, float *grad, std::int64_t count, std::int64_t repeat, SplitSum split)
{
    const std::int64_t *own = operand == 0 ? l.a : l.b;
    TAPESTRY_GRID_STRIDE(i, count * split.parts)
    {
        const std::int64_t t = i % count, first = i / count * split.chunk;
        const std::int64_t last = first + split.chunk < repeat ? first + split.chunk : repeat;
        std::int64_t base[kMaxRank];
        for (int k = 0; k < l.rank; ++k)
            base[k] = own[k] == 0 ? 0 : (t / own[k]) % l.shape[k];
        float sum = 0.0f;
        for (std::int64_t j = first; j < last; ++j) {
            std::int64_t rest = j, o = 0, ia = 0, ib = 0;
            for (int k = l.rank - 1; k >= 0; --k) {
                std::int64_t c = base[k];
                if (own[k] == 0 && l.shape[k] > 1) {
                    c = rest % l.shape[k];
                    rest /= l.shape[k];
                }
                o += c * l.out[k];
                ia += c * l.a[k];
                ib += c * l.b[k];
            }
            sum += partial(op, operand, dout[o], a[ia], b[ib]);
        }
        if (split.atomic())
            atomicAdd(grad + t, sum);
        else
            grad[t] += sum;
    }
}

// How an operand is read at the output's element i where its layout allows
// a cheap index: i itself (the output's shape), i modulo its size (broadcast
// along leading dims only: a bias, a row of weights, a scalar). Other
// layouts go through the strides (binaryKernel, binaryGradKernel).
struct Suffix {
    std::int64_t size = 1;  // elements; 1 for a scalar
};

__device__ __forceinline__ std::int64_t at(Suffix r, std::int64_t i)
{
    return r.size == 1 ? 0 : i % r.size;
}

__global__ void binarySuffixKernel(Binary op, Suffix ra, Suffix rb, float *out, const float *a, const float *b,
    std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n) out[i] = apply(op, a[at(ra, i)], b[at(rb, i)]);
}

// grad[t] += the sum over j of the partials at output elements j·count + t,
// in split.parts chunks of j (added atomically when more than one).
__global__ void binarySuffixGradKernel(Binary op, int operand, Suffix ra, Suffix rb, const float *dout,
    const float *a, const float *b, float *grad, std::int64_t count, std::int64_t repeat, SplitSum split)
{
    TAPESTRY_GRID_STRIDE(k, count * split.parts)
    {
        const std::int64_t t = k % count, first = k / count * split.chunk;
        const std::int64_t last = first + split.chunk < repeat ? first + split.chunk : repeat;
        float sum = 0.0f;
        for (std::int64_t j = first; j < last; ++j) {
            const std::int64_t i = j * count + t;
            sum += partial(op, operand, dout[i], a[at(ra, i)], b[at(rb, i)]);
        }
        if (split.atomic())
            atomicAdd(grad + t, sum);
        else
            grad[t] += sum;
    }
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr float kGeluCubic = 0.044715f;

__global__ void pointwiseKernel(Pointwise op, float *out, const float *x, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        const float v = x[i];
        switch (op) {
        case Pointwise::Relu:
            out[i] = v > 0.0f ? v : 0.0f;
            break;
        case Pointwise::GeluErf:
            out[i] = 0.5f * v * (1.0f + erff(v * kInvSqrt2));
            break;
        case Pointwise::GeluTanh:
            out[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
            break;
        case Pointwise::Silu:
            out[i] = v / (1.0f + expf(-v));
            break;
        case Pointwise::Neg:
            out[i] = -v;
            break;
        }
    }
}

__global__ void pointwiseGradKernel(Pointwise op, const float *dout, const float *x, float *dx, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        const float g = dout[i];
        float d = 0.0f;
        switch (op) {
        case Pointwise::Relu:
            d = x[i] > 0.0f ? g : 0.0f;
            break;
        case Pointwise::GeluErf: {
            const float v = x[i];
            const float cdf = 0.5f * (1.0f + erff(v * kInvSqrt2));
            const float pdf = kInvSqrt2Pi * expf(-0.5f * v * v);
            d = g * (cdf + v * pdf);
            break;
        }
        case Pointwise::GeluTanh: {
            const float v = x[i];
            const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
            const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
            d = g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
            break;
        }
        case Pointwise::Silu: {
            const float v = x[i];
            const float s = 1.0f / (1.0f + expf(-v));
            d = g * s * (1.0f + v * (1.0f - s));
            break;
        }
        case Pointwise::Neg:
            d = -g;
            break;
        }
        dx[i] += d;
    }
}

__global__ void sgdKernel(float *param, const float *grad, float lr, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n) param[i] -= lr * grad[i];
}

__global__ void adamKernel(float *param, const float *grad, float *m, float *v, float lr, float beta1,
    float beta2, float epsilon, float c1, float c2, std::int64_t n)
{
    TAPESTRY_GRID_STRIDE(i, n)
    {
        const float g = grad[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        param[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + epsilon);
    }
}

} // namespace

void fill(cudaStream_t stream, float *x, std::int64_t n, float value)
{
    if (n > 0)
        fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, n, value);
}

void scale(cudaStream_t stream, float *x, std::int64_t n, float factor)
{
    if (n > 0)
        scaleKernel<<<blocksFor(n), kThreads, 0, stream>>>(x, n, factor);
}

void addInto(cudaStream_t stream, float *dst, const float *src, std::int64_t n)
{
    if (n > 0)
        addKernel<<<blocksFor(n), kThreads, 0, stream>>>(dst, src, n);
}

void stridedCopy(
    cudaStream_t stream, const Block &block, float *dst, const float *src, bool accumulate, bool atomic)
{
    std::int64_t n = 1;
    for (int k = 0; k < block.rank; ++k)
        n *= block.shape[k];
    if (n > 0)
        stridedKernel<<<blocksFor(n), kThreads, 0, stream>>>(block, dst, src, n, accumulate, atomic);
}

namespace {

// The operand read with `strides` as a Suffix: zero strides (or length-1
// dims) first, then the output's own strides to the last dim.
std::optional<Suffix> suffixOf(const Broadcast &l, const std::int64_t *strides)
{
    Suffix r;
    bool spanning = false;
    for (int k = 0; k < l.rank; ++k) {
        if (l.shape[k] == 1)
            continue;
        if (strides[k] == 0) {
            if (spanning)
                return std::nullopt;  // broadcast inside: not a suffix
            continue;
        }
        if (strides[k] != l.out[k])
            return std::nullopt;
        spanning = true;
        r.size *= l.shape[k];
    }
    return r;
}

} // namespace

void binaryForward(cudaStream_t stream, Binary op, const Broadcast &layout, float *out, const float *a,
    const float *b, std::int64_t n)
{
    if (n <= 0)
        return;
    const auto ra = suffixOf(layout, layout.a), rb = suffixOf(layout, layout.b);
    if (ra && rb)
        binarySuffixKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, *ra, *rb, out, a, b, n);
    else
        binaryKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, layout, out, a, b, n);
}

void binaryBackward(cudaStream_t stream, Binary op, int operand, const Broadcast &layout, const float *dout,
    const float *a, const float *b, float *grad, std::int64_t gradCount)
{
    if (gradCount <= 0)
        return;
    const std::int64_t *own = operand == 0 ? layout.a : layout.b;
    std::int64_t repeat = 1;
    for (int k = 0; k < layout.rank; ++k)
        if (own[k] == 0 && layout.shape[k] > 1)
            repeat *= layout.shape[k];
    const SplitSum split = splitSum(gradCount, repeat);
    const auto ra = suffixOf(layout, layout.a), rb = suffixOf(layout, layout.b);
    if (ra && rb && (operand == 0 ? ra->size : rb->size) == gradCount)
        binarySuffixGradKernel<<<blocksFor(gradCount * split.parts), kThreads, 0, stream>>>(
            op, operand, *ra, *rb, dout, a, b, grad, gradCount, repeat, split);
    else
        binaryGradKernel<<<blocksFor(gradCount * split.parts), kThreads, 0, stream>>>(
            op, operand, layout, dout, a, b, grad, gradCount, repeat, split);
}

void pointwiseForward(cudaStream_t stream, Pointwise op, float *out, const float *x, std::int64_t n)
{
    if (n > 0)
        pointwiseKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, out, x, n);
}

void pointwiseBackward(
    cudaStream_t stream, Pointwise op, const float *dout, const float *x, float *dx, std::int64_t n)
{
    if (n > 0)
        pointwiseGradKernel<<<blocksFor(n), kThreads, 0, stream>>>(op, dout, x, dx, n);
}

void sgdUpdate(cudaStream_t stream, float *param, const float *grad, float learningRate, std::int64_t n)
{
    if (n > 0)
        sgdKernel<<<blocksFor(n), kThreads, 0, stream>>>(param, grad, learningRate, n);
}

void adamUpdate(cudaStream_t stream, float *param, const float *grad, float *m, float *v, float learningRate,
    float beta1, float beta2, float epsilon, float c1, float c2, std::int64_t n)
{
    if (n > 0)
        adamKernel<<<blocksFor(n), kThreads, 0, stream>>>(
            param, grad, m, v, learningRate, beta1, beta2, epsilon, c1, c2, n);
}

} // namespace tapestry::exec::gpu
