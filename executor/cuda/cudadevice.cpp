#include "cuda/cudadevice.h"

#include "cuda/cudacheck.h"
#include "cuda/gemmplan.h"
#include "cuda/launch.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>

namespace tapestry::exec {

namespace {

// Past this many timed ops without a read, kernel times are settled (one
// wait) so the event pool stays bounded through unmeasured steps.
constexpr std::size_t kMaxPendingEvents = 4096;

gpu::Block toBlock(const kernels::StridedBlock &b)
{
    gpu::Block g;
    g.rank = static_cast<int>(b.rank);
    for (std::size_t i = 0; i < b.rank; ++i) {
        g.shape[i] = b.shape[i];
        g.dst[i] = b.dstStride[i];
        g.src[i] = b.srcStride[i];
    }
    return g;
}

gpu::Broadcast broadcastLayout(const TensorView &out, const TensorView &a, const TensorView &b)
{
    gpu::Broadcast l;
    l.rank = static_cast<int>(out.rank());
    const kernels::Dims o = kernels::contiguousStrides(out.shape);
    const kernels::Dims sa = kernels::broadcastStrides(a.shape, out.shape);
    const kernels::Dims sb = kernels::broadcastStrides(b.shape, out.shape);
    for (std::size_t i = 0; i < out.rank(); ++i) {
        l.shape[i] = out.shape[i];
        l.out[i] = o[i];
        l.a[i] = sa[i];
        l.b[i] = sb[i];
    }
    return l;
}

gpu::Binary toBinary(kernels::BinaryOp op)
{
    switch (op) {
    case kernels::BinaryOp::Add:
        return gpu::Binary::Add;
    case kernels::BinaryOp::Sub:
        return gpu::Binary::Sub;
    case kernels::BinaryOp::Mul:
        return gpu::Binary::Mul;
    case kernels::BinaryOp::Div:
        return gpu::Binary::Div;
    }
    return gpu::Binary::Add;
}

cublasComputeType_t computeType(Precision p)
{
    switch (p) {
    case Precision::F32:
        return CUBLAS_COMPUTE_32F;
    case Precision::F16:
        return CUBLAS_COMPUTE_32F_FAST_16F;
    case Precision::BF16:
        return CUBLAS_COMPUTE_32F_FAST_16BF;
    }
    return CUBLAS_COMPUTE_32F;
}

int gemmInt(std::int64_t v)
{
    if (v > INT32_MAX)
        throw gpu::DeviceError("cuBLAS GEMM: a dimension above 2^31");
    return static_cast<int>(v);
}

} // namespace

CudaDevice::CudaDevice(int ordinal, Precision precision)
    : m_ordinal(ordinal)
    , m_precision(precision)
{
    gpu::check(cudaSetDevice(ordinal), "cudaSetDevice");
    cudaDeviceProp props {};
    gpu::check(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties");
    char where[64];
    std::snprintf(where, sizeof where, " (cuda:%d, sm_%d%d)", ordinal, props.major, props.minor);
    m_name = props.name + std::string(where);
    m_uuid.assign(props.uuid.bytes, props.uuid.bytes + sizeof props.uuid.bytes);
    gpu::check(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    gpu::check(cublasCreate(&m_blas), "cublasCreate");
    gpu::check(cublasSetStream(m_blas, m_stream), "cublasSetStream");
}

CudaDevice::~CudaDevice()
{
    // Teardown errors have nowhere to go: the process is ending the run.
    cudaStreamSynchronize(m_stream);
    for (void *p : m_indices)
        cudaFree(p);
    for (auto &[start, stop] : m_events) {
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
    }
    cublasDestroy(m_blas);
    cudaStreamDestroy(m_stream);
}

std::string_view CudaDevice::backend() const
{
    return "cuda";
}

std::string CudaDevice::description() const
{
    return m_name;
}

bool CudaDevice::hostMemory() const
{
    return false;
}

float *CudaDevice::allocate(std::int64_t count)
{
    void *p = nullptr;
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(float);
    gpu::check(cudaMalloc(&p, bytes), "cudaMalloc");
    gpu::check(cudaMemsetAsync(p, 0, bytes, m_stream), "cudaMemsetAsync");
    return static_cast<float *>(p);
}

void CudaDevice::release(float *data)
{
    cudaStreamSynchronize(m_stream);
    cudaFree(data);
}

const std::int64_t *CudaDevice::keepIndices(std::vector<std::int64_t> host)
{
    void *p = nullptr;
    const std::size_t bytes = std::max<std::size_t>(host.size(), 1) * sizeof(std::int64_t);
    gpu::check(cudaMalloc(&p, bytes), "cudaMalloc");
    m_indices.push_back(p);
    gpu::check(cudaMemcpy(p, host.data(), host.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice),
        "cudaMemcpy (indices)");
    return static_cast<const std::int64_t *>(p);
}

void CudaDevice::upload(const TensorView &dst, const float *host)
{
    gpu::check(cudaMemcpyAsync(dst.data, host, static_cast<std::size_t>(dst.size()) * sizeof(float),
                   cudaMemcpyHostToDevice, m_stream),
        "cudaMemcpyAsync (upload)");
    gpu::check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize");
}

void CudaDevice::download(float *host, const TensorView &src)
{
    gpu::check(cudaMemcpyAsync(host, src.data, static_cast<std::size_t>(src.size()) * sizeof(float),
                   cudaMemcpyDeviceToHost, m_stream),
        "cudaMemcpyAsync (download)");
    gpu::check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize");
}

void CudaDevice::synchronize()
{
    gpu::check(cudaStreamSynchronize(m_stream), "cudaStreamSynchronize");
}

void CudaDevice::beginKernel()
{
    if (m_eventsUsed == kMaxPendingEvents)
        settleKernelTimes();
    if (m_eventsUsed == m_events.size()) {
        cudaEvent_t start = nullptr, stop = nullptr;
        gpu::check(cudaEventCreate(&start), "cudaEventCreate");
        gpu::check(cudaEventCreate(&stop), "cudaEventCreate");
        m_events.emplace_back(start, stop);
        m_eventIsGemm.push_back(false);
    }
    gpu::check(cudaEventRecord(m_events[m_eventsUsed].first, m_stream), "cudaEventRecord");
}

void CudaDevice::endKernel(bool gemm)
{
    gpu::check(cudaEventRecord(m_events[m_eventsUsed].second, m_stream), "cudaEventRecord");
    m_eventIsGemm[m_eventsUsed] = gemm;
    ++m_eventsUsed;
}

void CudaDevice::settleKernelTimes()
{
    synchronize();
    for (std::size_t i = 0; i < m_eventsUsed; ++i) {
        float ms = 0.0f;
        gpu::check(cudaEventElapsedTime(&ms, m_events[i].first, m_events[i].second), "cudaEventElapsedTime");
        (m_eventIsGemm[i] ? m_kernelTimes.gemm : m_kernelTimes.other) += ms * 1e-3;
    }
    m_eventsUsed = 0;
}

KernelTimes CudaDevice::kernelTimes()
{
    settleKernelTimes();
    return m_kernelTimes;
}

void CudaDevice::resetKernelTimes()
{
    m_eventsUsed = 0;
    m_kernelTimes = {};
}

void CudaDevice::copy(const TensorView &dst, const TensorView &src)
{
    if (dst.data != src.data)
        gpu::check(cudaMemcpyAsync(dst.data, src.data, static_cast<std::size_t>(dst.size()) * sizeof(float),
                       cudaMemcpyDeviceToDevice, m_stream),
            "cudaMemcpyAsync");
}

void CudaDevice::fill(const TensorView &x, float value)
{
    if (value == 0.0f)
        gpu::check(cudaMemsetAsync(x.data, 0, static_cast<std::size_t>(x.size()) * sizeof(float), m_stream),
            "cudaMemsetAsync");
    else
        gpu::fill(m_stream, x.data, x.size(), value);
}

void CudaDevice::scale(const TensorView &x, float factor)
{
    gpu::scale(m_stream, x.data, x.size(), factor);
}

void CudaDevice::addInto(const TensorView &dst, const TensorView &src)
{
    gpu::addInto(m_stream, dst.data, src.data, dst.size());
}

void CudaDevice::stridedCopy(const kernels::StridedBlock &block, float *dst, const float *src, bool accumulate)
{
    bool atomic = false;
    for (std::size_t i = 0; i < block.rank; ++i)
        atomic = atomic || (accumulate && block.dstStride[i] == 0 && block.shape[i] > 1);
    gpu::stridedCopy(m_stream, toBlock(block), dst, src, accumulate, atomic);
}

void CudaDevice::matmulForward(const TensorView &out, const TensorView &a, const TensorView &b)
{
    const float one = 1.0f;
    for (const gpu::GemmOp &g : gpu::planMatmulForward(out.shape, a.shape, b.shape)) {
        auto ptr = [&](gpu::GemmOp::Operand o) { return o == gpu::GemmOp::Operand::A ? a.data : b.data; };
        const float *first = ptr(g.first) + g.firstOffset, *second = ptr(g.second) + g.secondOffset;
        float *c = out.data + g.outOffset;
        const cublasOperation_t ta = g.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t tb = g.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
        if (g.batch > 1)
            gpu::check(cublasGemmStridedBatchedEx(m_blas, ta, tb, gemmInt(g.m), gemmInt(g.n), gemmInt(g.k),
                           &one, first, CUDA_R_32F, gemmInt(g.ldFirst), g.strideFirst, second, CUDA_R_32F,
                           gemmInt(g.ldSecond), g.strideSecond, &g.beta, c, CUDA_R_32F, gemmInt(g.ldOut),
                           g.strideOut, gemmInt(g.batch), computeType(m_precision), CUBLAS_GEMM_DEFAULT),
                "cublasGemmStridedBatchedEx");
        else
            gpu::check(cublasGemmEx(m_blas, ta, tb, gemmInt(g.m), gemmInt(g.n), gemmInt(g.k), &one, first,
                           CUDA_R_32F, gemmInt(g.ldFirst), second, CUDA_R_32F, gemmInt(g.ldSecond), &g.beta, c,
                           CUDA_R_32F, gemmInt(g.ldOut), computeType(m_precision), CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
    }
}

void CudaDevice::matmulBackward(const TensorView &dout, const TensorView &a, const TensorView &b,
    const TensorView &da, const TensorView &db)
{
    const float one = 1.0f;
    for (const gpu::GemmOp &g : gpu::planMatmulBackward(dout.shape, a.shape, b.shape, bool(da), bool(db))) {
        auto ptr = [&](gpu::GemmOp::Operand o) {
            return o == gpu::GemmOp::Operand::A ? a.data : o == gpu::GemmOp::Operand::B ? b.data : dout.data;
        };
        const float *first = ptr(g.first) + g.firstOffset, *second = ptr(g.second) + g.secondOffset;
        float *c = (g.outIsDa ? da.data : db.data) + g.outOffset;
        const cublasOperation_t ta = g.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t tb = g.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
        if (g.batch > 1)
            gpu::check(cublasGemmStridedBatchedEx(m_blas, ta, tb, gemmInt(g.m), gemmInt(g.n), gemmInt(g.k),
                           &one, first, CUDA_R_32F, gemmInt(g.ldFirst), g.strideFirst, second, CUDA_R_32F,
                           gemmInt(g.ldSecond), g.strideSecond, &g.beta, c, CUDA_R_32F, gemmInt(g.ldOut),
                           g.strideOut, gemmInt(g.batch), computeType(m_precision), CUBLAS_GEMM_DEFAULT),
                "cublasGemmStridedBatchedEx");
        else
            gpu::check(cublasGemmEx(m_blas, ta, tb, gemmInt(g.m), gemmInt(g.n), gemmInt(g.k), &one, first,
                           CUDA_R_32F, gemmInt(g.ldFirst), second, CUDA_R_32F, gemmInt(g.ldSecond), &g.beta, c,
                           CUDA_R_32F, gemmInt(g.ldOut), computeType(m_precision), CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
    }
}

void CudaDevice::binaryForward(
    kernels::BinaryOp op, const TensorView &out, const TensorView &a, const TensorView &b)
{
    gpu::binaryForward(
        m_stream, toBinary(op), broadcastLayout(out, a, b), out.data, a.data, b.data, out.size());
}

void CudaDevice::binaryBackward(kernels::BinaryOp op, const TensorView &dout, const TensorView &a,
    const TensorView &b, const TensorView &da, const TensorView &db)
{
    const gpu::Broadcast l = broadcastLayout(dout, a, b);
    if (da)
        gpu::binaryBackward(m_stream, toBinary(op), 0, l, dout.data, a.data, b.data, da.data, a.size());
    if (db)
        gpu::binaryBackward(m_stream, toBinary(op), 1, l, dout.data, a.data, b.data, db.data, b.size());
}

void CudaDevice::reluForward(const TensorView &out, const TensorView &x)
{
    gpu::pointwiseForward(m_stream, gpu::Pointwise::Relu, out.data, x.data, x.size());
}

void CudaDevice::reluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    gpu::pointwiseBackward(m_stream, gpu::Pointwise::Relu, dout.data, x.data, dx.data, x.size());
}

void CudaDevice::geluForward(kernels::GeluForm form, const TensorView &out, const TensorView &x)
{
    const auto op = form == kernels::GeluForm::Erf ? gpu::Pointwise::GeluErf : gpu::Pointwise::GeluTanh;
    gpu::pointwiseForward(m_stream, op, out.data, x.data, x.size());
}

void CudaDevice::geluBackward(
    kernels::GeluForm form, const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    const auto op = form == kernels::GeluForm::Erf ? gpu::Pointwise::GeluErf : gpu::Pointwise::GeluTanh;
    gpu::pointwiseBackward(m_stream, op, dout.data, x.data, dx.data, x.size());
}

void CudaDevice::siluForward(const TensorView &out, const TensorView &x)
{
    gpu::pointwiseForward(m_stream, gpu::Pointwise::Silu, out.data, x.data, x.size());
}

void CudaDevice::siluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    gpu::pointwiseBackward(m_stream, gpu::Pointwise::Silu, dout.data, x.data, dx.data, x.size());
}

void CudaDevice::negForward(const TensorView &out, const TensorView &x)
{
    gpu::pointwiseForward(m_stream, gpu::Pointwise::Neg, out.data, x.data, x.size());
}

void CudaDevice::negBackward(const TensorView &dout, const TensorView &dx)
{
    gpu::pointwiseBackward(m_stream, gpu::Pointwise::Neg, dout.data, dout.data, dx.data, dout.size());
}

void CudaDevice::softmaxForward(const TensorView &out, const TensorView &x)
{
    gpu::softmaxForward(m_stream, out.data, x.data, x.rows(), x.cols());
}

void CudaDevice::softmaxBackward(const TensorView &dout, const TensorView &out, const TensorView &dx)
{
    gpu::softmaxBackward(m_stream, dout.data, out.data, dx.data, out.rows(), out.cols());
}

void CudaDevice::layernormForward(const TensorView &out, const TensorView &mean, const TensorView &rstd,
    const TensorView &x, const TensorView &weight, const TensorView &bias, float epsilon)
{
    gpu::normForward(
        m_stream, out.data, mean.data, rstd.data, x.data, weight.data, bias.data, x.rows(), x.cols(), epsilon);
}

void CudaDevice::layernormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
    const TensorView &mean, const TensorView &rstd, const TensorView &dx, const TensorView &dweight,
    const TensorView &dbias)
{
    gpu::normBackward(m_stream, dout.data, x.data, weight.data, mean.data, rstd.data, dx.data, dweight.data,
        dbias.data, x.rows(), x.cols());
}

void CudaDevice::rmsnormForward(
    const TensorView &out, const TensorView &rstd, const TensorView &x, const TensorView &weight, float epsilon)
{
    gpu::normForward(
        m_stream, out.data, nullptr, rstd.data, x.data, weight.data, nullptr, x.rows(), x.cols(), epsilon);
}

void CudaDevice::rmsnormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
    const TensorView &rstd, const TensorView &dx, const TensorView &dweight)
{
    gpu::normBackward(m_stream, dout.data, x.data, weight.data, nullptr, rstd.data, dx.data, dweight.data,
        nullptr, x.rows(), x.cols());
}

void CudaDevice::reshapeForward(const TensorView &out, const TensorView &x)
{
    kernels::reshapeForward(out, x, m_copier);
}

void CudaDevice::reshapeBackward(const TensorView &dout, const TensorView &dx)
{
    kernels::reshapeBackward(dout, dx, m_copier);
}

void CudaDevice::transposeForward(
    const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm)
{
    kernels::transposeForward(out, x, perm, m_copier);
}

void CudaDevice::transposeBackward(
    const TensorView &dout, std::span<const std::int64_t> perm, const TensorView &dx)
{
    kernels::transposeBackward(dout, perm, dx, m_copier);
}

void CudaDevice::splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis)
{
    kernels::splitForward(outs, x, axis, m_copier);
}

void CudaDevice::splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx)
{
    kernels::splitBackward(douts, axis, dx, m_copier);
}

void CudaDevice::concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis)
{
    kernels::concatForward(out, xs, axis, m_copier);
}

