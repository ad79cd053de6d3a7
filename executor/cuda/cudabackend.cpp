#include "cuda/cudabackend.h"

#include "cuda/cudacheck.h"
#include "cuda/cudadevice.h"
#include "cuda/localrank.h"
#include "cuda/ncclcommunicator.h"

#include "ir/error.h"

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstdlib>
#include <iostream>

namespace tapestry::exec {

namespace {

class CudaBackend final : public Backend {
public:
    CudaBackend(int ordinal, Precision precision, int worldRank)
        : m_device(ordinal, precision)
        , m_worldRank(worldRank)
    {
    }

    std::string_view name() const override { return "cuda"; }
    Device &device() override { return m_device; }

    std::unique_ptr<Collectives> collectivesFor(Communicator &axis) override
    {
        // NCCL takes one rank per GPU in a communicator: where ranks of the
        // axis share one, its collectives go through the host over MPI.
        const std::string mine = m_device.uuid();
        std::string all(mine.size() * static_cast<std::size_t>(axis.size()), '\0');
        MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
            static_cast<int>(mine.size()), MPI_BYTE, axis.handle());
        bool shared = false;
        for (int j = 0; j < axis.size(); ++j)
            shared = shared || (j != axis.rank() && all.compare(j * mine.size(), mine.size(), mine) == 0);
        int anyShared = shared ? 1 : 0;
        MPI_Allreduce(MPI_IN_PLACE, &anyShared, 1, MPI_INT, MPI_MAX, axis.handle());
        if (anyShared) {
            if (m_worldRank == 0 && !m_warned) {
                std::cerr << "tapestry-exec: ranks share a GPU, which NCCL refuses: their collectives go "
                             "through host memory over MPI\n";
                m_warned = true;
            }
            return std::make_unique<HostStagedCollectives>(axis, m_device);
        }
        return std::make_unique<NcclCommunicator>(axis, m_device);
    }

private:
    CudaDevice m_device;
    int m_worldRank = 0;
    bool m_warned = false;
};

// The rank among the ranks on this host, from MPI itself.
int sharedMemoryRank(const Communicator &world)
{
    MPI_Comm host;
    MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &host);
    int rank = 0;
    MPI_Comm_rank(host, &rank);
    MPI_Comm_free(&host);
    return rank;
}

} // namespace

int visibleGpuCount()
{
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::string whyNoGpu()
{
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaSuccess)
        return count == 0 ? "cudaGetDeviceCount reports 0 devices" : "a GPU is visible";
    // Without any NVIDIA driver the runtime reports an old driver; say both.
    const std::string detail = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    if (status == cudaErrorInsufficientDriver)
        return "no NVIDIA driver for this CUDA runtime, or none at all; " + detail;
    return detail;
}

std::unique_ptr<Backend> makeCudaBackend(const Communicator &world, Precision precision)
{
    const int gpus = visibleGpuCount();
    if (gpus == 0)
        throw TapestryError(Error {"--backend cuda", {}, "no GPU visible (" + whyNoGpu() + ")"});
    // Every rank takes part in the split, whether or not it needs it.
    const int fromMpi = sharedMemoryRank(world);
    const int local =
        gpu::localRankFromEnvironment([](const char *n) { return std::getenv(n); }).value_or(fromMpi);
    return std::make_unique<CudaBackend>(gpu::deviceForLocalRank(local, gpus), precision, world.rank());
}

} // namespace tapestry::exec
