#include "cpudevice.h"

#include "opregistry.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tapestry::exec {

namespace {
constexpr std::int64_t kAlignFloats = 16;  // 64 bytes: one cache line, an AVX-512 vector
}

std::string_view CpuDevice::backend() const
{
    return "cpu";
}

std::string CpuDevice::description() const
{
    return "CPU (OpenBLAS)";
}

bool CpuDevice::hostMemory() const
{
    return true;
}

float *CpuDevice::allocate(std::int64_t count)
{
    const std::int64_t floats =
        (std::max<std::int64_t>(count, 1) + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    const std::size_t bytes = static_cast<std::size_t>(floats) * sizeof(float);
    auto *p = static_cast<float *>(std::aligned_alloc(kAlignFloats * sizeof(float), bytes));
    if (!p)
        throw std::bad_alloc();
    std::memset(p, 0, bytes);
    return p;
}

void CpuDevice::release(float *data)
{
    std::free(data);
}

const std::int64_t *CpuDevice::keepIndices(std::vector<std::int64_t> host)
{
    return m_indices.emplace_back(std::move(host)).data();
}

void CpuDevice::upload(const TensorView &dst, const float *host)
{
    if (dst.data != host)
        std::memcpy(dst.data, host, static_cast<std::size_t>(dst.size()) * sizeof(float));
}

void CpuDevice::download(float *host, const TensorView &src)
{
    if (src.data != host)
        std::memcpy(host, src.data, static_cast<std::size_t>(src.size()) * sizeof(float));
}

void CpuDevice::synchronize() { }

void CpuDevice::beginKernel()
{
    m_kernelStart = std::chrono::steady_clock::now();
}

void CpuDevice::endKernel(KernelKind kind)
{
    m_kernelTimes.add(kind, std::chrono::duration<double>(std::chrono::steady_clock::now() - m_kernelStart).count());
}

KernelTimes CpuDevice::kernelTimes()
{
    return m_kernelTimes;
}

void CpuDevice::resetKernelTimes()
{
    m_kernelTimes = {};
}

void CpuDevice::copy(const TensorView &dst, const TensorView &src)
{
    if (dst.data != src.data)
        std::memcpy(dst.data, src.data, static_cast<std::size_t>(dst.size()) * sizeof(float));
}

void CpuDevice::fill(const TensorView &x, float value)
{
    if (value == 0.0f)
        std::memset(x.data, 0, static_cast<std::size_t>(x.size()) * sizeof(float));
    else
        std::fill(x.data, x.data + x.size(), value);
}

void CpuDevice::scale(const TensorView &x, float factor)
{
    for (std::int64_t i = 0; i < x.size(); ++i)
        x.data[i] *= factor;
}

void CpuDevice::addInto(const TensorView &dst, const TensorView &src)
{
    const std::int64_t n = dst.size();
    for (std::int64_t i = 0; i < n; ++i)
        dst.data[i] += src.data[i];
}

void CpuDevice::stridedCopy(const kernels::StridedBlock &block, float *dst, const float *src, bool accumulate)
{
    kernels::stridedCopy(block, dst, src, accumulate);
}

OpKernels CpuDevice::opKernels(const OpDef &def) const
{
    return def.hostShard ? def.hostShard : def.host;
}

void CpuDevice::sgdUpdate(const TensorView &param, const TensorView &grad, float learningRate)
{
    kernels::sgdUpdate(param, grad, learningRate);
}

void CpuDevice::adamUpdate(const TensorView &param, const TensorView &grad, const TensorView &m,
    const TensorView &v, std::int64_t step, const kernels::AdamConfig &config)
{
    kernels::adamUpdate(param, grad, m, v, step, config);
}

} // namespace tapestry::exec
