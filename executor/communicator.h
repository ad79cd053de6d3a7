#pragma once

#include "collectives.h"
#include "tensorview.h"

#include <mpi.h>

#include <array>
#include <vector>

namespace tapestry::exec {

class Watchdog;

// The collectives of one group of ranks (one mesh axis) on float32 tensors
// in host memory, over MPI: the CPU backend's, and the group every backend
// starts from (NCCL's unique id is broadcast over it). Owns its MPI
// communicator. Packing buffers grow on the first call of a size and are
// reused after, so steady-state steps do not allocate.
class Communicator : public Collectives {
public:
    // A duplicate of MPI_COMM_WORLD.
    static Communicator world();
    explicit Communicator(MPI_Comm comm);  // takes ownership
    Communicator(Communicator &&other) noexcept;
    Communicator &operator=(Communicator &&other) noexcept;
    Communicator(const Communicator &) = delete;
    Communicator &operator=(const Communicator &) = delete;
    ~Communicator() override;

    int rank() const override { return m_rank; }
    int size() const override { return m_size; }
    MPI_Comm handle() const { return m_comm; }
    // Ranks with the same colour form a new communicator, ordered by key;
    // it reports to the same watchdog.
    Communicator split(int color, int key) const;
    // The rank's watchdog, told which collective the rank waits in (may be null).
    void setWatchdog(Watchdog *watchdog) { m_watchdog = watchdog; }
    Watchdog *watchdog() const { return m_watchdog; }
    void barrier();

    void allReduceSum(const TensorView &x) override;
    void allReduceMax(const TensorView &x) override;
    void allGather(const TensorView &local, const TensorView &full, std::size_t dim) override;
    void reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim) override;
    void allToAll(const TensorView &in, const TensorView &out, std::size_t splitDim,
                  std::size_t concatDim) override;

    const CollectiveStats &stats() override { return m_stats; }
    void resetStats() override { m_stats = {}; }

private:
    float *scratch(std::size_t which, std::int64_t count);

    MPI_Comm m_comm = MPI_COMM_NULL;
    int m_rank = 0;
    int m_size = 1;
    CollectiveStats m_stats;
    std::array<std::vector<float>, 2> m_scratch;  // send and receive packing buffers
    Watchdog *m_watchdog = nullptr;
};

} // namespace tapestry::exec
