#include "cuda/opkernels.h"

#include "collectives.h"
#include "cuda/cudacheck.h"
#include "cuda/cudadevice.h"
#include "cuda/gemmplan.h"
#include "cuda/launch.h"
#include "kernels/layout.h"

#include <cstdint>

namespace tapestry::exec {

namespace {

CudaDevice &gpuOf(const OpArgs &a)
{
    return static_cast<CudaDevice &>(*a.device);
}

cudaStream_t streamOf(const OpArgs &a)
{
    return gpuOf(a).stream();
}

const TensorView &optional(std::span<const TensorView> views, std::size_t i)
{
    static const TensorView none;
    return i < views.size() ? views[i] : none;
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

gpu::Pointwise geluOf(const OpArgs &a)
{
    return a.attributes->gelu == kernels::GeluForm::Erf ? gpu::Pointwise::GeluErf : gpu::Pointwise::GeluTanh;
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

// The GEMMs of a plan (gemmplan.h) on cuBLAS, writing into `out(g)`.
template <typename Operand, typename Out>
void runGemms(CudaDevice &device, const std::vector<gpu::GemmOp> &gemms, Operand operand, Out out)
{
    const float one = 1.0f;
    const cublasComputeType_t compute = computeType(device.precision());
    for (const gpu::GemmOp &g : gemms) {
        const float *first = operand(g.first) + g.firstOffset, *second = operand(g.second) + g.secondOffset;
        float *c = out(g) + g.outOffset;
        const cublasOperation_t ta = g.transFirst ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t tb = g.transSecond ? CUBLAS_OP_T : CUBLAS_OP_N;
        if (g.batch > 1)
            gpu::check(cublasGemmStridedBatchedEx(device.blas(), ta, tb, gemmInt(g.m), gemmInt(g.n), gemmInt(g.k),
                           &one, first, CUDA_R_32F, gemmInt(g.ldFirst), g.strideFirst, second, CUDA_R_32F,
                           gemmInt(g.ldSecond), g.strideSecond, &g.beta, c, CUDA_R_32F, gemmInt(g.ldOut),
                           g.strideOut, gemmInt(g.batch), compute, CUBLAS_GEMM_DEFAULT),
                "cublasGemmStridedBatchedEx");
        else
            gpu::check(cublasGemmEx(device.blas(), ta, tb, gemmInt(g.m), gemmInt(g.n), gemmInt(g.k), &one, first,
                           CUDA_R_32F, gemmInt(g.ldFirst), second, CUDA_R_32F, gemmInt(g.ldSecond), &g.beta, c,
                           CUDA_R_32F, gemmInt(g.ldOut), compute, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
    }
}

void matmulForward(const OpArgs &args)
{
    const TensorView &out = args.out[0], &a = args.in[0], &b = args.in[1];
    runGemms(
        gpuOf(args), gpu::planMatmulForward(out.shape, a.shape, b.shape, args.attributes->transB),
        [&](gpu::GemmOp::Operand o) { return o == gpu::GemmOp::Operand::A ? a.data : b.data; },
        [&](const gpu::GemmOp &) { return out.data; });
}

void matmulBackward(const OpArgs &args)
{
    const TensorView &dout = args.dout[0], &a = args.in[0], &b = args.in[1], &da = args.din[0], &db = args.din[1];
    runGemms(
        gpuOf(args), gpu::planMatmulBackward(dout.shape, a.shape, b.shape, bool(da), bool(db), args.attributes->transB),
        [&](gpu::GemmOp::Operand o) {
            return o == gpu::GemmOp::Operand::A ? a.data : o == gpu::GemmOp::Operand::B ? b.data : dout.data;
        },
        [&](const gpu::GemmOp &g) { return g.outIsDa ? da.data : db.data; });
}

// Vocab-parallel (Megatron), as the CPU's: the row max and the two row sums
// of a rank's block of classes are reduced over the axes splitting them.
void crossEntropyForward(const OpArgs &a)
{
    const cudaStream_t s = streamOf(a);
    const TensorView &logits = a.in[0];
    const TensorView &rowMax = a.scratch[0], &sumExp = a.scratch[1], &target = a.scratch[2];
    gpu::crossEntropyRowMax(s, logits.data, rowMax.data, logits.rows(), logits.cols());
    for (Collectives *c : a.split)
        c->allReduceMax(rowMax);
    gpu::crossEntropyRowSums(s, logits.data, a.index.data, a.offset, rowMax.data, sumExp.data, target.data,
        logits.rows(), logits.cols());
    for (Collectives *c : a.split) {
        c->allReduceSum(sumExp);
        c->allReduceSum(target);
    }
    gpu::crossEntropyFinish(s, a.out[0].data, a.saved[0].data, rowMax.data, sumExp.data, target.data,
        a.saved[0].size(), a.denominator);
}

void crossEntropyBackward(const OpArgs &a)
{
    const TensorView &logits = a.in[0];
    gpu::crossEntropyBackward(streamOf(a), a.dout[0].data, logits.data, a.index.data, a.offset, a.saved[0].data,
        a.denominator, a.din[0].data, logits.rows(), logits.cols());
}

const std::map<std::string_view, OpKernels> kKernels = {
    {"MatMul", {matmulForward, matmulBackward}},
    {"Binary",
        {[](const OpArgs &a) {
             const TensorView &out = a.out[0], &x = a.in[0], &y = a.in[1];
             gpu::binaryForward(streamOf(a), toBinary(a.attributes->binary), broadcastLayout(out, x, y), out.data,
                 x.data, y.data, out.size());
         },
            [](const OpArgs &a) {
                const TensorView &dout = a.dout[0], &x = a.in[0], &y = a.in[1], &dx = a.din[0], &dy = a.din[1];
                const gpu::Binary op = toBinary(a.attributes->binary);
                const gpu::Broadcast l = broadcastLayout(dout, x, y);
                if (dx)
                    gpu::binaryBackward(streamOf(a), op, 0, l, dout.data, x.data, y.data, dx.data, x.size());
                if (dy)
                    gpu::binaryBackward(streamOf(a), op, 1, l, dout.data, x.data, y.data, dy.data, y.size());
            }}},
    {"Relu",
        {[](const OpArgs &a) {
             gpu::pointwiseForward(streamOf(a), gpu::Pointwise::Relu, a.out[0].data, a.in[0].data, a.in[0].size());
         },
            [](const OpArgs &a) {
                gpu::pointwiseBackward(streamOf(a), gpu::Pointwise::Relu, a.dout[0].data, a.in[0].data,
                    a.din[0].data, a.in[0].size());
            }}},
    {"Gelu",
        {[](const OpArgs &a) {
             gpu::pointwiseForward(streamOf(a), geluOf(a), a.out[0].data, a.in[0].data, a.in[0].size());
         },
            [](const OpArgs &a) {
                gpu::pointwiseBackward(
                    streamOf(a), geluOf(a), a.dout[0].data, a.in[0].data, a.din[0].data, a.in[0].size());
            }}},
    {"Silu",
        {[](const OpArgs &a) {
             gpu::pointwiseForward(streamOf(a), gpu::Pointwise::Silu, a.out[0].data, a.in[0].data, a.in[0].size());
         },
            [](const OpArgs &a) {
                gpu::pointwiseBackward(streamOf(a), gpu::Pointwise::Silu, a.dout[0].data, a.in[0].data,
                    a.din[0].data, a.in[0].size());
            }}},
    // Neg's derivative does not read x: dout stands in for it.
    {"Neg",
        {[](const OpArgs &a) {
             gpu::pointwiseForward(streamOf(a), gpu::Pointwise::Neg, a.out[0].data, a.in[0].data, a.in[0].size());
         },
            [](const OpArgs &a) {
                gpu::pointwiseBackward(streamOf(a), gpu::Pointwise::Neg, a.dout[0].data, a.dout[0].data,
                    a.din[0].data, a.dout[0].size());
            }}},
    {"Softmax",
        {[](const OpArgs &a) {
             const TensorView &x = a.in[0];
             gpu::softmaxForward(streamOf(a), a.out[0].data, x.data, x.rows(), x.cols());
         },
            [](const OpArgs &a) {
                const TensorView &y = a.out[0];
                gpu::softmaxBackward(streamOf(a), a.dout[0].data, y.data, a.din[0].data, y.rows(), y.cols());
            }}},
    {"LayerNorm",
        {[](const OpArgs &a) {
             const TensorView &x = a.in[0];
             gpu::normForward(streamOf(a), a.out[0].data, a.saved[0].data, a.saved[1].data, x.data, a.in[1].data,
                 optional(a.in, 2).data, x.rows(), x.cols(), a.attributes->epsilon);
         },
            [](const OpArgs &a) {
                const TensorView &x = a.in[0];
                gpu::normBackward(streamOf(a), a.dout[0].data, x.data, a.in[1].data, a.saved[0].data,
                    a.saved[1].data, a.din[0].data, a.din[1].data, optional(a.din, 2).data, x.rows(), x.cols());
            }}},
    {"RmsNorm",
        {[](const OpArgs &a) {
             const TensorView &x = a.in[0];
             gpu::normForward(streamOf(a), a.out[0].data, nullptr, a.saved[0].data, x.data, a.in[1].data, nullptr,
                 x.rows(), x.cols(), a.attributes->epsilon);
         },
            [](const OpArgs &a) {
                const TensorView &x = a.in[0];
                gpu::normBackward(streamOf(a), a.dout[0].data, x.data, a.in[1].data, nullptr, a.saved[0].data,
                    a.din[0].data, a.din[1].data, nullptr, x.rows(), x.cols());
            }}},
    // The layout ops are the host's shape logic around block copies on the GPU.
    {"Reshape",
        {[](const OpArgs &a) { kernels::reshapeForward(a.out[0], a.in[0], gpuOf(a).copier()); },
            [](const OpArgs &a) { kernels::reshapeBackward(a.dout[0], a.din[0], gpuOf(a).copier()); }}},
    {"Transpose",
        {[](const OpArgs &a) {
             kernels::transposeForward(a.out[0], a.in[0], a.attributes->perm, gpuOf(a).copier());
         },
            [](const OpArgs &a) {
                kernels::transposeBackward(a.dout[0], a.attributes->perm, a.din[0], gpuOf(a).copier());
            }}},
    {"Split",
        {[](const OpArgs &a) { kernels::splitForward(a.out, a.in[0], a.attributes->axis, gpuOf(a).copier()); },
            [](const OpArgs &a) {
                kernels::splitBackward(a.dout, a.attributes->axis, a.din[0], gpuOf(a).copier());
            }}},
    {"Concat",
        {[](const OpArgs &a) { kernels::concatForward(a.out[0], a.in, a.attributes->axis, gpuOf(a).copier()); },
            [](const OpArgs &a) {
                kernels::concatBackward(a.dout[0], a.attributes->axis, a.din, gpuOf(a).copier());
            }}},
    {"Slice",
        {[](const OpArgs &a) {
             kernels::sliceForward(
                 a.out[0], a.in[0], a.attributes->starts, a.attributes->steps, gpuOf(a).copier());
         },
            [](const OpArgs &a) {
                kernels::sliceBackward(
                    a.dout[0], a.attributes->starts, a.attributes->steps, a.din[0], gpuOf(a).copier());
            }}},
    {"Expand",
        {[](const OpArgs &a) { kernels::expandForward(a.out[0], a.in[0], gpuOf(a).copier()); },
            [](const OpArgs &a) { kernels::expandBackward(a.dout[0], a.din[0], gpuOf(a).copier()); }}},
    {"Gather",
        {[](const OpArgs &a) {
             const TensorView &table = a.in[0];
             const std::int64_t rows = table.dim(0);
             gpu::gatherForward(streamOf(a), a.out[0].data, table.data, a.index.data, a.offset, a.index.size(),
                 rows, table.size() / rows);
         },
            [](const OpArgs &a) {
                const TensorView &dtable = a.din[0];
                const std::int64_t rows = dtable.dim(0);
                gpu::gatherBackward(streamOf(a), a.dout[0].data, a.index.data, a.offset, dtable.data,
                    a.index.size(), rows, dtable.size() / rows);
            }}},
    {"CrossEntropy", {crossEntropyForward, crossEntropyBackward}},
};

} // namespace

const std::map<std::string_view, OpKernels> &cudaOpKernels()
{
    return kKernels;
}

} // namespace tapestry::exec
