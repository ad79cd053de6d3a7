#include "calibration.h"

#include "interpreter.h"
#include "kernels/activation.h"
#include "kernels/binary.h"
#include "kernels/layernorm.h"
#include "kernels/layout.h"
#include "kernels/softmax.h"
#include "rankmesh.h"

#include "cost/collectivetime.h"
#include "cost/costmodel.h"
#include "cost/linkfit.h"
#include "ir/error.h"
#include "sharding/meshprofile.h"

#include <cblas.h>
#include <dlfcn.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>
#include <vector>

namespace tapestry::exec {

namespace {

using Clock = std::chrono::steady_clock;
using sharding::CollectiveKind;

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
// `multiply` runs one m x k by k x n product.
template <typename Multiply>
double gemmRate(const Communicator &comm, int m, int k, int n, Multiply multiply)
{
    double best = 1e30;
    for (int r = 0; r < 4; ++r) {
        MPI_Barrier(comm.handle());
        const auto t0 = Clock::now();
        multiply();
        if (r > 0)  // the first call pays for page faults and OpenBLAS's set-up
            best = std::min(best, since(t0));
    }
    return averageOverRanks(2.0 * m * n * k / best, comm);
}

nlohmann::json gemmRates(const Communicator &comm)
{
    const int m = 2048, k = 1024, n = 2048;
    std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
        c(static_cast<std::size_t>(m) * n);
    const double f32 = gemmRate(comm, m, k, n, [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                    c.data(), n);
    });
    nlohmann::json rates{{"float32", f32}};
    // bfloat16 GEMMs exist only in OpenBLAS builds with BUILD_BFLOAT16
    // (Debian's has none): looked up at run time, measured where present.
    const auto sbgemm = reinterpret_cast<decltype(&cblas_sbgemm)>(dlsym(RTLD_DEFAULT, "cblas_sbgemm"));
    const auto tobf16 = reinterpret_cast<decltype(&cblas_sbstobf16)>(dlsym(RTLD_DEFAULT, "cblas_sbstobf16"));
    int present = sbgemm && tobf16 ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &present, 1, MPI_INT, MPI_MIN, comm.handle());
    if (present) {
        std::vector<bfloat16> a16(a.size()), b16(b.size());
        tobf16(static_cast<blasint>(a.size()), a.data(), 1, a16.data(), 1);
        tobf16(static_cast<blasint>(b.size()), b.data(), 1, b16.data(), 1);
        rates["bfloat16"] = gemmRate(comm, m, k, n, [&] {
            sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a16.data(), k, b16.data(), n, 0.0f,
                   c.data(), n);
        });
    }
    return rates;
}

// The share of `peak` one rank's sgemm reaches by size, all ranks of
// `comm` multiplying at once: square products of 16 to 1,024, each timed
// over enough calls to take a few milliseconds (the best of 3), averaged
// over ranks. Ascending in FLOPs per call, as DeviceProfile::gemmEfficiency
// holds them.
std::vector<sharding::DeviceProfile::GemmPoint> gemmEfficiency(const Communicator &comm, double peak)
{
    std::vector<sharding::DeviceProfile::GemmPoint> points;
    for (int n : {16, 32, 64, 128, 256, 512, 1024}) {
        const double flops = 2.0 * n * n * n;
        const int calls = static_cast<int>(std::max(1.0, 2e8 / flops));
        std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
        double best = 1e30;
        for (int r = 0; r < 4; ++r) {
            MPI_Barrier(comm.handle());
            const auto t0 = Clock::now();
            for (int k = 0; k < calls; ++k)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                            0.0f, c.data(), n);
            if (r > 0)  // the first round pays for page faults and OpenBLAS's set-up
                best = std::min(best, since(t0));
        }
        const double rate = averageOverRanks(flops * calls / best, comm);
        points.push_back({flops, std::clamp(rate / peak, 1e-3, 1.0)});
    }
    return points;
}

