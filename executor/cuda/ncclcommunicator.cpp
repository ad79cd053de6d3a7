#include "cuda/ncclcommunicator.h"

#include "cuda/cudacheck.h"
#include "cuda/cudadevice.h"
#include "watchdog.h"

#include <mpi.h>

#include <utility>

namespace tapestry::exec {

namespace {

constexpr std::int64_t kFloatBytes = sizeof(float);

} // namespace

NcclCommunicator::NcclCommunicator(const Communicator &group, CudaDevice &device)
    : m_device(device)
    , m_rank(group.rank())
    , m_size(group.size())
    , m_watchdog(group.watchdog())
{
    ncclUniqueId id {};
    if (m_rank == 0)
        gpu::check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group.handle());
    gpu::check(ncclCommInitRank(&m_comm, m_size, id, m_rank), "ncclCommInitRank");
    // A stalled peer leaves this rank's kernels waiting on the GPU: the
    // watchdog aborts the communicator before it ends the job.
    if (m_watchdog)
        m_abortHook = m_watchdog->addAbortHook([comm = m_comm] { ncclCommAbort(comm); });
}

NcclCommunicator::~NcclCommunicator()
{
    if (m_watchdog)
        m_watchdog->removeAbortHook(m_abortHook);
    cudaStreamSynchronize(m_device.stream());
    for (float *p : m_scratch)
        cudaFree(p);
    for (Timed &t : m_events) {
        cudaEventDestroy(t.start);
        cudaEventDestroy(t.stop);
    }
    ncclCommDestroy(m_comm);
}

void NcclCommunicator::begin()
{
    if (m_pending == m_events.size()) {
        Timed t;
        gpu::check(cudaEventCreate(&t.start), "cudaEventCreate");
        gpu::check(cudaEventCreate(&t.stop), "cudaEventCreate");
        m_events.push_back(t);
    }
    gpu::check(cudaEventRecord(m_events[m_pending].start, m_device.stream()), "cudaEventRecord");
}

void NcclCommunicator::end(Collective kind, std::int64_t bytes)
{
    Timed &t = m_events[m_pending++];
    t.kind = kind;
    if (m_watchdog)
        m_watchdog->issued(kind);
    gpu::check(cudaEventRecord(t.stop, m_device.stream()), "cudaEventRecord");
    m_stats[kind].calls += 1;
    m_stats[kind].bytes += bytes;
}

const CollectiveStats &NcclCommunicator::stats()
{
    for (std::size_t i = 0; i < m_pending; ++i) {
        float ms = 0.0f;
        gpu::check(cudaEventSynchronize(m_events[i].stop), "cudaEventSynchronize");
        gpu::check(cudaEventElapsedTime(&ms, m_events[i].start, m_events[i].stop), "cudaEventElapsedTime");
        m_stats[m_events[i].kind].seconds += ms * 1e-3;
    }
    m_pending = 0;
    return m_stats;
}

void NcclCommunicator::resetStats()
{
    m_pending = 0;
    m_stats = {};
}

float *NcclCommunicator::scratch(std::size_t which, std::int64_t count)
{
    if (m_scratchSize[which] < count) {
        gpu::check(cudaStreamSynchronize(m_device.stream()), "cudaStreamSynchronize");
        cudaFree(m_scratch[which]);
        m_scratch[which] = nullptr;
        void *p = nullptr;
        gpu::check(
            cudaMalloc(&p, static_cast<std::size_t>(count) * sizeof(float)), "cudaMalloc (NCCL scratch)");
        m_scratch[which] = static_cast<float *>(p);
        m_scratchSize[which] = count;
    }
    return m_scratch[which];
}

void NcclCommunicator::allReduceSum(const TensorView &x)
{
    begin();
    gpu::check(ncclAllReduce(x.data, x.data, static_cast<std::size_t>(x.size()), ncclFloat, ncclSum, m_comm,
                   m_device.stream()),
        "ncclAllReduce");
    end(Collective::AllReduce, x.size() * kFloatBytes);
}

void NcclCommunicator::allReduceMax(const TensorView &x)
{
    begin();
    gpu::check(ncclAllReduce(x.data, x.data, static_cast<std::size_t>(x.size()), ncclFloat, ncclMax, m_comm,
                   m_device.stream()),
        "ncclAllReduce");
    end(Collective::AllReduce, x.size() * kFloatBytes);
}

