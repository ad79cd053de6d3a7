#pragma once

#include "device.h"

#include <chrono>
#include <deque>

namespace tapestry::exec {

// Host memory and the kernels of kernels/*.h (OpenBLAS GEMMs), as the op
// registry names them: the CPU backend.
class CpuDevice final : public Device {
public:
    std::string_view backend() const override;
    std::string description() const override;
    bool hostMemory() const override;
    float *allocate(std::int64_t count) override;
    void release(float *data) override;
    const std::int64_t *keepIndices(std::vector<std::int64_t> host) override;
    void upload(const TensorView &dst, const float *host) override;
    void download(float *host, const TensorView &src) override;
    void synchronize() override;
    void beginKernel() override;
    void endKernel(KernelKind kind) override;
    KernelTimes kernelTimes() override;
    void resetKernelTimes() override;
    void copy(const TensorView &dst, const TensorView &src) override;
    void fill(const TensorView &x, float value) override;
    void scale(const TensorView &x, float factor) override;
    void addInto(const TensorView &dst, const TensorView &src) override;
    void stridedCopy(
        const kernels::StridedBlock &block, float *dst, const float *src, bool accumulate) override;
    OpKernels opKernels(const OpDef &def) const override;
    void sgdUpdate(const TensorView &param, const TensorView &grad, float learningRate) override;
    void adamUpdate(const TensorView &param, const TensorView &grad, const TensorView &m, const TensorView &v,
        std::int64_t step, const kernels::AdamConfig &config) override;

private:
    std::chrono::steady_clock::time_point m_kernelStart;
    KernelTimes m_kernelTimes;
    std::deque<std::vector<std::int64_t>> m_indices;  // stable addresses
};

} // namespace tapestry::exec
