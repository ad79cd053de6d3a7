#include "calibration.h"

#include "ir/error.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

namespace tapestry::exec {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0)
{
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

double averageOverRanks(double value, const Communicator &comm)
{
    double sum = 0.0;
    MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, comm.handle());
    return sum / comm.size();
}

double slowestRank(double value, const Communicator &comm)
{
    double most = 0.0;
    MPI_Allreduce(&value, &most, 1, MPI_DOUBLE, MPI_MAX, comm.handle());
    return most;
}

// FLOP/s of one rank with all ranks of `comm` multiplying at once, as the
// ranks of a plan do; the best of a few repeats, averaged over ranks.
double gemmRate(const Communicator &comm)
{
    const int m = 2048, k = 1024, n = 2048;
    std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
        c(static_cast<std::size_t>(m) * n);
    double best = 1e30;
    for (int r = 0; r < 4; ++r) {
        MPI_Barrier(comm.handle());
        const auto t0 = Clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                    c.data(), n);
        if (r > 0)  // the first call pays for page faults and OpenBLAS's set-up
            best = std::min(best, since(t0));
    }
    return averageOverRanks(2.0 * m * n * k / best, comm);
}

// Seconds of one all-reduce of `count` floats on every rank of `comm` (the
// slowest rank's, median of `repeats`).
double allReduceSeconds(Communicator &comm, std::int64_t count, int repeats)
{
    std::vector<float> data(static_cast<std::size_t>(count), 1.0f);
    const TensorView x{data.data(), {count}};
    comm.allReduceSum(x);
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        MPI_Barrier(comm.handle());
        const auto t0 = Clock::now();
        comm.allReduceSum(x);
        times.push_back(slowestRank(since(t0), comm));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// Latency per ring step and bus bandwidth, from a 4-byte and a 16 MiB
// all-reduce: time = latency x 2(n-1) + bytes x 2(n-1)/n / bandwidth.
nlohmann::json measureLink(Communicator &comm, const std::string &name)
{
    const int n = comm.size();
    const std::int64_t large = std::int64_t{4} << 20;
    const double small = allReduceSeconds(comm, 1, 200);
    const double big = allReduceSeconds(comm, large, 5);
    const double latency = small / (2.0 * (n - 1));
    const double wire = static_cast<double>(large) * 4.0 * 2.0 * (n - 1) / n;
    const double bandwidth = wire / std::max(big - small, 1e-9);
    return {{"name", name}, {"bandwidth_bytes_per_s", bandwidth}, {"latency_s", latency}};
}

} // namespace

nlohmann::json calibrateMeshProfile(Communicator &world, const std::string &name)
{
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &shared);
    Communicator host(shared);
    int hosts = host.rank() == 0 ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &hosts, 1, MPI_INT, MPI_SUM, world.handle());
    int fewest = host.size();
    MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_INT, MPI_MIN, world.handle());
    if (fewest < 2)
        throw TapestryError(Error{"--calibrate", {}, "needs at least 2 ranks on every host to measure its link "
                                                     "(start it with mpirun -np 2 or more per host)"});

    const double flops = gemmRate(world);
    nlohmann::json intra = measureLink(host, "MPI within one host (measured)");
    nlohmann::json inter = hosts > 1 ? measureLink(world, "MPI between hosts (measured)")
                                     : nlohmann::json{{"name", "MPI within one host (measured; one host, so "
                                                               "no link between hosts was measured)"},
                                                      {"bandwidth_bytes_per_s", intra["bandwidth_bytes_per_s"]},
                                                      {"latency_s", intra["latency_s"]}};

    char hostname[256] = {};
    gethostname(hostname, sizeof hostname - 1);
    const std::time_t now = std::time(nullptr);
    char date[32] = {};
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    return {{"format", "tapestry.mesh-profile"},
            {"version", 1},
            {"name", name},
            {"description", "measured by tapestry-exec --calibrate on " + std::string(hostname) + ", " + date +
                                ": " + std::to_string(world.size()) + " MPI ranks on " + std::to_string(hosts) +
                                " host(s), one OpenBLAS thread each; peak_flops is the sgemm rate one rank "
                                "reached while all ranks multiplied at once, hence achievable_fraction 1"},
            {"intra_node_devices", host.size()},
            {"placement_rule", "devices are numbered row-major over the mesh (last axis fastest); an axis whose "
                               "devices all sit in one node (its size times the sizes of the axes after it is "
                               "at most intra_node_devices) uses links.intra_node, any other axis "
                               "links.inter_node"},
            {"device",
             {{"name", "CPU core (OpenBLAS, 1 thread)"},
              {"memory_bytes", static_cast<std::int64_t>(memory / host.size())},
              {"peak_flops", {{"float32", flops}}},
              {"achievable_fraction", 1.0}}},
            {"links", {{"intra_node", intra}, {"inter_node", inter}}}};
}

} // namespace tapestry::exec