// Bytes per second each family of the executor's kernels other than GEMMs
// moves, as the cost model counts a kernel's bytes (forward its inputs and
// outputs, backward twice that): forward and backward timed together on
// 512K floats (2 MB, an activation of a small model's layer: 8 MB ones,
// past the caches, made a GPT-2 of hidden 512's transposes 50% slower
// than they ran), every rank at once, the best of a few repeats, averaged
// over ranks. A transpose is timed as a 2-D one (a tied head's weight) and
// as attention's head split, [b, s, h, d] to [b, h, s, d], together.
std::map<std::string, double> kernelBandwidths(const Communicator &comm)
{
    const std::int64_t rows = 1024, cols = 512, n = rows * cols;
    std::vector<float> x(static_cast<std::size_t>(n), 0.5f), y(x.size()), dy(x.size(), 0.25f), dx(x.size());
    std::vector<float> scale(static_cast<std::size_t>(cols), 1.0f), bias(scale.size()), dscale(scale.size()),
        dbias(scale.size()), mean(static_cast<std::size_t>(rows)), rstd(mean.size());
    const TensorView vx{x.data(), {rows, cols}}, vy{y.data(), {rows, cols}}, vdy{dy.data(), {rows, cols}},
        vdx{dx.data(), {rows, cols}}, vscale{scale.data(), {cols}}, vbias{bias.data(), {cols}},
        vdscale{dscale.data(), {cols}}, vdbias{dbias.data(), {cols}}, vmean{mean.data(), {rows}},
        vrstd{rstd.data(), {rows}};
    const std::vector<std::int64_t> swap{1, 0}, heads{0, 2, 1, 3};
    const ir::Shape split{4, 128, 8, 128}, merged{4, 8, 128, 128};
    // Seconds of `run` (forward then backward), the best of 4 after a first.
    auto best = [&](auto run) {
        double fastest = 1e30;
        for (int r = 0; r < 5; ++r) {
            MPI_Barrier(comm.handle());
            const auto t0 = Clock::now();
            run();
            if (r > 0)
                fastest = std::min(fastest, since(t0));
        }
        return fastest;
    };
    const double bytes = 3.0 * 2.0 * static_cast<double>(n) * sizeof(float);  // forward's in and out, backward's 2x
    std::map<std::string, double> out;
    out["transpose"] = 2 * bytes / best([&] {
        kernels::transposeForward({y.data(), {cols, rows}}, vx, swap);
        kernels::transposeBackward({dy.data(), {cols, rows}}, swap, vdx);
        kernels::transposeForward({y.data(), merged}, {x.data(), split}, heads);
        kernels::transposeBackward({dy.data(), merged}, heads, {dx.data(), split});
    });
    out["activation"] = bytes / best([&] {
        kernels::geluForward(kernels::GeluForm::Tanh, vy, vx);
        kernels::geluBackward(kernels::GeluForm::Tanh, vdy, vx, vdx);
    });
    out["softmax"] = bytes / best([&] {
        kernels::softmaxForward(vy, vx);
        kernels::softmaxBackward(vdy, vy, vdx);
    });
    out["normalization"] = bytes / best([&] {
        kernels::layernormForward(vy, vmean, vrstd, vx, vscale, vbias, 1e-5f);
        kernels::layernormBackward(vdy, vx, vscale, vmean, vrstd, vdx, vdscale, vdbias);
    });
    for (auto &[family, rate] : out)
        rate = averageOverRanks(rate, comm);
    return out;
}

// A training step whose kernels do next to no work: what it takes is the
// interpreter's dispatch, kernel by kernel.
constexpr const char *kLaunchWorkload = "zoo:gpt2?layers=2&hidden=8&heads=2&seq=4&batch=1&vocab=32";

// Bytes per second one rank's elementwise kernel reads and writes with all
// ranks of `comm` at it at once (they share the memory bus): the
// executor's own Add over 3 x 4M floats (48 MB, past any cache), the best
// of a few repeats, averaged over ranks.
double memoryBandwidth(const Communicator &comm)
{
    const std::int64_t n = std::int64_t{1} << 22;
    std::vector<float> a(static_cast<std::size_t>(n), 0.5f), b(static_cast<std::size_t>(n), 0.25f),
        c(static_cast<std::size_t>(n));
    const TensorView va{a.data(), {n}}, vb{b.data(), {n}}, vc{c.data(), {n}};
    double best = 1e30;
    for (int r = 0; r < 6; ++r) {
        MPI_Barrier(comm.handle());
        const auto t0 = Clock::now();
        kernels::binaryForward(kernels::BinaryOp::Add, vc, va, vb);
        if (r > 0)
            best = std::min(best, since(t0));
    }
    return averageOverRanks(3.0 * static_cast<double>(n) * sizeof(float) / best, comm);
}

