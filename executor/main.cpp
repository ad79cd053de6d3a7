#include "backend.h"
#include "calibration.h"
#include "collectivesselftest.h"
#include "communicator.h"
#include "interpreter.h"
#include "planrun.h"
#include "rankmesh.h"
#include "reportlink.h"
#include "steploop.h"
#include "watchdog.h"

#ifdef TAPESTRY_HAVE_CUDA
#include "cuda/cudabackend.h"
#endif

#include "io/files.h"
#include "io/modelloader.h"
#include "ir/error.h"
#include "plan/runreport.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

namespace {

using namespace tapestry;

constexpr const char *kUsage =
    "usage: mpirun -np N tapestry-exec --model MODEL --plan plan.json [--steps K] [--warmup W]\n"
    "                     [--verify] [--batch B --seq S] [--report -|tcp://HOST:PORT]\n"
    "                     [--mesh-profile P] [--backend cpu|cuda] [--precision fp32|fp16|bf16]\n"
    "                     [--step-timeout SECONDS]\n"
    "       mpirun -np N tapestry-exec --model MODEL [--batch B] [--seq S]\n"
    "       tapestry-exec --model MODEL --steps K [--seed S] [--optimizer sgd|adam] [--lr X]\n"
    "       mpirun -np N tapestry-exec --self-test collectives --mesh AxB [--fail-rank R]\n"
    "                     [--backend cpu|cuda]\n"
    "       mpirun -np N tapestry-exec --calibrate FILE|- [--name NAME] [--mesh AxB] [--model M]\n"
    "                     [--report ...]\n"
    "\n"
    "  --model MODEL       a zoo preset (zoo:gpt2?layers=2), .onnx, .json or config.json\n"
    "  --batch B, --seq S  bind the batch and sequence dims\n"
    "  --plan FILE         run the tapestry.plan on the ranks; its mesh must have one\n"
    "                      device per rank. Measures K steps (default 5) after W warm-up\n"
    "                      steps (default 1); progress on stderr\n"
    "  --verify            check the first step against the unsharded reference on rank 0:\n"
    "                      loss, outputs and every weight gradient, then every parameter\n"
    "                      after the update and the next loss, within relative 1e-4\n"
    "                      (fp16 GEMMs 1e-2, bf16 2e-2); exit 1 when they differ\n"
    "  --report -          JSON lines on stdout: hello, start, one per step (times,\n"
    "                      collectives, bytes, tokens/s, GFLOP/s per rank), summary with the\n"
    "                      verdict, the cost model's predicted step time and TFLOP/s per rank\n"
    "                      against the device's peak (executor/REPORT.md)\n"
    "  --report tcp://HOST:PORT  the same lines to a report server (the studio); rank 0\n"
    "                      connects before any work and its hello carries the run's token,\n"
    "                      read from the environment variable TAPESTRY_REPORT_TOKEN (mpirun\n"
    "                      passes it to ranks on other hosts with -x TAPESTRY_REPORT_TOKEN).\n"
    "                      The older tcp://HOST:PORT?token=T still works, with a warning: a\n"
    "                      command line is readable by every user of the machine (ps), who\n"
    "                      could take the run's place at the server\n"
    "  --step-timeout S    end the job when a step (warm-up, measured, or the verification\n"
    "                      step at ranks + 1 times S) takes longer than S seconds: a rank has\n"
    "                      stalled or died and the others wait in a collective. The lowest\n"
    "                      waiting rank's watchdog says, in one line, the step and the\n"
    "                      collective it waits in, and aborts the job (exit 1). Default: 10\n"
    "                      times the slower of the predicted step time and the slowest step\n"
    "                      so far, at least 60 s\n"
    "  --mesh-profile P    profile for the predicted step time and the device's peak\n"
    "                      (default cpu-loopback; on cuda dgx-a100 for an A100,\n"
    "                      dgx-h200 for an H200, else dgx-h100)\n"
    "  --backend B         cpu: host memory, OpenBLAS, MPI; cuda: one GPU per rank (chosen by\n"
    "                      the local rank, OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID, modulo\n"
    "                      the GPUs visible, so ranks may share one), cuBLAS, NCCL per mesh\n"
    "                      axis. Default: cuda when built with it and a GPU is visible, else cpu\n"
    "  --precision P       the GEMMs' math on cuda: fp32 (default), fp16 or bf16 on tensor\n"
    "                      cores (tensors stay float32); the cpu backend computes in fp32\n"
    "  --quiet             no progress lines on stderr (errors still are)\n"
    "  --test-drop-collective N  test aid: skip the plan's N-th all-reduce of each step\n"
    "                      (1-based), a deliberately wrong plan that --verify must catch\n"
    "  --steps K           without --plan: train K steps on one rank, the single-process reference;\n"
    "                      the report's JSON lines on stdout (hello, start, one per step with\n"
    "                      loss, times, tokens/s and GFLOP/s, summary). A graph without a loss\n"
    "                      trains on the sum of squares of its outputs.\n"
    "  --seed S            seed of the parameters and the batch (default 1)\n"
    "  --optimizer O       sgd (default) or adam\n"
    "  --lr X              learning rate (default 0.01 for sgd, 0.001 for adam)\n"
    "  --self-test collectives  check all-reduce, all-gather, reduce-scatter and\n"
    "                      all-to-all on every axis of --mesh (its size is the rank count)\n"
    "  --fail-rank R       with --self-test: rank R fails on purpose (the job must end)\n"
    "  --calibrate FILE    measure this machine with all ranks busy and write a\n"
    "                      tapestry.mesh-profile to FILE ('-': stdout); 2+ ranks per host:\n"
    "                      GEMM FLOP/s per rank (float32 sgemm; bfloat16 sbgemm where\n"
    "                      OpenBLAS has it), the\n"
    "                      fraction of it a whole training step of --model reaches as the\n"
    "                      cost model counts FLOPs (default a 1-layer GPT-2, hidden 256),\n"
    "                      and per axis of --mesh (default: all ranks on one axis)\n"
    "                      all-reduce, all-gather and reduce-scatter over a sweep of sizes\n"
    "                      fitted to latency and bus bandwidth. Written to\n"
    "                      ~/.local/share/tapestry/meshes/NAME.json, the profile is offered\n"
    "                      by name to tapestry-cli --mesh-profile and the studio\n"
    "  --name NAME         the profile's name (default: FILE's stem, or 'calibrated')\n"
    "\n"
    "OpenBLAS runs one thread per rank unless OPENBLAS_NUM_THREADS says otherwise.\n"
    "Exit codes: 0 success, 1 a failed check, 2 bad input or usage.\n";

struct Options {
    std::string model;
    io::LoadOptions load;
    std::optional<std::int64_t> steps;
    std::uint64_t seed = 1;
    exec::Optimizer optimizer = exec::Optimizer::Sgd;
    std::optional<float> learningRate;
    std::string selfTest;
    std::string calibrate;
    std::string profileName;
    std::string mesh;
    int failRank = -1;
    std::string plan;
    std::optional<std::int64_t> warmup;
    bool verify = false;
    std::string report;
    exec::ReportAddress reportAddress;
    std::optional<std::string> meshProfile;
    std::string backend;  // "cpu", "cuda", or empty: chosen by what is there
    exec::Precision precision = exec::Precision::F32;
    int dropCollective = 0;
    double stepTimeout = 0.0;
    bool quiet = false;
    bool help = false;
};

struct UsageError {
    std::string message;
};

std::int64_t parseInt(const std::string &option, const std::string &value, std::int64_t min)
{
    std::size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(value, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (value.empty() || used != value.size() || v < min)
        throw UsageError{option + " expects an integer >= " + std::to_string(min) + ", got '" +
                         value + "'"};
    return v;
}

Options parseOptions(int argc, char **argv)
{
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc)
                throw UsageError{arg + " needs a value"};
            return argv[++i];
        };
        if (arg == "--help" || arg == "-h")
            o.help = true;
        else if (arg == "--model")
            o.model = value();
        else if (arg == "--batch")
            o.load.batch = parseInt(arg, value(), 1);
        else if (arg == "--seq")
            o.load.seq = parseInt(arg, value(), 1);
        else if (arg == "--steps")
            o.steps = parseInt(arg, value(), 1);
        else if (arg == "--seed")
            o.seed = static_cast<std::uint64_t>(parseInt(arg, value(), 0));
        else if (arg == "--optimizer") {
            const std::string v = value();
            if (v != "sgd" && v != "adam")
                throw UsageError{"--optimizer expects sgd or adam, got '" + v + "'"};
            o.optimizer = v == "adam" ? exec::Optimizer::Adam : exec::Optimizer::Sgd;
        } else if (arg == "--lr") {
            const std::string v = value();
            char *end = nullptr;
            const float lr = std::strtof(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(lr > 0.0f))
                throw UsageError{"--lr expects a positive number, got '" + v + "'"};
            o.learningRate = lr;
        } else if (arg == "--self-test") {
            o.selfTest = value();
            if (o.selfTest != "collectives")
                throw UsageError{"--self-test knows 'collectives', got '" + o.selfTest + "'"};
        } else if (arg == "--calibrate")
            o.calibrate = value();
        else if (arg == "--name")
            o.profileName = value();
        else if (arg == "--mesh")
            o.mesh = value();
        else if (arg == "--fail-rank")
            o.failRank = static_cast<int>(parseInt(arg, value(), 0));
        else if (arg == "--plan")
            o.plan = value();
        else if (arg == "--warmup")
            o.warmup = parseInt(arg, value(), 0);
        else if (arg == "--verify")
            o.verify = true;
        else if (arg == "--quiet")
            o.quiet = true;
        else if (arg == "--report") {
            o.report = value();
            try {
                o.reportAddress = exec::parseReportAddress(o.report, std::getenv(exec::kReportTokenVariable));
            } catch (const TapestryError &e) {
                throw UsageError{e.what()};
            }
        } else if (arg == "--mesh-profile")
            o.meshProfile = value();
        else if (arg == "--backend") {
            o.backend = value();
            if (o.backend != "cpu" && o.backend != "cuda")
                throw UsageError{"--backend expects cpu or cuda, got '" + o.backend + "'"};
        } else if (arg == "--precision") {
            const std::string v = value();
            const auto p = exec::parsePrecision(v);
            if (!p)
                throw UsageError{"--precision expects fp32, fp16 or bf16, got '" + v + "'"};
            o.precision = *p;
        } else if (arg == "--step-timeout") {
            const std::string v = value();
            char *end = nullptr;
            const double seconds = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(seconds > 0.0) || !std::isfinite(seconds))
                throw UsageError{"--step-timeout expects a number of seconds above 0, got '" + v + "'"};
            o.stepTimeout = seconds;
        } else if (arg == "--test-drop-collective")
            o.dropCollective = static_cast<int>(parseInt(arg, value(), 1));
        else
            throw UsageError{"unknown option '" + arg + "' (see --help)"};
    }
    if (o.help)
        return o;
    if (o.plan.empty() && o.selfTest.empty() && (o.backend == "cuda" || o.precision != exec::Precision::F32))
        throw UsageError{"--backend cuda and --precision go with --plan or --self-test; "
                         "--steps and --calibrate run on the CPU"};
    if (!o.plan.empty() && !o.selfTest.empty())
        throw UsageError{"--plan and --self-test run apart"};
    if (!o.calibrate.empty()) {
        if (!o.selfTest.empty() || !o.plan.empty() || o.steps)
            throw UsageError{"--calibrate runs alone: no --plan, --steps or --self-test"};
        if (o.calibrate == "-" && o.report == "-")
            throw UsageError{"--calibrate - and --report - would both write to stdout: give one a file or address"};
    } else if (!o.profileName.empty()) {
        throw UsageError{"--name only goes with --calibrate"};
    } else if (!o.selfTest.empty()) {
        if (o.mesh.empty())
            throw UsageError{"--self-test collectives needs --mesh (e.g. 2x2)"};
        if (!o.model.empty() || o.steps)
            throw UsageError{"--self-test runs without --model and --steps"};
    } else {
        if (o.model.empty())
            throw UsageError{"--model MODEL is required"};
        if (o.failRank >= 0)
            throw UsageError{"--fail-rank only goes with --self-test"};
        if (!o.mesh.empty())
            throw UsageError{"--mesh only goes with --self-test and --calibrate; a plan brings its own mesh"};
        if (o.plan.empty() && (o.verify || o.warmup || !o.report.empty() || o.dropCollective || o.stepTimeout > 0))
            throw UsageError{"--verify, --warmup, --report, --step-timeout and --test-drop-collective need --plan"};
    }
    return o;
}

