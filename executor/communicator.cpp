#include "communicator.h"

#include "kernels/strided.h"
#include "watchdog.h"

#include <utility>

namespace tapestry::exec {

namespace {

constexpr std::int64_t kFloatBytes = sizeof(float);

int mpiCount(std::int64_t n, std::string_view what)
{
    if (n > INT32_MAX)
        collective::shapeError(what, "more than 2^31 elements in one call");
    return static_cast<int>(n);
}

} // namespace

Communicator Communicator::world()
{
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    return Communicator(comm);
}

Communicator::Communicator(MPI_Comm comm) : m_comm(comm)
{
    MPI_Comm_rank(m_comm, &m_rank);
    MPI_Comm_size(m_comm, &m_size);
}

Communicator::Communicator(Communicator &&other) noexcept
    : m_comm(std::exchange(other.m_comm, MPI_COMM_NULL)), m_rank(other.m_rank),
      m_size(other.m_size), m_stats(other.m_stats), m_scratch(std::move(other.m_scratch)),
      m_watchdog(other.m_watchdog)
{
}

Communicator &Communicator::operator=(Communicator &&other) noexcept
{
    if (this != &other) {
        if (m_comm != MPI_COMM_NULL)
            MPI_Comm_free(&m_comm);
        m_comm = std::exchange(other.m_comm, MPI_COMM_NULL);
        m_rank = other.m_rank;
        m_size = other.m_size;
        m_stats = other.m_stats;
        m_scratch = std::move(other.m_scratch);
        m_watchdog = other.m_watchdog;
    }
    return *this;
}

Communicator::~Communicator()
{
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (m_comm != MPI_COMM_NULL && !finalized)
        MPI_Comm_free(&m_comm);
}

Communicator Communicator::split(int color, int key) const
{
    MPI_Comm comm;
    MPI_Comm_split(m_comm, color, key, &comm);
    Communicator part(comm);
    part.m_watchdog = m_watchdog;
    return part;
}

void Communicator::barrier()
{
    if (m_watchdog)
        m_watchdog->enterBarrier();
    MPI_Barrier(m_comm);
    if (m_watchdog)
        m_watchdog->leave();
}

float *Communicator::scratch(std::size_t which, std::int64_t count)
{
    auto &buffer = m_scratch[which];
    if (buffer.size() < static_cast<std::size_t>(count))
        buffer.resize(static_cast<std::size_t>(count));
    return buffer.data();
}

void Communicator::allReduceSum(const TensorView &x)
{
    const Watchdog::Waiting waiting(m_watchdog, Collective::AllReduce);
    const double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, x.data, mpiCount(x.size(), "all-reduce"), MPI_FLOAT, MPI_SUM,
                  m_comm);
    auto &e = m_stats[Collective::AllReduce];
    e.seconds += MPI_Wtime() - t0;
    e.calls += 1;
    e.bytes += x.size() * kFloatBytes;
}

void Communicator::allReduceMax(const TensorView &x)
{
    const Watchdog::Waiting waiting(m_watchdog, Collective::AllReduce);
    const double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, x.data, mpiCount(x.size(), "all-reduce"), MPI_FLOAT, MPI_MAX,
                  m_comm);
    auto &e = m_stats[Collective::AllReduce];
    e.seconds += MPI_Wtime() - t0;
    e.calls += 1;
    e.bytes += x.size() * kFloatBytes;
}

void Communicator::allGather(const TensorView &local, const TensorView &full, std::size_t dim)
{
    collective::checkBlocks("all-gather", local.shape, full.shape, dim, m_size);
    const Watchdog::Waiting waiting(m_watchdog, Collective::AllGather);
    const double t0 = MPI_Wtime();
    const std::int64_t n = local.size();
    // MPI lays the gathered blocks out one after another (a new leading dim);
    // a dim other than 0, with more than one row before it, needs them
    // interleaved back into place.
    const bool contiguous = collective::blocksContiguous(full.shape, dim);
    if (contiguous) {
        MPI_Allgather(local.data, mpiCount(n, "all-gather"), MPI_FLOAT, full.data,
                      mpiCount(n, "all-gather"), MPI_FLOAT, m_comm);
    } else {
        float *packed = scratch(1, n * m_size);
        MPI_Allgather(local.data, mpiCount(n, "all-gather"), MPI_FLOAT, packed,
                      mpiCount(n, "all-gather"), MPI_FLOAT, m_comm);
        std::int64_t first = 0;
        for (int j = 0; j < m_size; ++j) {
            kernels::StridedBlock b = collective::blockAlong(full.shape, dim, m_size, first, j);
            std::swap(b.srcStride, b.dstStride);
            kernels::stridedCopy(b, full.data + first, packed + j * n, false);
        }
    }
    auto &e = m_stats[Collective::AllGather];
    e.seconds += MPI_Wtime() - t0;
    e.calls += 1;
    e.bytes += full.size() * kFloatBytes;
}

void Communicator::reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim)
{
    collective::checkBlocks("reduce-scatter", local.shape, full.shape, dim, m_size);
    const Watchdog::Waiting waiting(m_watchdog, Collective::ReduceScatter);
    const double t0 = MPI_Wtime();
    const std::int64_t n = local.size();
    const bool contiguous = collective::blocksContiguous(full.shape, dim);
    const float *send = full.data;
    if (!contiguous) {
        float *packed = scratch(0, n * m_size);
        std::int64_t first = 0;
        for (int j = 0; j < m_size; ++j) {
            const kernels::StridedBlock b = collective::blockAlong(full.shape, dim, m_size, first, j);
            kernels::stridedCopy(b, packed + j * n, full.data + first, false);
        }
        send = packed;
    }
    MPI_Reduce_scatter_block(send, local.data, mpiCount(n, "reduce-scatter"), MPI_FLOAT, MPI_SUM,
                             m_comm);
    auto &e = m_stats[Collective::ReduceScatter];
    e.seconds += MPI_Wtime() - t0;
    e.calls += 1;
    e.bytes += full.size() * kFloatBytes;
}

void Communicator::allToAll(const TensorView &in, const TensorView &out, std::size_t splitDim,
                            std::size_t concatDim)
{
    collective::checkAllToAll(in.shape, out.shape, splitDim, concatDim, m_size);
    const Watchdog::Waiting waiting(m_watchdog, Collective::AllToAll);
    const double t0 = MPI_Wtime();
    const std::int64_t n = in.size() / m_size;
    float *send = scratch(0, in.size());
    float *recv = scratch(1, in.size());
    std::int64_t first = 0;
    for (int j = 0; j < m_size; ++j) {
        const kernels::StridedBlock b = collective::blockAlong(in.shape, splitDim, m_size, first, j);
        kernels::stridedCopy(b, send + j * n, in.data + first, false);
    }
    MPI_Alltoall(send, mpiCount(n, "all-to-all"), MPI_FLOAT, recv, mpiCount(n, "all-to-all"),
                 MPI_FLOAT, m_comm);
    for (int j = 0; j < m_size; ++j) {
        kernels::StridedBlock b = collective::blockAlong(out.shape, concatDim, m_size, first, j);
        std::swap(b.srcStride, b.dstStride);
        kernels::stridedCopy(b, out.data + first, recv + j * n, false);
    }
    auto &e = m_stats[Collective::AllToAll];
    e.seconds += MPI_Wtime() - t0;
    e.calls += 1;
    e.bytes += in.size() * kFloatBytes;
}

} // namespace tapestry::exec
