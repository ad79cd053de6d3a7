#include "cuda/cudadevice.h"

#include "cuda/cudacheck.h"
#include "cuda/launch.h"
#include "cuda/opkernels.h"

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
        m_eventKind.push_back(KernelKind::Other);
    }
    gpu::check(cudaEventRecord(m_events[m_eventsUsed].first, m_stream), "cudaEventRecord");
}

void CudaDevice::endKernel(KernelKind kind)
{
    gpu::check(cudaEventRecord(m_events[m_eventsUsed].second, m_stream), "cudaEventRecord");
    m_eventKind[m_eventsUsed] = kind;
    ++m_eventsUsed;
}

void CudaDevice::settleKernelTimes()
{
    synchronize();
    for (std::size_t i = 0; i < m_eventsUsed; ++i) {
        float ms = 0.0f;
        gpu::check(cudaEventElapsedTime(&ms, m_events[i].first, m_events[i].second), "cudaEventElapsedTime");
        m_kernelTimes.add(m_eventKind[i], ms * 1e-3);
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

OpKernels CudaDevice::opKernels(const OpDef &def) const
{
    const auto &table = cudaOpKernels();
    const auto it = table.find(def.name);
    return it == table.end() ? OpKernels{} : it->second;
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