// Work each rank does before a collective "in step": a GEMM of about
// kBurstSeconds, as the kernels between two collectives of a training step.
constexpr double kBurstSeconds = 5e-3;

struct Burst {
    int m = 512, n = 512, k = 1;
    std::vector<float> a, b, c;
    explicit Burst(double flopsPerSecond)
        : k(std::clamp(static_cast<int>(kBurstSeconds * flopsPerSecond / (2.0 * 512 * 512)), 1, 8192)),
          a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
          c(static_cast<std::size_t>(m) * n)
    {
    }
    void run()
    {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                    c.data(), n);
    }
};

// One collective of `count` floats (the whole buffer) on every rank of
// `comm`, median of `repeats`. Idle (no burst): back to back after a
// barrier, the slowest rank's time, as nccl-tests measures a link. In step
// (a burst): each rank computes first and times its own collective from
// when it arrives, waiting for the others included, as the executor times
// the collectives of a step; averaged over ranks.
double collectiveSeconds(Communicator &comm, CollectiveKind kind, std::int64_t count, int repeats, Burst *burst)
{
    const std::int64_t n = comm.size();
    std::vector<float> full(static_cast<std::size_t>(count), 1.0f), local(static_cast<std::size_t>(count / n), 1.0f);
    const TensorView whole{full.data(), {count}}, part{local.data(), {count / n}};
    auto once = [&] {
        switch (kind) {
        case CollectiveKind::AllReduce: comm.allReduceSum(whole); break;
        case CollectiveKind::AllGather: comm.allGather(part, whole, 0); break;
        case CollectiveKind::ReduceScatter: comm.reduceScatter(whole, part, 0); break;
        case CollectiveKind::AllToAll: break;
        }
    };
    once();
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
        MPI_Barrier(comm.handle());
        if (burst)
            burst->run();
        const auto t0 = Clock::now();
        once();
        const double t = since(t0);
        times.push_back(burst ? averageOverRanks(t, comm) : slowestRank(t, comm));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// The samples of one group of ranks: in step (each collective after a
// burst) and idle.
struct AxisSweep {
    std::vector<cost::CollectiveSample> samples, idle;
    bool withinHost = true;
};

// Sizes from one float per rank to 4 MiB, the three collectives plans use,
// after a `burst` or idle when there is none.
std::vector<cost::CollectiveSample> sweepSamples(Communicator &comm, Burst *burst)
{
    std::vector<cost::CollectiveSample> samples;
    const std::int64_t n = comm.size();
    for (CollectiveKind kind : {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter})
        for (std::int64_t perRank : {std::int64_t{1}, std::int64_t{64}, std::int64_t{1024}, std::int64_t{16384},
                                     std::int64_t{262144} / n, std::int64_t{1048576} / n}) {
            const std::int64_t count = std::max<std::int64_t>(perRank, 1) * n;
            const int repeats = count * 4 >= (1 << 20) ? 5 : 30;
            samples.push_back(
                {kind, static_cast<int>(n), count * 4, collectiveSeconds(comm, kind, count, repeats, burst)});
        }
    return samples;
}

// Two fits of a link: in step, which the profile takes, and idle. On a busy
// machine the waits of the in-step times can drown their growth with size;
// the in-step fit then keeps the idle bandwidth and fits its latency alone.
struct LinkFits {
    cost::LinkFit inStep, idle;
    bool idleBandwidth = false;
};

LinkFits fitSweeps(const std::vector<const AxisSweep *> &sweeps)
{
    std::vector<cost::CollectiveSample> samples, idle;
    for (const auto *s : sweeps) {
        samples.insert(samples.end(), s->samples.begin(), s->samples.end());
        idle.insert(idle.end(), s->idle.begin(), s->idle.end());
    }
    LinkFits fits;
    fits.idle = cost::fitLink(idle, "--calibrate");
    try {
        fits.inStep = cost::fitLink(samples, "--calibrate");
    } catch (const TapestryError &) {
        fits.inStep = cost::fitLatency(samples, fits.idle.bandwidth, "--calibrate");
        fits.idleBandwidth = true;
    }
    return fits;
}

// Sweeps `comm` in step and idle. The idle times of a machine too busy to
// show their growth with size are swept again, twice at most, before the
// error says so.
AxisSweep sweepAxis(Communicator &comm, Burst &burst)
{
    AxisSweep sweep;
    for (int attempt = 1;; ++attempt) {
        sweep.samples = sweepSamples(comm, &burst);
        sweep.idle = sweepSamples(comm, nullptr);
        try {
            fitSweeps({&sweep});
            break;
        } catch (const TapestryError &e) {
            if (attempt == 3)
                throw TapestryError(Error{"--calibrate", "idle collectives of " + std::to_string(comm.size()) +
                                                             " ranks",
                                          e.error().problem + " in 3 sweeps (is the machine busy? calibrate "
                                                              "when it is quiet)"});
        }
    }
    // Within one host when every rank's group shares memory with all of it.
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(comm.handle(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &shared);
    int sharedSize = 0;
    MPI_Comm_size(shared, &sharedSize);
    MPI_Comm_free(&shared);
    int within = sharedSize == comm.size() ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &within, 1, MPI_INT, MPI_MIN, comm.handle());
    sweep.withinHost = within == 1;
    return sweep;
}

// The whole `workload` on every rank at once: its best step time (averaged
// over ranks), and the cost model's compute time for it on one device of
// `device` as a function of the device's figures (evaluated, not assumed
// linear: the roofline takes the larger of FLOPs and bytes per op).
struct Workload {
    double measured = 0;
    ir::Graph graph;
    // The model's compute seconds on one `device`.
    double predicted(const sharding::DeviceProfile &device) const
    {
        sharding::Mesh one;
        one.axes = {{"model", 1, {"none", 1.0, 0.0, {}}}};
        one.device = device;
        const std::vector<sharding::ShardingSpec> specs(graph.tensorCount(), sharding::ShardingSpec::replicated(1));
        // As the interpreter below runs it: float32, its default optimizer.
        return cost::evaluatePlan(graph, one, specs, heldCostOptions({}, InterpreterOptions{}.optimizer)).compute;
    }
};

Workload runWorkload(const Communicator &world, const std::string &source, const io::LoadOptions &load)
{
    Workload w;
    w.graph = io::loadModel(source, load);
    Interpreter interpreter(ir::Graph(w.graph), InterpreterOptions{}, source);
    double best = 1e30;
    for (int s = 0; s < 4; ++s) {
        MPI_Barrier(world.handle());
        const auto t0 = Clock::now();
        interpreter.forward();
        interpreter.backward();
        interpreter.update();
        if (s > 0)
            best = std::min(best, since(t0));
    }
    w.measured = averageOverRanks(best, world);
    return w;
}

nlohmann::json samplesJson(const std::vector<cost::CollectiveSample> &samples)
{
    nlohmann::json j = nlohmann::json::array();
    for (const auto &s : samples)
        j.push_back({{"kind", std::string(sharding::toString(s.kind))}, {"bytes", s.bytes}, {"seconds", s.seconds}});
    return j;
}

nlohmann::json fitJson(const cost::LinkFit &fit, const std::vector<cost::CollectiveSample> &samples)
{
    return {{"latency_s", fit.latency},
            {"bandwidth_bytes_per_s", fit.bandwidth},
            {"max_relative_error", fit.maxRelativeError},
            {"samples", samplesJson(samples)}};
}

nlohmann::json sweepJson(const AxisSweep &sweep)
{
    const LinkFits fits = fitSweeps({&sweep});
    nlohmann::json j = fitJson(fits.inStep, sweep.samples);
    j["within_host"] = sweep.withinHost;
    if (fits.idleBandwidth)
        j["bandwidth_from"] = "idle (the in-step times did not grow with the message size)";
    j["idle"] = fitJson(fits.idle, sweep.idle);
    return j;
}

// One link from the sweeps of the axes it serves: all their samples fitted
// together.
sharding::LinkProfile linkOf(const std::vector<const AxisSweep *> &sweeps, const std::string &name)
{
    const LinkFits fits = fitSweeps(sweeps);
    // The profile format needs a positive latency; a fit at zero means it
    // was below what the timer resolves.
    sharding::LinkProfile link{fits.idleBandwidth ? name + ", bandwidth from the idle sweep" : name,
                               fits.inStep.bandwidth, std::max(fits.inStep.latency, 1e-9), {}};
    // Each kind's own in-step fit: an MPI's collectives are different
    // algorithms (Open MPI's reduce-scatter within one host moves its bytes
    // at half its all-reduce's rate), and one fit for all would misprice
    // a plan that mixes them. Where a kind's in-step times fit no line (a
    // busy machine's waits drown their growth with size), its latency is
    // fitted under its idle bandwidth, or the link's idle one, as the
    // link's own fit does.
    for (const auto kind : {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter}) {
        std::vector<cost::CollectiveSample> samples, idle;
        for (const auto *s : sweeps) {
            for (const auto &sample : s->samples)
                if (sample.kind == kind)
                    samples.push_back(sample);
            for (const auto &sample : s->idle)
                if (sample.kind == kind)
                    idle.push_back(sample);
        }
        cost::LinkFit fit;
        try {
            fit = cost::fitLink(samples, "--calibrate");
        } catch (const TapestryError &) {
            double bandwidth = fits.idle.bandwidth;
            try {
                bandwidth = cost::fitLink(idle, "--calibrate").bandwidth;
            } catch (const TapestryError &) {
            }
            try {
                fit = cost::fitLatency(samples, bandwidth, "--calibrate");
            } catch (const TapestryError &) {
                continue;  // the link's own fit serves this kind
            }
        }
        link.byKind[std::string(sharding::toString(kind))] = {fit.bandwidth, std::max(fit.latency, 1e-9)};
    }
    return link;
}

} // namespace

