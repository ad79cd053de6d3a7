#include "kernels/layout.h"

#include "kernels/strided.h"

#include <cstring>

namespace tapestry::exec::kernels {

namespace {

StridedBlock blockOf(const ir::Shape &shape)
{
    StridedBlock b;
    b.rank = shape.size();
    for (std::size_t i = 0; i < shape.size(); ++i)
        b.shape[i] = shape[i];
    return b;
}

// The block of x that output dim i reads: x's stride for dim perm[i].
StridedBlock transposeBlock(const ir::Shape &outShape, const ir::Shape &xShape,
                            std::span<const std::int64_t> perm)
{
    StridedBlock b = blockOf(outShape);
    const Dims xs = contiguousStrides(xShape);
    b.dstStride = contiguousStrides(outShape);
    for (std::size_t i = 0; i < perm.size(); ++i)
        b.srcStride[i] = xs[static_cast<std::size_t>(perm[i])];
    return b;
}

// The piece of a whole tensor (`whole`) that starts at `offset` along `axis`
// and has `piece`'s shape: its strides and its first element.
StridedBlock pieceBlock(const ir::Shape &piece, const ir::Shape &whole, std::size_t axis,
                        std::int64_t offset, std::int64_t &first)
{
    StridedBlock b = blockOf(piece);
    const Dims ws = contiguousStrides(whole);
    first = offset * ws[axis];
    b.dstStride = contiguousStrides(piece);
    b.srcStride = ws;
    return b;
}

StridedBlock sliceBlock(const ir::Shape &outShape, const ir::Shape &xShape,
                        std::span<const std::int64_t> starts, std::span<const std::int64_t> steps,
                        std::int64_t &first)
{
    StridedBlock b = blockOf(outShape);
    const Dims xs = contiguousStrides(xShape);
    b.dstStride = contiguousStrides(outShape);
    first = 0;
    for (std::size_t i = 0; i < xShape.size(); ++i) {
        first += starts[i] * xs[i];
        b.srcStride[i] = steps[i] * xs[i];
    }
    return b;
}

void swapSides(StridedBlock &b)
{
    std::swap(b.dstStride, b.srcStride);
}

// n contiguous elements.
StridedBlock flatBlock(std::int64_t n)
{
    StridedBlock b;
    b.rank = 1;
    b.shape[0] = n;
    b.srcStride[0] = 1;
    b.dstStride[0] = 1;
    return b;
}

class HostCopier final : public BlockCopier {
public:
    void copy(const StridedBlock &block, float *dst, const float *src, bool accumulate) const override
    {
        if (block.rank == 1 && !accumulate && block.srcStride[0] == 1 && block.dstStride[0] == 1)
            std::memcpy(dst, src, static_cast<std::size_t>(block.shape[0]) * sizeof(float));
        else
            stridedCopy(block, dst, src, accumulate);
    }
};

} // namespace

const BlockCopier &hostCopier()
{
    static const HostCopier copier;
    return copier;
}

void reshapeForward(const TensorView &out, const TensorView &x, const BlockCopier &copier)
{
    copier.copy(flatBlock(x.size()), out.data, x.data, false);
}

void reshapeBackward(const TensorView &dout, const TensorView &dx, const BlockCopier &copier)
{
    copier.copy(flatBlock(dout.size()), dx.data, dout.data, true);
}

void transposeForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm,
                      const BlockCopier &copier)
{
    copier.copy(transposeBlock(out.shape, x.shape, perm), out.data, x.data, false);
}

void transposeBackward(const TensorView &dout, std::span<const std::int64_t> perm,
                       const TensorView &dx, const BlockCopier &copier)
{
    StridedBlock b = transposeBlock(dout.shape, dx.shape, perm);
    swapSides(b);
    copier.copy(b, dx.data, dout.data, true);
}

void splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis,
                  const BlockCopier &copier)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &o : outs) {
        const StridedBlock b = pieceBlock(o.shape, x.shape, axis, offset, first);
        copier.copy(b, o.data, x.data + first, false);
        offset += o.dim(axis);
    }
}

void splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx,
                   const BlockCopier &copier)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &g : douts) {
        if (g) {
            StridedBlock b = pieceBlock(g.shape, dx.shape, axis, offset, first);
            swapSides(b);
            copier.copy(b, dx.data + first, g.data, true);
        }
        offset += g.dim(axis);
    }
}

void concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis,
                   const BlockCopier &copier)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &x : xs) {
        StridedBlock b = pieceBlock(x.shape, out.shape, axis, offset, first);
        swapSides(b);
        copier.copy(b, out.data + first, x.data, false);
        offset += x.dim(axis);
    }
}

void concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs,
                    const BlockCopier &copier)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &g : dxs) {
        if (g) {
            const StridedBlock b = pieceBlock(g.shape, dout.shape, axis, offset, first);
            copier.copy(b, g.data, dout.data + first, true);
        }
        offset += g.dim(axis);
    }
}

void sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
                  std::span<const std::int64_t> steps, const BlockCopier &copier)
{
    std::int64_t first = 0;
    const StridedBlock b = sliceBlock(out.shape, x.shape, starts, steps, first);
    copier.copy(b, out.data, x.data + first, false);
}

void sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
                   std::span<const std::int64_t> steps, const TensorView &dx,
                   const BlockCopier &copier)
{
    std::int64_t first = 0;
    StridedBlock b = sliceBlock(dout.shape, dx.shape, starts, steps, first);
    swapSides(b);
    copier.copy(b, dx.data + first, dout.data, true);
}

void expandForward(const TensorView &out, const TensorView &x, const BlockCopier &copier)
{
    StridedBlock b = blockOf(out.shape);
    b.dstStride = contiguousStrides(out.shape);
    b.srcStride = broadcastStrides(x.shape, out.shape);
    copier.copy(b, out.data, x.data, false);
}

void expandBackward(const TensorView &dout, const TensorView &dx, const BlockCopier &copier)
{
    StridedBlock b = blockOf(dout.shape);
    b.srcStride = contiguousStrides(dout.shape);
    b.dstStride = broadcastStrides(dx.shape, dout.shape);
    copier.copy(b, dx.data, dout.data, true);
}

} // namespace tapestry::exec::kernels
