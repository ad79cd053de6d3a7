#include "cpudevice.h"

#include "kernels/binary.h"
#include "kernels/crossentropy.h"
#include "kernels/layernorm.h"
#include "kernels/layout.h"
#include "kernels/rmsnorm.h"
#include "kernels/softmax.h"
#include "kernels/vocabparallel.h"

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

void CpuDevice::endKernel(bool gemm)
{
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_kernelStart).count();
    (gemm ? m_kernelTimes.gemm : m_kernelTimes.other) += s;
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

void CpuDevice::matmulForward(const TensorView &out, const TensorView &a, const TensorView &b)
{
    kernels::matmulForward(out, a, b);
}

void CpuDevice::matmulBackward(const TensorView &dout, const TensorView &a, const TensorView &b,
    const TensorView &da, const TensorView &db)
{
    kernels::matmulBackward(dout, a, b, da, db);
}

void CpuDevice::binaryForward(
    kernels::BinaryOp op, const TensorView &out, const TensorView &a, const TensorView &b)
{
    kernels::binaryForward(op, out, a, b);
}

void CpuDevice::binaryBackward(kernels::BinaryOp op, const TensorView &dout, const TensorView &a,
    const TensorView &b, const TensorView &da, const TensorView &db)
{
    kernels::binaryBackward(op, dout, a, b, da, db);
}

void CpuDevice::reluForward(const TensorView &out, const TensorView &x)
{
    kernels::reluForward(out, x);
}

void CpuDevice::reluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    kernels::reluBackward(dout, x, dx);
}

void CpuDevice::geluForward(kernels::GeluForm form, const TensorView &out, const TensorView &x)
{
    kernels::geluForward(form, out, x);
}

void CpuDevice::geluBackward(
    kernels::GeluForm form, const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    kernels::geluBackward(form, dout, x, dx);
}

void CpuDevice::siluForward(const TensorView &out, const TensorView &x)
{
    kernels::siluForward(out, x);
}

void CpuDevice::siluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx)
{
    kernels::siluBackward(dout, x, dx);
}

void CpuDevice::negForward(const TensorView &out, const TensorView &x)
{
    kernels::negForward(out, x);
}

void CpuDevice::negBackward(const TensorView &dout, const TensorView &dx)
{
    kernels::negBackward(dout, dx);
}

void CpuDevice::softmaxForward(const TensorView &out, const TensorView &x)
{
    kernels::softmaxForward(out, x);
}

void CpuDevice::softmaxBackward(const TensorView &dout, const TensorView &out, const TensorView &dx)
{
    kernels::softmaxBackward(dout, out, dx);
}

void CpuDevice::layernormForward(const TensorView &out, const TensorView &mean, const TensorView &rstd,
    const TensorView &x, const TensorView &weight, const TensorView &bias, float epsilon)
{
    kernels::layernormForward(out, mean, rstd, x, weight, bias, epsilon);
}

void CpuDevice::layernormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
    const TensorView &mean, const TensorView &rstd, const TensorView &dx, const TensorView &dweight,
    const TensorView &dbias)
{
    kernels::layernormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
}

void CpuDevice::rmsnormForward(
    const TensorView &out, const TensorView &rstd, const TensorView &x, const TensorView &weight, float epsilon)
{
    kernels::rmsnormForward(out, rstd, x, weight, epsilon);
}

void CpuDevice::rmsnormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
    const TensorView &rstd, const TensorView &dx, const TensorView &dweight)
{
    kernels::rmsnormBackward(dout, x, weight, rstd, dx, dweight);
}

void CpuDevice::reshapeForward(const TensorView &out, const TensorView &x)
{
    kernels::reshapeForward(out, x);
}

void CpuDevice::reshapeBackward(const TensorView &dout, const TensorView &dx)
{
    kernels::reshapeBackward(dout, dx);
}

void CpuDevice::transposeForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm)
{
    kernels::transposeForward(out, x, perm);
}

void CpuDevice::transposeBackward(
    const TensorView &dout, std::span<const std::int64_t> perm, const TensorView &dx)
{
    kernels::transposeBackward(dout, perm, dx);
}

void CpuDevice::splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis)
{
    kernels::splitForward(outs, x, axis);
}

void CpuDevice::splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx)
{
    kernels::splitBackward(douts, axis, dx);
}

void CpuDevice::concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis)
{
    kernels::concatForward(out, xs, axis);
}

void CpuDevice::concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs)
{
    kernels::concatBackward(dout, axis, dxs);
}

void CpuDevice::sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
    std::span<const std::int64_t> steps)
{
    kernels::sliceForward(out, x, starts, steps);
}

void CpuDevice::sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
    std::span<const std::int64_t> steps, const TensorView &dx)
{
    kernels::sliceBackward(dout, starts, steps, dx);
}

void CpuDevice::expandForward(const TensorView &out, const TensorView &x)
{
    kernels::expandForward(out, x);
}

void CpuDevice::expandBackward(const TensorView &dout, const TensorView &dx)
{
    kernels::expandBackward(dout, dx);
}

void CpuDevice::shardedGatherForward(
    const TensorView &out, const TensorView &table, const IndexView &ids, std::int64_t offset)
{
    kernels::shardedGatherForward(out, table, ids, offset);
}

void CpuDevice::shardedGatherBackward(
    const TensorView &dout, const IndexView &ids, std::int64_t offset, const TensorView &dtable)
{
    kernels::shardedGatherBackward(dout, ids, offset, dtable);
}

void CpuDevice::crossEntropyRowMax(const TensorView &logits, const TensorView &rowMax)
{
    kernels::crossEntropyRowMax(logits, rowMax);
}

void CpuDevice::crossEntropyRowSums(const TensorView &logits, const IndexView &labels, std::int64_t offset,
    const TensorView &rowMax, const TensorView &sumExp, const TensorView &target)
{
    kernels::crossEntropyRowSums(logits, labels, offset, rowMax, sumExp, target);
}

void CpuDevice::crossEntropyFinish(const TensorView &loss, const TensorView &lse, const TensorView &rowMax,
    const TensorView &sumExp, const TensorView &target, double denominator)
{
    kernels::crossEntropyFinish(loss, lse, rowMax, sumExp, target, denominator);
}

void CpuDevice::crossEntropyShardBackward(const TensorView &dloss, const TensorView &logits,
    const IndexView &labels, std::int64_t offset, const TensorView &lse, double denominator,
    const TensorView &dlogits)
{
    kernels::crossEntropyShardBackward(dloss, logits, labels, offset, lse, denominator, dlogits);
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
