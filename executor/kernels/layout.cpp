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

} // namespace

void reshapeForward(const TensorView &out, const TensorView &x)
{
    std::memcpy(out.data, x.data, static_cast<std::size_t>(x.size()) * sizeof(float));
}

void reshapeBackward(const TensorView &dout, const TensorView &dx)
{
    const std::int64_t n = dout.size();
    for (std::int64_t i = 0; i < n; ++i)
        dx.data[i] += dout.data[i];
}

void transposeForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> perm)
{
    stridedCopy(transposeBlock(out.shape, x.shape, perm), out.data, x.data, false);
}

void transposeBackward(const TensorView &dout, std::span<const std::int64_t> perm,
                       const TensorView &dx)
{
    StridedBlock b = transposeBlock(dout.shape, dx.shape, perm);
    swapSides(b);
    stridedCopy(b, dx.data, dout.data, true);
}

void splitForward(std::span<const TensorView> outs, const TensorView &x, std::size_t axis)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &o : outs) {
        const StridedBlock b = pieceBlock(o.shape, x.shape, axis, offset, first);
        stridedCopy(b, o.data, x.data + first, false);
        offset += o.dim(axis);
    }
}

void splitBackward(std::span<const TensorView> douts, std::size_t axis, const TensorView &dx)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &g : douts) {
        if (g) {
            StridedBlock b = pieceBlock(g.shape, dx.shape, axis, offset, first);
            swapSides(b);
            stridedCopy(b, dx.data + first, g.data, true);
        }
        offset += g.dim(axis);
    }
}

void concatForward(const TensorView &out, std::span<const TensorView> xs, std::size_t axis)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &x : xs) {
        StridedBlock b = pieceBlock(x.shape, out.shape, axis, offset, first);
        swapSides(b);
        stridedCopy(b, out.data + first, x.data, false);
        offset += x.dim(axis);
    }
}

void concatBackward(const TensorView &dout, std::size_t axis, std::span<const TensorView> dxs)
{
    std::int64_t offset = 0, first = 0;
    for (const TensorView &g : dxs) {
        if (g) {
            const StridedBlock b = pieceBlock(g.shape, dout.shape, axis, offset, first);
            stridedCopy(b, g.data, dout.data + first, true);
        }
        offset += g.dim(axis);
    }
}

void sliceForward(const TensorView &out, const TensorView &x, std::span<const std::int64_t> starts,
                  std::span<const std::int64_t> steps)
{
    std::int64_t first = 0;
    const StridedBlock b = sliceBlock(out.shape, x.shape, starts, steps, first);
    stridedCopy(b, out.data, x.data + first, false);
}

void sliceBackward(const TensorView &dout, std::span<const std::int64_t> starts,
                   std::span<const std::int64_t> steps, const TensorView &dx)
{
    std::int64_t first = 0;
    StridedBlock b = sliceBlock(dout.shape, dx.shape, starts, steps, first);
    swapSides(b);
    stridedCopy(b, dx.data + first, dout.data, true);
}

void expandForward(const TensorView &out, const TensorView &x)
{
    StridedBlock b = blockOf(out.shape);
    b.dstStride = contiguousStrides(out.shape);
    b.srcStride = broadcastStrides(x.shape, out.shape);
    stridedCopy(b, out.data, x.data, false);
}

void expandBackward(const TensorView &dout, const TensorView &dx)
{
    StridedBlock b = blockOf(dout.shape);
    b.srcStride = contiguousStrides(dout.shape);
    b.dstStride = broadcastStrides(dx.shape, dout.shape);
    stridedCopy(b, dx.data, dout.data, true);
}

} // namespace tapestry::exec::kernels
