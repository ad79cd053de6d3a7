#pragma once

#include "kernels/optimizer.h"
#include "kernels/strided.h"
#include "tensorview.h"

#include "sharding/mesh.h"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tapestry::exec {

struct OpDef;
struct OpKernels;

// The math precision of the GEMMs. Tensors stay float32 in every case; fp16
// and bf16 let the GPU's tensor cores round the GEMM operands to 16 bits and
// accumulate in float32 (cuBLAS's CUBLAS_COMPUTE_32F_FAST_16F/_16BF), which
// is where a step's time goes. The CPU backend computes in fp32 only.
enum class Precision { F32, F16, BF16 };
std::string_view toString(Precision precision);  // "fp32", "fp16", "bf16"
std::optional<Precision> parsePrecision(std::string_view text);
// The mesh profile's dtype whose peak FLOP/s a step's GEMMs are held to.
ir::DType peakDType(Precision precision);
// The mesh the run's step time is predicted on: with fp16 or bf16 GEMMs the
// graph's float32 work is costed at that precision's peak, as it runs.
sharding::Mesh predictionMesh(sharding::Mesh mesh, Precision precision);

// The kinds a rank times its kernels by: the GEMMs, the memory-bound
// families the cost model prices by their own bandwidth
// (sharding::kernelFamily: transposes, activations, softmax, norms), and
// everything else (elementwise, embeddings, the loss, layout copies).
enum class KernelKind : std::uint8_t { Gemm, Transpose, Activation, Softmax, Normalization, Other };
inline constexpr std::size_t kKernelKinds = 6;
std::string_view kernelKindName(KernelKind kind);  // "gemm", "transpose", ..., "other"
KernelKind kernelKindOf(std::string_view opType, bool gemm);

// Seconds spent inside op kernels: the GEMMs apart from everything else
// (norms, softmax, elementwise, layout copies), and by kind.
struct KernelTimes {
    std::array<double, kKernelKinds> byKind{};
    double gemm() const { return byKind[static_cast<std::size_t>(KernelKind::Gemm)]; }
    double other() const;  // every kind but the GEMMs
    void add(KernelKind kind, double seconds) { byKind[static_cast<std::size_t>(kind)] += seconds; }
    KernelTimes &operator+=(const KernelTimes &t)
    {
        for (std::size_t k = 0; k < kKernelKinds; ++k)
            byKind[k] += t.byKind[k];
        return *this;
    }
};

// Where one rank's tensors live and its kernels run: host memory and the
// kernels of kernels/*.h (CpuDevice), or a GPU (cuda/cudadevice.h). The
// program builder (ShardedProgram) lays out its buffers and calls the same
// operations on either; TensorView data pointers point into the device's
// memory. What is not one op's lives here (memory, copies between buffers,
// timing, the optimizer); an op's kernels come from the op registry
// (opKernels), and have exactly the meaning of kernels/*.h, whose host
// versions are the reference the device versions are checked against.
// Work may run asynchronously; synchronize() waits for it, and anything that
// hands data to the host (download) waits by itself.
class Device {
public:
    virtual ~Device() = default;

    virtual std::string_view backend() const = 0;  // "cpu", "cuda"
    virtual std::string description() const = 0;  // the processor, for reports
    // True when views point into host memory (no copies to read them).
    virtual bool hostMemory() const = 0;

    // Memory. allocate() returns `count` zeroed floats (at least one), made
    // once per program; release() frees them.
    virtual float *allocate(std::int64_t count) = 0;
    virtual void release(float *data) = 0;
    // Integer ids (token ids, labels) built on the host, kept on the device
    // for its lifetime; the pointer is what IndexViews hold.
    virtual const std::int64_t *keepIndices(std::vector<std::int64_t> host) = 0;
    virtual void upload(const TensorView &dst, const float *host) = 0;
    virtual void download(float *host, const TensorView &src) = 0;
    virtual void synchronize() = 0;
    // A view of `src` the host can read: `src` itself on host memory, else a
    // copy downloaded into `staging`.
    TensorView hostView(const TensorView &src, std::vector<float> &staging);

    // Kernel timing around each op: the CPU reads the clock, a GPU records
    // events on its stream and sums them when kernelTimes() is read.
    virtual void beginKernel() = 0;
    virtual void endKernel(KernelKind kind) = 0;
    virtual KernelTimes kernelTimes() = 0;
    virtual void resetKernelTimes() = 0;

    // Whole-buffer operations between kernels.
    virtual void copy(const TensorView &dst, const TensorView &src) = 0;
    virtual void fill(const TensorView &x, float value) = 0;
    virtual void scale(const TensorView &x, float factor) = 0;
    virtual void addInto(const TensorView &dst, const TensorView &src) = 0;
    virtual void stridedCopy(
        const kernels::StridedBlock &block, float *dst, const float *src, bool accumulate) = 0;

    // The kernels `def` runs with here: the registry's on host memory, the
    // ones registered under its name on a GPU; without kernels (an empty
    // OpKernels) the device cannot run it.
    virtual OpKernels opKernels(const OpDef &def) const = 0;

    // The optimizer's update of one parameter (kernels/optimizer.h).
    virtual void sgdUpdate(const TensorView &param, const TensorView &grad, float learningRate) = 0;
    virtual void adamUpdate(const TensorView &param, const TensorView &grad, const TensorView &m,
        const TensorView &v, std::int64_t step, const kernels::AdamConfig &config) = 0;
};

} // namespace tapestry::exec