void CudaDevice::concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs)
{
    kernels::concatBackward(dout, axis, dxs, m_copier);
}

void CudaDevice::sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
    std::span<const std::int64_t> steps)
{
    kernels::sliceForward(out, x, starts, steps, m_copier);
}

void CudaDevice::sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
    std::span<const std::int64_t> steps, const TensorView &dx)
{
    kernels::sliceBackward(dout, starts, steps, dx, m_copier);
}

void CudaDevice::expandForward(const TensorView &out, const TensorView &x)
{
    kernels::expandForward(out, x, m_copier);
}

void CudaDevice::expandBackward(const TensorView &dout, const TensorView &dx)
{
    kernels::expandBackward(dout, dx, m_copier);
}

void CudaDevice::shardedGatherForward(
    const TensorView &out, const TensorView &table, const IndexView &ids, std::int64_t offset)
{
    const std::int64_t rows = table.dim(0);
    gpu::gatherForward(m_stream, out.data, table.data, ids.data, offset, ids.size(), rows, table.size() / rows);
}

void CudaDevice::shardedGatherBackward(
    const TensorView &dout, const IndexView &ids, std::int64_t offset, const TensorView &dtable)
{
    const std::int64_t rows = dtable.dim(0);
    gpu::gatherBackward(
        m_stream, dout.data, ids.data, offset, dtable.data, ids.size(), rows, dtable.size() / rows);
}

