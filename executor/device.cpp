#include "device.h"

#include "sharding/strategy.h"

namespace tapestry::exec {

std::string_view toString(Precision precision)
{
    switch (precision) {
    case Precision::F32:
        return "fp32";
    case Precision::F16:
        return "fp16";
    case Precision::BF16:
        return "bf16";
    }
    return "fp32";
}

std::optional<Precision> parsePrecision(std::string_view text)
{
    for (Precision p : {Precision::F32, Precision::F16, Precision::BF16})
        if (text == toString(p))
            return p;
    return std::nullopt;
}

ir::DType peakDType(Precision precision)
{
    switch (precision) {
    case Precision::F32:
        return ir::DType::F32;
    case Precision::F16:
        return ir::DType::F16;
    case Precision::BF16:
        return ir::DType::BF16;
    }
    return ir::DType::F32;
}

std::string_view kernelKindName(KernelKind kind)
{
    switch (kind) {
    case KernelKind::Gemm: return "gemm";
    case KernelKind::Transpose: return "transpose";
    case KernelKind::Activation: return "activation";
    case KernelKind::Softmax: return "softmax";
    case KernelKind::Normalization: return "normalization";
    case KernelKind::Other: break;
    }
    return "other";
}

double KernelTimes::other() const
{
    double s = 0.0;
    for (std::size_t k = 0; k < kKernelKinds; ++k)
        if (static_cast<KernelKind>(k) != KernelKind::Gemm)
            s += byKind[k];
    return s;
}

KernelKind kernelKindOf(std::string_view opType, bool gemm)
{
    if (gemm)
        return KernelKind::Gemm;
    const std::string_view family = sharding::kernelFamily(opType);
    for (std::size_t k = 0; k < kKernelKinds; ++k)
        if (family == kernelKindName(static_cast<KernelKind>(k)))
            return static_cast<KernelKind>(k);
    return KernelKind::Other;
}

sharding::Mesh predictionMesh(sharding::Mesh mesh, Precision precision)
{
    if (precision != Precision::F32)
        mesh.device.peakFlops[std::string(ir::toString(ir::DType::F32))] = mesh.device.peak(peakDType(precision));
    return mesh;
}

TensorView Device::hostView(const TensorView &src, std::vector<float> &staging)
{
    if (hostMemory() || !src)
        return src;
    staging.resize(static_cast<std::size_t>(src.size()));
    download(staging.data(), src);
    return TensorView{staging.data(), src.shape};
}

} // namespace tapestry::exec
