#pragma once

#include "tensorview.h"

#include <mpi.h>

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

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
    std::array<Entry, kCollectiveKinds> kinds{};

    const Entry &operator[](Collective kind) const { return kinds[static_cast<std::size_t>(kind)]; }
    Entry &operator[](Collective kind) { return kinds[static_cast<std::size_t>(kind)]; }
};

// The collectives of one group of ranks (one mesh axis) on float32 tensors,
// over MPI. Owns its MPI communicator. Each rank passes its local tensor; the
// dim arguments say along which tensor dim the shards are laid out, so the
// program builder can name the collective exactly as a sharding spec does.
// Shape errors throw TapestryError. Packing buffers grow on the first call
// of a size and are reused after, so steady-state steps do not allocate.
class Communicator {
public:
    // A duplicate of MPI_COMM_WORLD.
    static Communicator world();
    explicit Communicator(MPI_Comm comm);  // takes ownership
    Communicator(Communicator &&other) noexcept;
    Communicator &operator=(Communicator &&other) noexcept;
    Communicator(const Communicator &) = delete;
    Communicator &operator=(const Communicator &) = delete;
    ~Communicator();

    int rank() const { return m_rank; }
    int size() const { return m_size; }
    MPI_Comm handle() const { return m_comm; }
    // Ranks with the same colour form a new communicator, ordered by key.
    Communicator split(int color, int key) const;

    // x = Σ over ranks of x, in place.
    void allReduceSum(const TensorView &x);
    // x = element-wise max over ranks of x, in place (the per-token max logit
    // of a vocabulary-parallel cross-entropy); counted as an all-reduce.
    void allReduceMax(const TensorView &x);
    // full = concatenation along `dim` of every rank's `local`, in rank order.
    void allGather(const TensorView &local, const TensorView &full, std::size_t dim);
    // local = this rank's block along `dim` of Σ over ranks of `full`.
    void reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim);
    // `in` is cut into size() blocks along splitDim; block j goes to rank j;
    // `out` is the blocks received, concatenated along concatDim in rank order
    // (the resharding from a split on one dim to a split on another).
    void allToAll(const TensorView &in, const TensorView &out, std::size_t splitDim,
                  std::size_t concatDim);

    const CollectiveStats &stats() const { return m_stats; }
    void resetStats() { m_stats = {}; }

private:
    float *scratch(std::size_t which, std::int64_t count);

    MPI_Comm m_comm = MPI_COMM_NULL;
    int m_rank = 0;
    int m_size = 1;
    CollectiveStats m_stats;
    std::array<std::vector<float>, 2> m_scratch;  // send and receive packing buffers
};

} // namespace tapestry::exec