// The backend a --plan or --self-test run computes on: --backend, else cuda
// where this build has it and a GPU is visible, else cpu (with a note when
// CUDA was built in). Throws UsageError for one this build or machine lacks.
std::string chooseBackend(const Options &o, std::string &note)
{
#ifdef TAPESTRY_HAVE_CUDA
    const int gpus = exec::visibleGpuCount();
    std::string backend = o.backend;
    if (backend.empty()) {
        backend = gpus > 0 ? "cuda" : "cpu";
        if (gpus == 0)
            note = "no GPU visible (" + exec::whyNoGpu() + "); running on the cpu backend";
    }
    if (backend == "cuda" && gpus == 0)
        throw UsageError{"--backend cuda: no GPU visible (" + exec::whyNoGpu() + ")"};
#else
    (void)note;  // a build without CUDA has nothing to fall back from
    const std::string backend = o.backend.empty() ? "cpu" : o.backend;
    if (backend == "cuda")
        throw UsageError{"--backend cuda: this tapestry-exec was built without CUDA (it needs the CUDA "
                         "toolkit with NCCL in /usr/local/cuda and -DTAPESTRY_CUDA=ON)"};
#endif
    if (backend == "cpu" && o.precision != exec::Precision::F32)
        throw UsageError{"--precision " + std::string(exec::toString(o.precision)) +
                         " needs the cuda backend; the cpu backend computes in fp32"};
    return backend;
}

