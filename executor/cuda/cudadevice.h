#pragma once

#include "device.h"
#include "kernels/layout.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <utility>
#include <vector>

namespace tapestry::exec {

// One GPU: the rank's arena in device memory, one stream for every kernel,
// cuBLAS GEMM and NCCL collective (so they run in program order without
// host synchronisation), cuBLAS GEMMs in the chosen precision, and the op
// kernels registered in cuda/opkernels.cpp. Kernel times come from CUDA
// events around each op, summed when read. Errors throw gpu::DeviceError.
class CudaDevice final : public Device {
public:
    // Makes `ordinal` the calling thread's device.
    CudaDevice(int ordinal, Precision precision);
    ~CudaDevice() override;
    CudaDevice(const CudaDevice &) = delete;
    CudaDevice &operator=(const CudaDevice &) = delete;

    int ordinal() const { return m_ordinal; }
    // What the op kernels (cuda/opkernels.cpp) queue their work with: the
    // stream, cuBLAS on it in the GEMMs' precision, and strided block copies
    // on it for the layout ops.
    cudaStream_t stream() const { return m_stream; }
    cublasHandle_t blas() const { return m_blas; }
    Precision precision() const { return m_precision; }
    const kernels::BlockCopier &copier() const { return m_copier; }
    // The device's 16-byte UUID, to tell whether ranks share a GPU.
    std::string uuid() const { return m_uuid; }

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
    class Copier final : public kernels::BlockCopier {
    public:
        explicit Copier(CudaDevice &device)
            : m_device(device)
        {
        }
        void copy(
            const kernels::StridedBlock &block, float *dst, const float *src, bool accumulate) const override
        {
            m_device.stridedCopy(block, dst, src, accumulate);
        }

    private:
        CudaDevice &m_device;
    };
    void settleKernelTimes();

    int m_ordinal = 0;
    Precision m_precision = Precision::F32;
    std::string m_name, m_uuid;
    cudaStream_t m_stream = nullptr;
    cublasHandle_t m_blas = nullptr;
    Copier m_copier {*this};
    std::vector<void *> m_indices;
    // Event pairs around kernels since the last settle, reused across steps.
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> m_events;
    std::vector<KernelKind> m_eventKind;
    std::size_t m_eventsUsed = 0;
    KernelTimes m_kernelTimes;
};

} // namespace tapestry::exec
