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
// host synchronisation), cuBLAS GEMMs in the chosen precision and the CUDA
// kernels of cuda/*.cu. Kernel times come from CUDA events around each op,
// summed when read. Errors throw gpu::DeviceError.
class CudaDevice final : public Device {
public:
    // Makes `ordinal` the calling thread's device.
    CudaDevice(int ordinal, Precision precision);
    ~CudaDevice() override;
    CudaDevice(const CudaDevice &) = delete;
    CudaDevice &operator=(const CudaDevice &) = delete;

    int ordinal() const { return m_ordinal; }
    cudaStream_t stream() const { return m_stream; }
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
    void endKernel(bool gemm) override;
    KernelTimes kernelTimes() override;
    void resetKernelTimes() override;
    void copy(const TensorView &dst, const TensorView &src) override;
    void fill(const TensorView &x, float value) override;
    void scale(const TensorView &x, float factor) override;
    void addInto(const TensorView &dst, const TensorView &src) override;
    void stridedCopy(
        const kernels::StridedBlock &block, float *dst, const float *src, bool accumulate) override;
    void matmulForward(const TensorView &out, const TensorView &a, const TensorView &b) override;
    void matmulBackward(const TensorView &dout, const TensorView &a, const TensorView &b, const TensorView &da,
        const TensorView &db) override;
    void binaryForward(
        kernels::BinaryOp op, const TensorView &out, const TensorView &a, const TensorView &b) override;
    void binaryBackward(kernels::BinaryOp op, const TensorView &dout, const TensorView &a, const TensorView &b,
        const TensorView &da, const TensorView &db) override;
    void reluForward(const TensorView &out, const TensorView &x) override;
    void reluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx) override;
    void geluForward(kernels::GeluForm form, const TensorView &out, const TensorView &x) override;
    void geluBackward(
        kernels::GeluForm form, const TensorView &dout, const TensorView &x, const TensorView &dx) override;
    void siluForward(const TensorView &out, const TensorView &x) override;
    void siluBackward(const TensorView &dout, const TensorView &x, const TensorView &dx) override;
    void negForward(const TensorView &out, const TensorView &x) override;
    void negBackward(const TensorView &dout, const TensorView &dx) override;
    void softmaxForward(const TensorView &out, const TensorView &x) override;
    void softmaxBackward(const TensorView &dout, const TensorView &out, const TensorView &dx) override;
    void layernormForward(const TensorView &out, const TensorView &mean, const TensorView &rstd,
        const TensorView &x, const TensorView &weight, const TensorView &bias, float epsilon) override;
    void layernormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
        const TensorView &mean, const TensorView &rstd, const TensorView &dx, const TensorView &dweight,
        const TensorView &dbias) override;
    void rmsnormForward(const TensorView &out, const TensorView &rstd, const TensorView &x,
        const TensorView &weight, float epsilon) override;
    void rmsnormBackward(const TensorView &dout, const TensorView &x, const TensorView &weight,
        const TensorView &rstd, const TensorView &dx, const TensorView &dweight) override;
    void reshapeForward(const TensorView &out, const TensorView &x) override;
    void reshapeBackward(const TensorView &dout, const TensorView &dx) override;
    void transposeForward(
        const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm) override;
    void transposeBackward(
        const TensorView &dout, std::span<const std::int64_t> perm, const TensorView &dx) override;
    void splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis) override;
    void splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx) override;
    void concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis) override;
    void concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs) override;
    void sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
        std::span<const std::int64_t> steps) override;
    void sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
        std::span<const std::int64_t> steps, const TensorView &dx) override;
    void expandForward(const TensorView &out, const TensorView &x) override;
    void expandBackward(const TensorView &dout, const TensorView &dx) override;
    void shardedGatherForward(
        const TensorView &out, const TensorView &table, const IndexView &ids, std::int64_t offset) override;
    void shardedGatherBackward(
        const TensorView &dout, const IndexView &ids, std::int64_t offset, const TensorView &dtable) override;
    void crossEntropyRowMax(const TensorView &logits, const TensorView &rowMax) override;
    void crossEntropyRowSums(const TensorView &logits, const IndexView &labels, std::int64_t offset,
        const TensorView &rowMax, const TensorView &sumExp, const TensorView &target) override;
    void crossEntropyFinish(const TensorView &loss, const TensorView &lse, const TensorView &rowMax,
        const TensorView &sumExp, const TensorView &target, double denominator) override;
    void crossEntropyShardBackward(const TensorView &dloss, const TensorView &logits, const IndexView &labels,
        std::int64_t offset, const TensorView &lse, double denominator, const TensorView &dlogits) override;
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
    std::vector<bool> m_eventIsGemm;
    std::size_t m_eventsUsed = 0;
    KernelTimes m_kernelTimes;
};

} // namespace tapestry::exec