std::unique_ptr<exec::Backend> makeBackend(const std::string &name, const exec::Communicator &world,
                                           exec::Precision precision)
{
#ifdef TAPESTRY_HAVE_CUDA
    if (name == "cuda")
        return exec::makeCudaBackend(world, precision);
#else
    (void)world;
    (void)precision;
#endif
    (void)name;
    return std::make_unique<exec::CpuBackend>();
}

// The shipped profile of the device a backend runs on, unless one was given.
std::string meshProfileFor(const Options &o, exec::Backend &backend)
{
    if (o.meshProfile)
        return *o.meshProfile;
    if (backend.name() == "cpu")
        return "cpu-loopback";
    const std::string device = backend.device().description();
    if (device.find("A100") != std::string::npos)
        return "dgx-a100";
    return device.find("H200") != std::string::npos ? "dgx-h200" : "dgx-h100";
}

// The single-process reference: the one step loop on the interpreter, its
// report (executor/REPORT.md: hello, start, a line per step, summary) on
// stdout. A single process has no plan, mesh or prediction.
int train(exec::Interpreter &interpreter, const Options &o, int steps)
{
    const std::string device = exec::CpuDevice().description();
    const std::string_view precision = exec::toString(exec::Precision::F32);
    plan::ReportHello hello;
    hello.ranks = 1;
    std::cout << plan::reportLine(hello) << '\n';
    plan::ReportStart start;
    start.model = o.model;
    start.ranks = 1;
    start.objective = interpreter.objective() == exec::Objective::Loss ? "loss" : "sum_of_squares";
    start.tokensPerStep = interpreter.tokensPerStep();
    start.flopsPerStepPerRank = interpreter.flopsPerStep();
    start.arenaBytesPerRank = interpreter.arenaBytes();
    start.backend = "cpu";
    start.device = device;
    start.precision = precision;
    std::cout << plan::reportLine(start) << '\n' << std::flush;

    exec::StepLoopOptions loop;
    loop.steps = steps;
    loop.warmup = 0;  // the first step's loss is the initial parameters'
    loop.report = true;
    loop.progress = false;
    plan::ReportSummary summary = exec::runSteps(interpreter, loop, nullptr, nullptr, std::cout, std::cerr);
    summary.model = o.model;
    summary.ranks = 1;
    summary.backend = "cpu";
    summary.device = device;
    summary.precision = precision;
    std::cout << plan::reportLine(summary) << '\n' << std::flush;
    return 0;
}