void CudaDevice::crossEntropyRowMax(const TensorView &logits, const TensorView &rowMax)
{
    gpu::crossEntropyRowMax(m_stream, logits.data, rowMax.data, logits.rows(), logits.cols());
}

void CudaDevice::crossEntropyRowSums(const TensorView &logits, const IndexView &labels, std::int64_t offset,
    const TensorView &rowMax, const TensorView &sumExp, const TensorView &target)
{
    gpu::crossEntropyRowSums(m_stream, logits.data, labels.data, offset, rowMax.data, sumExp.data, target.data,
        logits.rows(), logits.cols());
}

void CudaDevice::crossEntropyFinish(const TensorView &loss, const TensorView &lse, const TensorView &rowMax,
    const TensorView &sumExp, const TensorView &target, double denominator)
{
    gpu::crossEntropyFinish(
        m_stream, loss.data, lse.data, rowMax.data, sumExp.data, target.data, lse.size(), denominator);
}

void CudaDevice::crossEntropyShardBackward(const TensorView &dloss, const TensorView &logits,
    const IndexView &labels, std::int64_t offset, const TensorView &lse, double denominator,
    const TensorView &dlogits)
{
    gpu::crossEntropyBackward(m_stream, dloss.data, logits.data, labels.data, offset, lse.data, denominator,
        dlogits.data, logits.rows(), logits.cols());
}

void CudaDevice::sgdUpdate(const TensorView &param, const TensorView &grad, float learningRate)
{
    gpu::sgdUpdate(m_stream, param.data, grad.data, learningRate, param.size());
}

void CudaDevice::adamUpdate(const TensorView &param, const TensorView &grad, const TensorView &m,
    const TensorView &v, std::int64_t step, const kernels::AdamConfig &config)
{
    const float c1 = 1.0f - std::pow(config.beta1, static_cast<float>(step));
    const float c2 = 1.0f - std::pow(config.beta2, static_cast<float>(step));
    gpu::adamUpdate(m_stream, param.data, grad.data, m.data, v.data, config.learningRate, config.beta1,
        config.beta2, config.epsilon, c1, c2, param.size());
}

} // namespace tapestry::exec
