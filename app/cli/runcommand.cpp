#include "cli/command.h"

#include "ir/error.h"
#include "plan/runreport.h"

#include <nlohmann/json.hpp>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace tapestry::cli {

namespace {

namespace fs = std::filesystem;

// tapestry-exec: $TAPESTRY_EXEC, else beside this binary in the build tree
// (build/app/tapestry-cli -> build/executor/tapestry-exec) or the install
// (bin/ holds both).
std::string findExecutor()
{
    if (const char *env = std::getenv("TAPESTRY_EXEC"); env && *env) {
        if (!fs::exists(env))
            throw TapestryError(Error{"TAPESTRY_EXEC", {}, std::string("no file '") + env + "'"});
        return env;
    }
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec)
        for (const fs::path &candidate :
             {self.parent_path().parent_path() / "executor" / "tapestry-exec", self.parent_path() / "tapestry-exec"})
            if (fs::exists(candidate))
                return candidate.string();
    throw TapestryError(Error{"tapestry-exec", {},
                              "not found beside tapestry-cli (build/executor/ or the same folder); "
                              "set TAPESTRY_EXEC to its path"});
}

constexpr int kBarWidth = 20;  // the live progress bar, in characters

std::string human(double v)
{
    char s[32];
    if (v >= 1e9)
        std::snprintf(s, sizeof s, "%.2fG", v * 1e-9);
    else if (v >= 1e6)
        std::snprintf(s, sizeof s, "%.2fM", v * 1e-6);
    else if (v >= 1e3)
        std::snprintf(s, sizeof s, "%.1fk", v * 1e-3);
    else
        std::snprintf(s, sizeof s, "%.1f", v);
    return s;
}

std::string ms(double seconds)
{
    char s[32];
    std::snprintf(s, sizeof s, "%.3f ms", seconds * 1e3);
    return s;
}

void printSummary(const plan::ReportStart &start, const plan::ReportSummary &summary, std::ostream &out)
{
    out << "model       " << summary.model << '\n'
        << "plan        " << summary.plan << " (" << start.method << ") on mesh " << summary.mesh << ", "
        << summary.ranks << " ranks\n";
    if (const auto &v = summary.verification) {
        char err[32];
        std::snprintf(err, sizeof err, "%.3g", v->maxRelativeError);
        out << "verify      " << (v->passed ? "pass" : "FAIL") << " (largest relative error " << err << " at "
            << v->where << ", tolerance " << v->tolerance << ", " << v->tensorsCompared << " tensors)\n";
    }
    const plan::StepFigures &mean = summary.mean;
    const double measured = mean.stepTime, predicted = summary.predictedStepTime;
    out << "step time   " << ms(measured) << " measured (forward " << ms(mean.forward) << ", backward "
        << ms(mean.backward) << ", update " << ms(mean.update) << ", in collectives " << ms(mean.comm) << ")\n"
        << "predicted   " << ms(predicted) << " (" << summary.meshProfile << " profile), "
        << human(100.0 * predicted / measured) << "% of measured\n"
        << "throughput  " << human(mean.tokensPerSecond) << " tokens/s, " << human(mean.gflopsPerRank)
        << " GFLOP/s per rank over the step, " << human(mean.gemmGflopsPerRank) << " inside the GEMMs ("
        << ms(mean.gemm) << "; other kernels " << ms(mean.otherKernels) << ")\n";
    // Where the prediction is off: the cost model's parts beside what the
    // ranks timed (GEMMs, the other kernels, each kind of collective).
    if (start.predicted.gemm > 0 || start.predicted.otherKernels > 0 || !start.predicted.collectiveSeconds.empty()) {
        out << "\npredicted against measured, per part of a step (rank 0)\n"
               "  part                predicted     measured  pred/meas\n";
        auto part = [&](const std::string &name, double p, double m) {
            char line[160];
            char ratio[32] = "-";
            if (m > 0)
                std::snprintf(ratio, sizeof ratio, "%.2f", p / m);
            std::snprintf(line, sizeof line, "  %-16s %12s %12s %10s\n", name.c_str(), ms(p).c_str(), ms(m).c_str(),
                          ratio);
            out << line;
        };
        part("GEMMs", start.predicted.gemm, mean.gemm);
        part("other kernels", start.predicted.otherKernels, mean.otherKernels);
        // The other kernels by kind: the memory-bound families the cost
        // model prices by their own bandwidth, and the rest.
        for (const auto &[kind, p] : start.predicted.kernelSeconds) {
            if (kind == "gemm")
                continue;
            const auto m = mean.kernelSeconds.find(kind);
            part("  " + kind, p, m == mean.kernelSeconds.end() ? 0.0 : m->second);
        }
        std::set<std::string> kinds;
        for (const auto &[kind, s] : start.predicted.collectiveSeconds)
            kinds.insert(kind);
        for (const auto &[kind, e] : mean.collectives)
            kinds.insert(kind);
        for (const std::string &kind : kinds) {
            const auto p = start.predicted.collectiveSeconds.find(kind);
            const auto m = mean.collectives.find(kind);
            part(kind, p == start.predicted.collectiveSeconds.end() ? 0.0 : p->second,
                 m == mean.collectives.end() ? 0.0 : m->second.seconds);
        }
    }
    if (!mean.collectives.empty()) {
        out << "\ncollectives per step (rank 0)\n  kind              calls        bytes         time\n";
        for (const auto &[kind, e] : mean.collectives) {
            char line[128];
            std::snprintf(line, sizeof line, "  %-16s %6.0f %12s %12s\n", kind.c_str(), e.calls,
                          human(e.bytes).c_str(), ms(e.seconds).c_str());
            out << line;
        }
    }
}