// Opens the report on rank 0: stdout, or a connection to the report server
// made before any work, so that a wrong address ends every rank at once with
// one line from rank 0. Writes the hello line. False when it failed.
bool openReport(const Options &o, int rank, int ranks, std::unique_ptr<exec::ReportLink> &link, std::ostream *&out)
{
    out = &std::cout;
    if (o.report.empty())
        return true;
    int ok = 1;
    if (rank == 0 && o.reportAddress.tokenOnCommandLine)
        std::cerr << "tapestry-exec: warning: --report: the token in the address is readable by every user of "
                     "this machine (ps), who could take the run's place at the report server; pass it in "
                  << exec::kReportTokenVariable << " instead\n"
                  << std::flush;
    if (rank == 0 && !o.reportAddress.toStdout) {
        try {
            link = exec::ReportLink::connect(o.reportAddress);
            out = &link->stream();
            // At once: the server gives a connection a few seconds to say hello.
            *out << exec::reportHello(o.reportAddress, ranks) << '\n' << std::flush;
        } catch (const TapestryError &e) {
            ok = 0;
            std::cerr << "tapestry-exec: " << e.what() << '\n' << std::flush;
        }
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (ok && rank == 0 && o.reportAddress.toStdout)
        *out << exec::reportHello(o.reportAddress, ranks) << '\n' << std::flush;
    return ok != 0;
}

// A set-up error on rank 0 also goes to the report server, which would
// otherwise only see the connection close.
void reportError(std::ostream *out, const exec::ReportLink *link, const std::string &message)
{
    if (link)
        *out << plan::reportLine(plan::ReportError{message}) << '\n' << std::flush;
}

// --calibrate: every rank measures, rank 0 writes the profile (to a
// temporary name renamed into place, so no half-written profile is left).
// A warning when some host runs more CPU ranks than it has cores: they
// take turns on the cores, and a step's time is then mostly waiting for one,
// which no profile predicts (bench_fidelity measured up to 3x on 4 ranks
// sharing 2 cores). Collective: every rank calls it.
std::optional<std::string> oversubscription(const exec::Communicator &world)
{
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(world.handle(), MPI_COMM_TYPE_SHARED, world.rank(), MPI_INFO_NULL, &shared);
    int onHost = 0;
    MPI_Comm_size(shared, &onHost);
    MPI_Comm_free(&shared);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int worst[2] = {cores > 0 && onHost > cores ? onHost : 0, static_cast<int>(cores)};
    int most[2] = {0, 0};
    MPI_Allreduce(worst, most, 2, MPI_INT, MPI_MAX, world.handle());
    if (most[0] == 0)
        return std::nullopt;
    return "warning: " + std::to_string(most[0]) + " ranks share a host of " + std::to_string(cores) +
           " cores: they take turns on the cores, which no profile predicts, so predicted and measured step "
           "times are not comparable (run at most one rank a core)";
}

int calibrate(const Options &o, int rank, int ranks)
{
    std::unique_ptr<exec::ReportLink> link;
    std::ostream *out = nullptr;
    if (!openReport(o, rank, ranks, link, out)) {
        MPI_Finalize();
        return 2;
    }
    int rc = 0;
    try {
        exec::Communicator world = exec::Communicator::world();
        std::string name = o.profileName;
        if (name.empty()) {
            const std::string file = o.calibrate.substr(o.calibrate.find_last_of('/') + 1);
            name = o.calibrate == "-" ? "calibrated" : file.substr(0, file.rfind(".json"));
        }
        exec::CalibrationOptions co;
        co.name = name;
        if (!o.mesh.empty())
            co.mesh = exec::RankMesh::parseShape(o.mesh);
        if (!o.model.empty())
            co.workload = o.model;
        co.load = o.load;
        if (const auto warning = oversubscription(world); warning && rank == 0)
            std::cerr << "tapestry-exec: " << *warning << '\n';
        const nlohmann::json profile = exec::calibrateMeshProfile(world, co);
        if (rank == 0) {
            io::writeOutputFile(o.calibrate, profile.dump(2) + '\n');
            if (o.calibrate != "-")
                std::cerr << "tapestry-exec: wrote " << o.calibrate << '\n';
            if (!o.report.empty())
                *out << plan::reportLine(plan::ReportCalibration{o.calibrate, profile}) << '\n' << std::flush;
        }
    } catch (const TapestryError &e) {
        rc = 2;
        if (rank == 0) {
            std::cerr << "tapestry-exec: " << e.what() << '\n';
            reportError(out, link.get(), e.what());
        }
    }
    MPI_Finalize();
    return rc;
}

} // namespace