void NcclCommunicator::allGather(const TensorView &local, const TensorView &full, std::size_t dim)
{
    collective::checkBlocks("all-gather", local.shape, full.shape, dim, m_size);
    const std::int64_t n = local.size();
    begin();
    if (collective::blocksContiguous(full.shape, dim)) {
        gpu::check(ncclAllGather(local.data, full.data, static_cast<std::size_t>(n), ncclFloat, m_comm,
                       m_device.stream()),
            "ncclAllGather");
    } else {
        float *packed = scratch(1, n * m_size);
        gpu::check(ncclAllGather(
                       local.data, packed, static_cast<std::size_t>(n), ncclFloat, m_comm, m_device.stream()),
            "ncclAllGather");
        std::int64_t first = 0;
        for (int j = 0; j < m_size; ++j) {
            kernels::StridedBlock b = collective::blockAlong(full.shape, dim, m_size, first, j);
            std::swap(b.srcStride, b.dstStride);
            m_device.stridedCopy(b, full.data + first, packed + j * n, false);
        }
    }
    end(Collective::AllGather, full.size() * kFloatBytes);
}

void NcclCommunicator::reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim)
{
    collective::checkBlocks("reduce-scatter", local.shape, full.shape, dim, m_size);
    const std::int64_t n = local.size();
    begin();
    const float *send = full.data;
    if (!collective::blocksContiguous(full.shape, dim)) {
        float *packed = scratch(0, n * m_size);
        std::int64_t first = 0;
        for (int j = 0; j < m_size; ++j) {
            const kernels::StridedBlock b = collective::blockAlong(full.shape, dim, m_size, first, j);
            m_device.stridedCopy(b, packed + j * n, full.data + first, false);
        }
        send = packed;
    }
    gpu::check(ncclReduceScatter(send, local.data, static_cast<std::size_t>(n), ncclFloat, ncclSum, m_comm,
                   m_device.stream()),
        "ncclReduceScatter");
    end(Collective::ReduceScatter, full.size() * kFloatBytes);
}

void NcclCommunicator::allToAll(
    const TensorView &in, const TensorView &out, std::size_t splitDim, std::size_t concatDim)
{
    collective::checkAllToAll(in.shape, out.shape, splitDim, concatDim, m_size);
    const std::int64_t n = in.size() / m_size;
    begin();
    float *send = scratch(0, in.size());
    float *recv = scratch(1, in.size());
    std::int64_t first = 0;
    for (int j = 0; j < m_size; ++j) {
        const kernels::StridedBlock b = collective::blockAlong(in.shape, splitDim, m_size, first, j);
        m_device.stridedCopy(b, send + j * n, in.data + first, false);
    }
    gpu::check(ncclGroupStart(), "ncclGroupStart");
    for (int j = 0; j < m_size; ++j) {
        gpu::check(ncclSend(send + j * n, static_cast<std::size_t>(n), ncclFloat, j, m_comm, m_device.stream()),
            "ncclSend");
        gpu::check(ncclRecv(recv + j * n, static_cast<std::size_t>(n), ncclFloat, j, m_comm, m_device.stream()),
            "ncclRecv");
    }
    gpu::check(ncclGroupEnd(), "ncclGroupEnd");
    for (int j = 0; j < m_size; ++j) {
        kernels::StridedBlock b = collective::blockAlong(out.shape, concatDim, m_size, first, j);
        std::swap(b.srcStride, b.dstStride);
        m_device.stridedCopy(b, out.data + first, recv + j * n, false);
    }
    end(Collective::AllToAll, in.size() * kFloatBytes);
}

HostStagedCollectives::HostStagedCollectives(Communicator &group, CudaDevice &device)
    : m_group(group)
    , m_device(device)
{
}

TensorView HostStagedCollectives::toHost(const TensorView &x, std::size_t which, bool copy)
{
    m_host[which].resize(static_cast<std::size_t>(x.size()));
    const TensorView host {m_host[which].data(), x.shape};
    if (copy)
        m_device.download(host.data, x);
    return host;
}

void HostStagedCollectives::toDevice(const TensorView &x, const TensorView &host)
{
    m_device.upload(x, host.data);
}

void HostStagedCollectives::allReduceSum(const TensorView &x)
{
    const TensorView h = toHost(x, 0, true);
    m_group.allReduceSum(h);
    toDevice(x, h);
}

void HostStagedCollectives::allReduceMax(const TensorView &x)
{
    const TensorView h = toHost(x, 0, true);
    m_group.allReduceMax(h);
    toDevice(x, h);
}

void HostStagedCollectives::allGather(const TensorView &local, const TensorView &full, std::size_t dim)
{
    const TensorView l = toHost(local, 0, true), f = toHost(full, 1, false);
    m_group.allGather(l, f, dim);
    toDevice(full, f);
}

void HostStagedCollectives::reduceScatter(const TensorView &full, const TensorView &local, std::size_t dim)
{
    const TensorView f = toHost(full, 0, true), l = toHost(local, 1, false);
    m_group.reduceScatter(f, l, dim);
    toDevice(local, l);
}

void HostStagedCollectives::allToAll(
    const TensorView &in, const TensorView &out, std::size_t splitDim, std::size_t concatDim)
{
    const TensorView i = toHost(in, 0, true), o = toHost(out, 1, false);
    m_group.allToAll(i, o, splitDim, concatDim);
    toDevice(out, o);
}

} // namespace tapestry::exec