nlohmann::json calibrateMeshProfile(Communicator &world, const CalibrationOptions &o)
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
    const std::vector<std::int64_t> shape = o.mesh.empty() ? std::vector<std::int64_t>{world.size()} : o.mesh;
    RankMesh mesh(world, shape);

    sharding::MeshProfile p;
    p.name = o.name;
    p.intraNodeDevices = host.size();
    p.device.name = "CPU core (OpenBLAS, 1 thread, all ranks busy)";
    const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    p.device.memoryBytes = static_cast<std::int64_t>(memory / host.size());
    const nlohmann::json gemm = gemmRates(world);
    for (const auto &[dtype, rate] : gemm.items())
        p.device.peakFlops[dtype] = rate.get<double>();
    p.device.memoryBandwidth = memoryBandwidth(world);
    p.device.kernelBandwidth = kernelBandwidths(world);
    // Each GEMM by its size's share of peak; achievable_fraction (what the
    // FLOPs of ops other than GEMMs run at) the largest GEMM's.
    p.device.gemmEfficiency = gemmEfficiency(world, p.device.peakFlops.at("float32"));
    p.device.achievableFraction = p.device.gemmEfficiency.back().fraction;
    // The kernel launch (the interpreter's dispatch per kernel) from a
    // model too small for its kernels to take any time: what its step takes
    // beyond its roofline, per kernel.
    const Workload tiny = runWorkload(world, kLaunchWorkload, o.load);
    {
        sharding::DeviceProfile d = p.device;
        d.kernelLaunch = 0;
        const double roofline = tiny.predicted(d);
        d.kernelLaunch = 1;
        const double kernels = tiny.predicted(d) - roofline;
        p.device.kernelLaunch = kernels > 0 ? std::clamp((tiny.measured - roofline) / kernels, 0.0, 1e-3) : 0.0;
    }
    // The workload, a small training step: the GEMM table and
    // achievable_fraction scaled together (bisected: the prediction falls
    // as the scale grows) until its predicted step is its measured one, so
    // that what the roofline leaves out of a step (the executor's copies,
    // dispatch, waits) is charged in proportion to the work.
    const Workload workload = runWorkload(world, o.workload, o.load);
    {
        const sharding::DeviceProfile measured = p.device;
        auto scaled = [&](double scale) {
            sharding::DeviceProfile d = measured;
            for (auto &point : d.gemmEfficiency)
                point.fraction = std::clamp(point.fraction * scale, 1e-3, 1.0);
            d.achievableFraction = std::clamp(measured.achievableFraction * scale, 1e-3, 1.0);
            return d;
        };
        double low = 1e-3, high = 1.0;
        if (workload.predicted(scaled(high)) < workload.measured)
            for (int i = 0; i < 40; ++i) {
                const double mid = std::sqrt(low * high);
                (workload.predicted(scaled(mid)) > workload.measured ? low : high) = mid;
            }
        p.device = scaled(high);
    }

    // The links come from the in-step sweeps: on time-shared cores (more
    // ranks than cores, or a busy machine) ranks reach a step's collectives
    // apart, and the wait is part of what a step pays. The idle sweeps are
    // kept beside them in the calibration section.
    Burst burst(p.device.peakFlops.at("float32"));
    std::vector<AxisSweep> sweeps;
    for (std::size_t a = 0; a < shape.size(); ++a)
        sweeps.push_back(shape[a] > 1 ? sweepAxis(mesh.axis(a), burst) : AxisSweep{});
    std::vector<const AxisSweep *> intra, inter;
    nlohmann::json axes = nlohmann::json::array();
    for (std::size_t a = 0; a < shape.size(); ++a) {
        if (shape[a] < 2)
            continue;
        (sweeps[a].withinHost ? intra : inter).push_back(&sweeps[a]);
        nlohmann::json j = sweepJson(sweeps[a]);
        j["axis"] = a;
        j["size"] = shape[a];
        axes.push_back(j);
    }
    std::optional<AxisSweep> hostSweep, worldSweep;
    if (intra.empty()) {  // every axis crosses hosts: the ranks of one host still share a link
        hostSweep = sweepAxis(host, burst);
        intra.push_back(&*hostSweep);
    }
    if (inter.empty() && hosts > 1) {
        worldSweep = sweepAxis(world, burst);
        inter.push_back(&*worldSweep);
    }
    p.intraNode = linkOf(intra, "MPI within one host (measured)");
    p.interNode = inter.empty() ? sharding::LinkProfile{"MPI within one host (measured; one host, so no link "
                                                        "between hosts was measured)",
                                                        p.intraNode.bandwidth, p.intraNode.latency, p.intraNode.byKind}
                                : linkOf(inter, "MPI between hosts (measured)");

    char hostname[256] = {};
    gethostname(hostname, sizeof hostname - 1);
    const std::time_t now = std::time(nullptr);
    char date[32] = {};
    std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
    p.description = "measured by tapestry-exec --calibrate on " + std::string(hostname) + ", " + date + ": " +
                    std::to_string(world.size()) + " MPI ranks on " + std::to_string(hosts) +
                    " host(s), one OpenBLAS thread each, all busy at once. peak_flops: the sgemm/sbgemm rate of "
                    "one rank; memory_bandwidth_bytes_per_s: the executor's elementwise Add over 48 MB on every "
                    "rank at once; kernel_bandwidth_bytes_per_s: its transposes, GELU, softmax and layer norm, "
                    "forward and backward on 2 MB, every rank at once; kernel_launch_s: the measured training step of " + std::string(kLaunchWorkload) +
                    " beyond its roofline, per kernel; gemm_efficiency: the share of peak of square sgemm calls "
                    "from 16 to 1,024, every rank at once, and achievable_fraction (ops other than GEMMs) the "
                    "largest one's, both scaled so that the cost model's step time equals the measured training "
                    "step of " + o.workload + "; links: alpha-beta fits of all-reduce, all-gather and "
                    "reduce-scatter sweeps per mesh axis, each collective timed after a " +
                    std::to_string(static_cast<int>(kBurstSeconds * 1e3)) + " ms GEMM burst on every rank as in "
                    "a training step (see calibration: in-step and idle fits)";

    nlohmann::json doc = nlohmann::json::parse(sharding::writeMeshProfileJson(p));
    doc["placement_rule"] = "devices are numbered row-major over the mesh (last axis fastest); an axis whose devices "
                            "all sit in one node (its size times the sizes of the axes after it is at most "
                            "intra_node_devices) uses links.intra_node, any other axis links.inter_node";
    doc["calibration"] = {{"ranks", world.size()},
                          {"hosts", hosts},
                          {"mesh", RankMesh::shapeToString(shape)},
                          {"gemm_flops_per_rank", gemm},
                          {"memory_bandwidth_bytes_per_s", p.device.memoryBandwidth},
                          {"launch_workload",
                           {{"model", kLaunchWorkload},
                            {"step_time_s", tiny.measured},
                            {"predicted_s", tiny.predicted(p.device)}}},
                          {"workload",
                           {{"model", o.workload},
                            {"step_time_s", workload.measured},
                            {"predicted_s", workload.predicted(p.device)}}},
                          {"axes", axes}};
    return doc;
}

} // namespace tapestry::exec