// tapestry-exec: runs on MPI ranks. Set-up errors (usage, model, mesh) are
// the same on every rank: rank 0 reports them and all ranks exit 2. An error
// while running may hit one rank only; that rank reports it and aborts the
// whole job, so no other rank waits forever in a collective. A rank that
// stalls without an error, or dies unnoticed, is caught by the watchdog of
// every other rank (watchdog.h), which ends the job once a step has run past
// its limit; a rank whose launcher is gone ends itself.
int main(int argc, char **argv)
{
    // Before MPI_Init, which may start helpers of its own.
    const pid_t launcher = exec::Watchdog::launcherOfThisProcess();
    MPI_Init(&argc, &argv);
    // Ranks share the launcher's stderr: each line goes out in one write, so
    // lines of two ranks never interleave mid-line (std::cerr would write
    // every << on its own, and stderr is unbuffered).
    std::setvbuf(stderr, nullptr, _IOLBF, BUFSIZ);
    std::cerr.unsetf(std::ios_base::unitbuf);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!std::getenv("OPENBLAS_NUM_THREADS"))
        openblas_set_num_threads(1);  // one rank per core: threads would fight over them
    exec::Watchdog watchdog(rank, launcher);

    auto setupFailure = [&](const std::string &message) {
        if (rank == 0)
            std::cerr << "tapestry-exec: " << message << '\n';
        MPI_Finalize();
        return 2;
    };

    Options o;
    try {
        o = parseOptions(argc, argv);
    } catch (const UsageError &e) {
        return setupFailure(e.message);
    }
    if (o.help) {
        if (rank == 0)
            std::cout << kUsage;
        MPI_Finalize();
        return 0;
    }

    if (!o.calibrate.empty())
        return calibrate(o, rank, size);

    std::string backendName, note;
    if (!o.plan.empty() || !o.selfTest.empty()) {
        try {
            backendName = chooseBackend(o, note);
        } catch (const UsageError &e) {
            return setupFailure(e.message);
        }
    }

    if (!o.plan.empty()) {
        exec::PlanRunOptions run;
        run.model = o.model;
        run.load = o.load;
        run.plan = o.plan;
        run.steps = static_cast<int>(o.steps.value_or(5));
        run.warmup = static_cast<int>(o.warmup.value_or(1));
        run.verify = o.verify;
        run.report = !o.report.empty();
        run.precision = o.precision;
        run.note = note;
        run.training.seed = o.seed;
        run.training.optimizer = o.optimizer;
        run.training.learningRate =
            o.learningRate.value_or(o.optimizer == exec::Optimizer::Adam ? 1e-3f : 1e-2f);
        run.dropAllReduce = o.dropCollective;
        run.stepTimeout = o.stepTimeout;
        run.progress = !o.quiet;
        std::unique_ptr<exec::ReportLink> link;
        std::ostream *out = nullptr;
        if (!openReport(o, rank, size, link, out)) {
            MPI_Finalize();
            return 2;
        }
        int rc = 0;
        {
            exec::Communicator world = exec::Communicator::world();
            world.setWatchdog(&watchdog);
            try {
                const std::unique_ptr<exec::Backend> backend = makeBackend(backendName, world, o.precision);
                run.meshProfile = meshProfileFor(o, *backend);
                // Said once the run is set up, beside the other notes.
                if (backendName == "cpu")
                    if (const auto warning = oversubscription(world))
                        run.note = run.note.empty() ? *warning : run.note + "\ntapestry-exec: " + *warning;
                rc = exec::runPlan(run, world, *backend, *out, std::cerr);
            } catch (const TapestryError &e) {
                rc = 2;
                if (rank == 0) {
                    std::cerr << "tapestry-exec: " << e.what() << '\n';
                    reportError(out, link.get(), e.what());
                }
            } catch (const std::exception &e) {
                // A device or library failure may hit one rank only: end the job.
                std::cerr << "tapestry-exec: rank " << rank << ": " << e.what() << '\n' << std::flush;
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        MPI_Finalize();
        return rc;
    }

    std::optional<exec::Communicator> world;
    std::unique_ptr<exec::Backend> backend;
    std::optional<exec::RankMesh> mesh;
    std::optional<exec::Interpreter> interpreter;
    try {
        if (!o.selfTest.empty()) {
            world.emplace(exec::Communicator::world());
            mesh.emplace(*world, exec::RankMesh::parseShape(o.mesh));
            backend = makeBackend(backendName, *world, o.precision);
            mesh->attach(*backend);
            if (rank == 0 && !note.empty() && !o.quiet)
                std::cerr << "tapestry-exec: " << note << '\n';
        } else {
            auto graph = io::loadModel(o.model, o.load);
            if (!o.steps) {
                if (rank == 0)
                    std::cout << nlohmann::json{{"event", "loaded"},
                                                {"model", o.model},
                                                {"ranks", size},
                                                {"ops", graph.opCount()}}
                                     .dump()
                              << '\n';
                MPI_Finalize();
                return 0;
            }
            if (size != 1)
                throw TapestryError(Error{o.model, {}, "--steps without a plan runs the single-process "
                                                       "reference: start it on 1 rank, not " +
                                                           std::to_string(size)});
            exec::InterpreterOptions io;
            io.seed = o.seed;
            io.optimizer = o.optimizer;
            io.learningRate = o.learningRate.value_or(o.optimizer == exec::Optimizer::Adam ? 1e-3f : 1e-2f);
            interpreter.emplace(std::move(graph), io, o.model);
        }
    } catch (const TapestryError &e) {
        mesh.reset();
        backend.reset();
        world.reset();
        return setupFailure(e.what());
    } catch (const std::exception &e) {
        std::cerr << "tapestry-exec: rank " << rank << ": " << e.what() << '\n' << std::flush;
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    int rc = 0;
    try {
        if (mesh)
            rc = exec::runCollectivesSelfTest(*mesh, *world, backend->device(), o.failRank, std::cout) ? 0 : 1;
        else
            rc = train(*interpreter, o, static_cast<int>(*o.steps));
    } catch (const std::exception &e) {
        std::cerr << "tapestry-exec: rank " << rank << ": " << e.what() << '\n' << std::flush;
        MPI_Abort(MPI_COMM_WORLD, dynamic_cast<const TapestryError *>(&e) ? 2 : 1);
    }
    mesh.reset();
    backend.reset();
    world.reset();
    MPI_Finalize();
    return rc;
}