int runRun(const Args &args)
{
    if (args.positional.size() != 1) {
        std::cerr << "tapestry-cli run: expected MODEL (try 'tapestry-cli run --help')\n";
        return BadInput;
    }
    const auto planFile = args.value("--plan");
    const auto np = args.integer("--np");
    if (!planFile || !np) {
        std::cerr << "tapestry-cli run: --plan FILE and --np N are required\n";
        return BadInput;
    }
    if (*np < 1)
        throw TapestryError(Error{"--np", {}, "expects a positive integer"});
    if (!fs::exists(*planFile))
        throw TapestryError(Error{*planFile, {}, "no such plan file"});
    if (auto timeout = args.value("--step-timeout")) {
        std::size_t used = 0;
        double seconds = 0.0;
        try {
            seconds = std::stod(*timeout, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (used != timeout->size() || !(seconds > 0) || !std::isfinite(seconds))
            throw TapestryError(
                Error{"--step-timeout", {}, "expects a positive number of seconds, got '" + *timeout + "'"});
    }
    const std::string executor = findExecutor();
    const bool json = args.has("--json");

    // -q: Open MPI's multi-line banners about a failed job would follow
    // the executor's one line and hide it.
    std::vector<std::string> argv{"mpirun", "-q", "-np", std::to_string(*np)};
    if (geteuid() == 0)
        argv.push_back("--allow-run-as-root");
    if (*np > static_cast<long long>(sysconf(_SC_NPROCESSORS_ONLN)))
        argv.push_back("--oversubscribe");
    // One BLAS thread per rank: ranks would otherwise fight over the cores.
    argv.insert(argv.end(), {"-x", "OPENBLAS_NUM_THREADS=1", executor, "--model", args.positional[0], "--plan",
                             *planFile, "--report", "-", "--quiet"});
    for (const char *name : {"--steps", "--warmup", "--batch", "--seq", "--seed", "--mesh-profile", "--step-timeout"})
        if (auto v = args.value(name)) {
            argv.push_back(name);
            argv.push_back(*v);
        }
    if (args.has("--verify"))
        argv.push_back("--verify");

    int pipefd[2];
    if (pipe(pipefd) != 0)
        throw TapestryError(Error{"mpirun", {}, std::string("cannot create a pipe: ") + std::strerror(errno)});
    const pid_t self = getpid();
    const pid_t pid = fork();
    if (pid < 0)
        throw TapestryError(Error{"mpirun", {}, std::string("cannot start: ") + std::strerror(errno)});
    if (pid == 0) {
        // mpirun stays in this process's group (Ctrl-C reaches it and every
        // rank), and ends with it however it ends, kill -9 included: on
        // SIGTERM mpirun ends every rank it started. A CLI gone before this
        // line ran has made this process an orphan already.
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != self)
            _exit(127);
        dup2(pipefd[1], STDOUT_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        std::vector<char *> cargv;
        for (auto &a : argv)
            cargv.push_back(a.data());
        cargv.push_back(nullptr);
        execvp("mpirun", cargv.data());
        std::fprintf(stderr, "tapestry-cli run: cannot start mpirun: %s\n", std::strerror(errno));
        _exit(127);
    }
    close(pipefd[1]);

    // The executor's JSON lines: a live progress line per step, the summary
    // kept for the table. Its stderr (rank errors) passes straight through.
    FILE *in = fdopen(pipefd[0], "r");
    plan::ReportStart start;
    std::optional<plan::ReportSummary> summary;
    plan::RunReportReader reader("tapestry-exec report");
    std::optional<std::string> unreadable;  // the first line the reader refused; later lines are skipped
    const bool live = isatty(STDERR_FILENO);
    char *line = nullptr;
    std::size_t capacity = 0;
    while (getline(&line, &capacity, in) > 0) {
        // The launcher may print its own text on stdout: only JSON lines are the report's.
        if (line[0] != '{' || unreadable)
            continue;
        std::optional<plan::ReportEvent> event;
        try {
            event = reader.read(std::string_view(line));
        } catch (const TapestryError &e) {
            unreadable = e.what();
            std::cerr << (live ? "\r\033[K" : "") << "tapestry-cli run: " << e.what() << '\n' << std::flush;
            continue;
        }
        if (!event)
            continue;
        if (const auto *s = std::get_if<plan::ReportStart>(&*event))
            start = *s;
        else if (const auto *s = std::get_if<plan::ReportSummary>(&*event))
            summary = *s;
        else if (const auto *s = std::get_if<plan::ReportStep>(&*event)) {
            const int step = s->step, steps = std::max(s->steps, 1);
            const int filled = std::clamp(step * kBarWidth / steps, 0, kBarWidth);
            const std::string bar = std::string(filled, '#') + std::string(kBarWidth - filled, '.');
            char progress[200];
            std::snprintf(progress, sizeof progress, "[%s] step %d/%d  %s tokens/s  %s/step  loss %.5g", bar.c_str(),
                          step, steps, human(s->figures.tokensPerSecond).c_str(), ms(s->figures.stepTime).c_str(),
                          s->loss);
            std::cerr << (live ? "\r\033[K" : "") << progress << (live ? "" : "\n") << std::flush;
        }
    }
    std::free(line);
    std::fclose(in);
    if (live)
        std::cerr << "\r\033[K" << std::flush;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : CheckFailed;

    if (unreadable)
        return BadInput;
    if (!summary) {
        std::cerr << "tapestry-cli run: the job ended without a summary (mpirun exit code " << rc << ")\n";
        return rc == BadInput || rc == 127 ? BadInput : CheckFailed;
    }
    if (json) {
        const nlohmann::json s = plan::toJson(*summary);
        nlohmann::json out{{"model", s["model"]},
                           {"plan", s["plan"]},
                           {"mesh", s["mesh"]},
                           {"ranks", s["ranks"]},
                           {"tokens_per_s", s["tokens_per_s"]},
                           {"gflops_per_rank", s["gflops_per_rank"]},
                           {"gemm_gflops_per_rank", s["gemm_gflops_per_rank"]},
                           {"gemm_s", s["gemm_s"]},
                           {"other_kernels_s", s["other_kernels_s"]},
                           {"measured_step_time_s", s["step_time_s"]},
                           {"predicted_step_time_s", s["predicted_step_time_s"]},
                           {"mesh_profile", s["mesh_profile"]},
                           {"predicted_over_measured", s["predicted_over_measured"]},
                           {"collectives", s["collectives"]},
                           {"exit_code", rc}};
        if (s.contains("verification"))
            out["verification"] = s["verification"];
        std::cout << out.dump(2) << '\n';
    } else {
        printSummary(start, *summary, std::cout);
    }
    return rc;
}

Registration run([] {
    Command c;
    c.name = "run";
    c.usage = "run MODEL --plan FILE --np N [--steps K] [--warmup W] [--verify] [--step-timeout S] [--json]";
    c.summary = "run a plan on N MPI ranks with tapestry-exec, optionally verified";
    c.details =
        "Starts 'mpirun -np N tapestry-exec ...' (with --allow-run-as-root as root, --oversubscribe\n"
        "beyond the core count, OPENBLAS_NUM_THREADS=1 per rank), shows a live progress bar\n"
        "with tokens/s and step time per step, and prints the measured step time, tokens/s,\n"
        "GFLOP/s per rank, the collectives\n"
        "of a step and the cost model's predicted step time. The plan's mesh must have N\n"
        "devices. tapestry-exec is found beside tapestry-cli or through $TAPESTRY_EXEC.\n"
        "mpirun and its ranks end with this command, however it ends (Ctrl-C, kill, kill -9).\n"
        "A rank that stalls (stopped, dead, stuck) ends the job after --step-timeout with one line\n"
        "naming the step and the collective the other ranks wait in.\n"
        "Exit codes: 0 success, 1 verification failed or a rank failed, 2 bad input.\n";
    c.options = modelOptions();
    c.options.push_back({"--plan", "FILE", "the tapestry.plan to run (required)"});
    c.options.push_back({"--np", "N", "number of ranks (required)"});
    c.options.push_back({"--steps", "K", "measured steps (default 5)"});
    c.options.push_back({"--warmup", "W", "steps before measuring (default 1)"});
    c.options.push_back({"--seed", "S", "seed of the parameters and the batch (default 1)"});
    c.options.push_back({"--mesh-profile", "NAME", "profile of the predicted step time (default cpu-loopback)"});
    c.options.push_back({"--step-timeout", "SECONDS",
                         "end the job when a step takes longer (default 10x the slower of the predicted and the "
                         "slowest step so far, at least 60 s)"});
    c.options.push_back({"--verify", "", "check the first step against the unsharded reference"});
    c.options.push_back({"--json", "", "print the summary as one JSON object"});
    c.run = runRun;
    return c;
}());

} // namespace
} // namespace tapestry::cli
