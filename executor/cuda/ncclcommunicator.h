#pragma once

#include "collectives.h"
#include "communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <vector>

namespace tapestry::exec {

class CudaDevice;
class Watchdog;

// The collectives of one mesh axis over NCCL, on tensors in GPU memory and
// on the device's stream: an NCCL communicator over the ranks of an MPI
// group (ncclCommInitRank, the unique id made on the group's first rank and
// broadcast over MPI). Blocks along a dim that are not contiguous are
// packed and unpacked with the device's strided copy; all-to-all is grouped
// send/recv. Each call is timed with a pair of CUDA events, settled when
// stats() is read. Errors throw gpu::DeviceError.
class NcclCommunicator final : public Collectives {
public:
    // A collective call on every rank of `group`; `device` is current.
    NcclCommunicator(const Communicator &group, CudaDevice &device);
    ~NcclCommunicator() override;
    NcclCommunicator(const NcclCommunicator &) = delete;
    NcclCommunicator &operator=(const NcclCommunicator &) = delete;

    int rank() const override { return m_rank; }
    int size() const override { return m_size; }
    void allReduceSum(const TensorView &x) override;
    void allReduceMax(const TensorView &x) override;
    void allGather(const TensorView &local, const TensorView &full, std::size_t dim) override;
    void reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim) override;
    void allToAll(
        const TensorView &in, const TensorView &out, std::size_t splitDim, std::size_t concatDim) override;
    const CollectiveStats &stats() override;
    void resetStats() override;

private:
    void begin();
    void end(Collective kind, std::int64_t bytes);
    float *scratch(std::size_t which, std::int64_t count);

    CudaDevice &m_device;
    ncclComm_t m_comm = nullptr;
    int m_rank = 0, m_size = 1;
    CollectiveStats m_stats;
    struct Timed {
        cudaEvent_t start = nullptr, stop = nullptr;
        Collective kind = Collective::AllReduce;
    };
    std::vector<Timed> m_events;  // reused; the first m_pending are unsettled
    std::size_t m_pending = 0;
    std::array<float *, 2> m_scratch {};
    std::array<std::int64_t, 2> m_scratchSize {};
    Watchdog *m_watchdog = nullptr;  // the group's, told of each collective queued
    int m_abortHook = 0;
};

// The collectives of one mesh axis whose ranks share a GPU, which NCCL
// refuses (one rank per device in a communicator): tensors are copied to
// the host, reduced or exchanged over MPI, and copied back. Slow, and meant
// for running several ranks on one GPU (tests, teaching), not for speed.
class HostStagedCollectives final : public Collectives {
public:
    HostStagedCollectives(Communicator &group, CudaDevice &device);

    int rank() const override { return m_group.rank(); }
    int size() const override { return m_group.size(); }
    void allReduceSum(const TensorView &x) override;
    void allReduceMax(const TensorView &x) override;
    void allGather(const TensorView &local, const TensorView &full, std::size_t dim) override;
    void reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim) override;
    void allToAll(
        const TensorView &in, const TensorView &out, std::size_t splitDim, std::size_t concatDim) override;
    const CollectiveStats &stats() override { return m_group.stats(); }
    void resetStats() override { m_group.resetStats(); }

private:
    TensorView toHost(const TensorView &x, std::size_t which, bool copy);
    void toDevice(const TensorView &x, const TensorView &host);

    Communicator &m_group;
    CudaDevice &m_device;
    std::array<std::vector<float>, 2> m_host;
};

} // namespace tapestry::exec
