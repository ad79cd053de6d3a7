#include "collectives.h"

#include "ir/error.h"
#include "ir/validate.h"

namespace tapestry::exec {

std::string_view toString(Collective kind)
{
    switch (kind) {
    case Collective::AllReduce:
        return "all_reduce";
    case Collective::AllGather:
        return "all_gather";
    case Collective::ReduceScatter:
        return "reduce_scatter";
    case Collective::AllToAll:
        return "all_to_all";
    }
    return "all_reduce";
}

namespace collective {

void shapeError(std::string_view collective, const std::string &problem)
{
    throw TapestryError(Error {"communicator", std::string(collective), problem});
}

void checkBlocks(
    std::string_view collective, const ir::Shape &part, const ir::Shape &whole, std::size_t dim, int p)
{
    ir::Shape expected = part;
    if (dim >= expected.size())
        shapeError(collective, "dim " + std::to_string(dim) + " out of range for " + ir::shapeToString(part));
    expected[dim] *= p;
    if (expected != whole)
        shapeError(collective,
            "shard " + ir::shapeToString(part) + " and whole " + ir::shapeToString(whole) +
                " do not match along dim " + std::to_string(dim) + " over " + std::to_string(p) + " ranks");
}

void checkAllToAll(
    const ir::Shape &in, const ir::Shape &out, std::size_t splitDim, std::size_t concatDim, int p)
{
    if (splitDim >= in.size() || concatDim >= in.size() || in[splitDim] % p != 0)
        shapeError("all-to-all",
            "cannot cut " + ir::shapeToString(in) + " into " + std::to_string(p) + " blocks along dim " +
                std::to_string(splitDim));
    ir::Shape expected = in;
    expected[splitDim] /= p;
    expected[concatDim] *= p;
    if (expected != out)
        shapeError(
            "all-to-all", "output " + ir::shapeToString(out) + ", expected " + ir::shapeToString(expected));
}

bool blocksContiguous(const ir::Shape &whole, std::size_t dim)
{
    for (std::size_t i = 0; i < dim; ++i)
        if (whole[i] != 1)
            return false;
    return true;
}

kernels::StridedBlock blockAlong(const ir::Shape &shape, std::size_t dim, int p, std::int64_t &first, int j)
{
    kernels::StridedBlock b;
    b.rank = shape.size();
    for (std::size_t i = 0; i < shape.size(); ++i)
        b.shape[i] = shape[i];
    b.shape[dim] = shape[dim] / p;
    const kernels::Dims whole = kernels::contiguousStrides(shape);
    ir::Shape blockShape = shape;
    blockShape[dim] /= p;
    b.srcStride = whole;  // in the whole tensor
    b.dstStride = kernels::contiguousStrides(blockShape);  // in the packed block
    first = j * b.shape[dim] * whole[dim];
    return b;
}

} // namespace collective

} // namespace tapestry::exec
