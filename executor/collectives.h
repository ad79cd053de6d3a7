#pragma once

#include "kernels/strided.h"
#include "tensorview.h"

#include <array>
#include <cstdint>
#include <string_view>

namespace tapestry::exec {

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll };
inline constexpr std::size_t kCollectiveKinds = 4;
std::string_view toString(Collective kind);  // "all_reduce", ... as in the plan JSON

// Calls, bytes and seconds per collective kind. Bytes are the size of the
// whole buffer a call works on, as nccl-tests counts "size": the tensor for
// an all-reduce, the gathered output of an all-gather, the unreduced input of
// a reduce-scatter, the input of an all-to-all.
struct CollectiveStats {
    struct Entry {
        std::int64_t calls = 0;
        std::int64_t bytes = 0;
        double seconds = 0.0;
    };
    std::array<Entry, kCollectiveKinds> kinds {};

    const Entry &operator[](Collective kind) const { return kinds[static_cast<std::size_t>(kind)]; }
    Entry &operator[](Collective kind) { return kinds[static_cast<std::size_t>(kind)]; }
};

// The collectives of one group of ranks (one mesh axis) on float32 tensors
// that live where the rank computes: host memory over MPI (Communicator), or
// GPU memory over NCCL (cuda/ncclcommunicator.h). Each rank passes its local
// tensor; the dim arguments say along which tensor dim the shards are laid
// out, so the program builder can name the collective exactly as a sharding
// spec does. Shape errors throw TapestryError.
class Collectives {
public:
    virtual ~Collectives() = default;

    virtual int rank() const = 0;
    virtual int size() const = 0;

    // x = Σ over ranks of x, in place.
    virtual void allReduceSum(const TensorView &x) = 0;
    // x = element-wise max over ranks of x, in place (the per-token max logit
    // of a vocabulary-parallel cross-entropy); counted as an all-reduce.
    virtual void allReduceMax(const TensorView &x) = 0;
    // full = concatenation along `dim` of every rank's `local`, in rank order.
    virtual void allGather(const TensorView &local, const TensorView &full, std::size_t dim) = 0;
    // local = this rank's block along `dim` of Σ over ranks of `full`.
    virtual void reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim) = 0;
    // `in` is cut into size() blocks along splitDim; block j goes to rank j;
    // `out` is the blocks received, concatenated along concatDim in rank order
    // (the resharding from a split on one dim to a split on another).
    virtual void allToAll(
        const TensorView &in, const TensorView &out, std::size_t splitDim, std::size_t concatDim) = 0;

    // Counters since the last reset. Where collectives run asynchronously
    // (NCCL on a stream) their seconds are settled here, which waits for them.
    virtual const CollectiveStats &stats() = 0;
    virtual void resetStats() = 0;
};

// Shape logic both implementations share (host code, no communication).
namespace collective {

// Throws the one-line error of a collective: "communicator: <what>: <problem>".
[[noreturn]] void shapeError(std::string_view collective, const std::string &problem);
// Checks that `whole` is `part` with dim `dim` p times longer.
void checkBlocks(
    std::string_view collective, const ir::Shape &part, const ir::Shape &whole, std::size_t dim, int p);
// Checks an all-to-all's shapes: `in` cut into p blocks along splitDim and
// joined along concatDim gives `out`.
void checkAllToAll(
    const ir::Shape &in, const ir::Shape &out, std::size_t splitDim, std::size_t concatDim, int p);
// True when blocks along `dim` are contiguous ranges of the whole tensor
// (every dim before it has size 1), so a library call can write them in
// place without packing.
bool blocksContiguous(const ir::Shape &whole, std::size_t dim);
// The strided view of block j (of p) along `dim` of a contiguous tensor of
// `shape`, as a copy from the whole tensor (srcStride) to a packed block
// (dstStride); `first` is the block's first element in the whole tensor.
kernels::StridedBlock blockAlong(const ir::Shape &shape, std::size_t dim, int p, std::int64_t &first, int j);

} // namespace collective

} // namespace tapestry::exec
