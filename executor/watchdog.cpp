#include "watchdog.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace tapestry::exec {

namespace {

// How often the launcher is looked for; how long NCCL may take to abort.
constexpr std::chrono::milliseconds kLauncherPoll(500);
constexpr std::chrono::seconds kAbortHookWait(5);

const char *kindName(int kind)
{
    switch (kind) {
    case static_cast<int>(Collective::AllReduce): return "all-reduce";
    case static_cast<int>(Collective::AllGather): return "all-gather";
    case static_cast<int>(Collective::ReduceScatter): return "reduce-scatter";
    case static_cast<int>(Collective::AllToAll): return "all-to-all";
    }
    return "barrier";
}

std::string seconds(double s, const char *format)
{
    char text[32];
    std::snprintf(text, sizeof text, format, s);
    return text;
}

} // namespace

Watchdog::Watchdog(int rank, pid_t launcher, AbortAction abort)
    : m_rank(rank), m_launcher(launcher), m_abort(std::move(abort))
{
    m_thread = std::thread([this] { loop(); });
}

Watchdog::~Watchdog()
{
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_one();
    m_thread.join();
}

pid_t Watchdog::launcherOfThisProcess()
{
    for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
        if (std::getenv(name))
            return getppid();
    return 0;
}

void Watchdog::setLimit(double stepTimeout, double predictedStepTime)
{
    std::lock_guard lock(m_mutex);
    m_stepTimeout = stepTimeout;
    m_predicted = predictedStepTime;
}

double Watchdog::limit() const
{
    std::lock_guard lock(m_mutex);
    if (m_stepTimeout > 0)
        return m_stepTimeout;
    return std::max(kLimitFloorSeconds, kLimitMultiple * std::max(m_predicted, m_slowest));
}

void Watchdog::beginStep(Phase phase, int step, double scale)
{
    const double seconds = limit() * scale + kStaggerSeconds * std::min(m_rank, kStaggerRanks);
    {
        std::lock_guard lock(m_mutex);
        m_phase = phase;
        m_step = step;
        m_started = Clock::now();
        m_deadline = m_started + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
        m_armed = true;
        m_issued = kNone;
        m_inside = kNone;
    }
    m_wake.notify_one();
}

void Watchdog::endStep()
{
    {
        std::lock_guard lock(m_mutex);
        if (m_armed && m_phase != Phase::Verification)
            m_slowest = std::max(m_slowest, std::chrono::duration<double>(Clock::now() - m_started).count());
        m_armed = false;
    }
    m_wake.notify_one();
}

void Watchdog::workingOn(const std::string *name, bool isOp)
{
    m_subject.store(name, std::memory_order_relaxed);
    m_subjectIsOp.store(isOp, std::memory_order_relaxed);
}

void Watchdog::enter(Collective kind)
{
    m_collectiveSubject.store(m_subject.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m_collectiveSubjectIsOp.store(m_subjectIsOp.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m_issued.store(static_cast<int>(kind), std::memory_order_relaxed);
    m_inside.store(static_cast<int>(kind), std::memory_order_release);
}

void Watchdog::enterBarrier()
{
    m_inside.store(kBarrier, std::memory_order_release);
}

void Watchdog::leave()
{
    m_inside.store(kNone, std::memory_order_release);
}

void Watchdog::issued(Collective kind)
{
    m_collectiveSubject.store(m_subject.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m_collectiveSubjectIsOp.store(m_subjectIsOp.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m_issued.store(static_cast<int>(kind), std::memory_order_release);
}

int Watchdog::addAbortHook(std::function<void()> hook)
{
    std::lock_guard lock(m_mutex);
    m_hooks.emplace_back(m_nextHook, std::move(hook));
    return m_nextHook++;
}

void Watchdog::removeAbortHook(int handle)
{
    std::lock_guard lock(m_mutex);
    std::erase_if(m_hooks, [handle](const auto &h) { return h.first == handle; });
}

// "rank 0: step 3 waited 30.0 s in all-reduce of 'h.0/mlp/c_fc/MatMul_output'
// (--step-timeout 30 s); a rank has stalled or died". Called with m_mutex held.
std::string Watchdog::message(double waited) const
{
    std::string step = m_phase == Phase::Verification ? "the verification step"
                       : m_phase == Phase::WarmUp     ? "warm-up step " + std::to_string(m_step)
                                                      : "step " + std::to_string(m_step);
    auto about = [](const std::string *name, bool isOp) -> std::string {
        if (!name)
            return {};
        return (isOp ? " inside op '" : " of '") + *name + "'";
    };
    std::string text = "rank " + std::to_string(m_rank) + ": " + step;
    const int inside = m_inside.load(std::memory_order_acquire);
    const int issued = m_issued.load(std::memory_order_acquire);
    const std::string spent = seconds(waited, "%.1f s");
    if (inside == kBarrier)
        text += " waited " + spent + " in the barrier that starts it";
    else if (inside != kNone)
        text += " waited " + spent + " in " + kindName(inside) +
                about(m_collectiveSubject.load(), m_collectiveSubjectIsOp.load());
    else if (issued != kNone)
        text += " waited " + spent + " after queuing " + kindName(issued) +
                about(m_collectiveSubject.load(), m_collectiveSubjectIsOp.load());
    else if (const std::string *name = m_subject.load())
        text += " ran " + spent + (m_subjectIsOp.load() ? " in op '" : " at '") + *name + "'";
    else
        text += " ran " + spent;
    if (m_stepTimeout > 0)
        text += " (--step-timeout " + seconds(m_stepTimeout, "%g") + " s)";
    else
        text += " (the automatic limit, " +
                seconds(std::max(kLimitFloorSeconds, kLimitMultiple * std::max(m_predicted, m_slowest)), "%.0f") +
                " s; --step-timeout sets another)";
    return text + "; a rank has stalled or died";
}

void Watchdog::loop()
{
    std::unique_lock lock(m_mutex);
    while (!m_stop) {
        Clock::time_point wake = Clock::time_point::max();
        if (m_armed)
            wake = m_deadline;
        if (m_launcher > 0)
            wake = std::min(wake, Clock::now() + kLauncherPoll);
        if (wake == Clock::time_point::max())
            m_wake.wait(lock);
        else
            m_wake.wait_until(lock, wake);
        if (m_stop)
            break;
        if (m_launcher > 0 && getppid() != m_launcher) {
            std::fprintf(stderr, "tapestry-exec: rank %d: its launcher (pid %d) is gone; ending the rank\n", m_rank,
                         static_cast<int>(m_launcher));
            std::fflush(stderr);
            _exit(1);
        }
        const Clock::time_point now = Clock::now();
        if (m_armed && !m_fired && now >= m_deadline) {
            m_fired = true;
            m_armed = false;
            const std::string text = message(std::chrono::duration<double>(now - m_started).count());
            lock.unlock();
            abortJob(text);
            lock.lock();
        }
    }
}

void Watchdog::abortJob(const std::string &message)
{
    if (m_abort) {
        m_abort(message);
        return;
    }
    std::fprintf(stderr, "tapestry-exec: %s\n", message.c_str());
    std::fflush(stderr);
    // NCCL's communicators first, so that the GPU stops waiting too; a hook
    // that hangs (a wedged device) must not keep the job alive, so they run
    // on a thread of their own, waited on for a few seconds at most.
    std::vector<std::function<void()>> hooks;
    {
        std::lock_guard lock(m_mutex);
        for (const auto &h : m_hooks)
            hooks.push_back(h.second);
    }
    if (!hooks.empty()) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        std::thread([hooks, done] {
            for (const auto &hook : hooks)
                hook();
            done->store(true);
        }).detach();
        const auto until = Clock::now() + kAbortHookWait;
        while (!done->load() && Clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // From this thread while the rank's own is blocked in the stalled
    // collective: Open MPI and MPICH end the job from any thread.
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

} // namespace tapestry::exec
