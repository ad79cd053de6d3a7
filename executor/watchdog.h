#pragma once

#include "collectives.h"

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tapestry::exec {

// A rank's watchdog: a thread beside the rank's work that ends the whole
// job when a step runs past its limit, and ends the rank when its launcher
// is gone.
//
// A rank that stalls (stopped, swapped out, stuck in a driver) or dies
// without the launcher noticing leaves every other rank waiting in a
// collective for ever. Each rank's watchdog knows the step and the
// collective its rank is in; past the limit it writes one line naming them
// and aborts the job (MPI_Abort, after NCCL's communicators are aborted),
// so the job ends with a non-zero exit instead of hanging. Ranks are armed
// together and stagger their deadlines by rank (kStaggerSeconds per rank,
// up to kStaggerRanks), so the lowest waiting rank names the stall and the
// job is gone before the others would.
//
// Under a launcher (mpirun, srun) the thread also checks that the launcher
// is still this process's parent: a launcher killed outright cannot end
// its ranks, and a rank computing a long step would otherwise outlive it.
//
// The rank's thread reports where it is with atomics only (a collective
// entered and left, the tensor or op it works on), so a step pays nothing
// it would notice.
class Watchdog {
public:
    // The automatic limit: kLimitMultiple times the slower of the predicted
    // step time and the slowest step so far, at least kLimitFloorSeconds.
    static constexpr double kLimitMultiple = 10.0;
    static constexpr double kLimitFloorSeconds = 60.0;
    static constexpr double kStaggerSeconds = 2.0;
    static constexpr int kStaggerRanks = 4;

    enum class Phase { Verification, WarmUp, Measured };

    // What happens when a step runs past its limit: writes `message` on
    // stderr and ends the job. The default runs the abort hooks (for at
    // most a few seconds) and calls MPI_Abort.
    using AbortAction = std::function<void(const std::string &message)>;

    // `launcher`: the pid of the launcher that started this rank (its
    // parent at start), or 0 when it was started without one.
    Watchdog(int rank, pid_t launcher, AbortAction abort = {});
    ~Watchdog();
    Watchdog(const Watchdog &) = delete;
    Watchdog &operator=(const Watchdog &) = delete;

    // The parent of this process when it runs under a launcher (an MPI
    // runtime's environment is set), else 0. Called before MPI_Init.
    static pid_t launcherOfThisProcess();

    // The limit: `stepTimeout` seconds when given (> 0), else automatic
    // from `predictedStepTime`.
    void setLimit(double stepTimeout, double predictedStepTime);
    double limit() const;
    // Arms the watchdog for one step; `scale` multiplies the limit (the
    // verification step also runs the unsharded reference on rank 0).
    void beginStep(Phase phase, int step, double scale = 1.0);
    // Disarms it; a warm-up or measured step's time feeds the automatic limit.
    void endStep();

    // Where the rank is, for the message. `name` must outlive the step (the
    // program's graph holds it).
    void workingOn(const std::string *name, bool isOp);
    // A blocking collective entered and left (host collectives over MPI).
    void enter(Collective kind);
    void enterBarrier();
    void leave();
    // A collective queued on a device, which waits in it asynchronously.
    void issued(Collective kind);

    // Called, on the watchdog's thread, before the job is aborted (NCCL's
    // communicators). Returns a handle for removeAbortHook.
    int addAbortHook(std::function<void()> hook);
    void removeAbortHook(int handle);

    // Marks a blocking collective for its scope; does nothing without a watchdog.
    class Waiting {
    public:
        Waiting(Watchdog *watchdog, Collective kind) : m_watchdog(watchdog)
        {
            if (m_watchdog)
                m_watchdog->enter(kind);
        }
        ~Waiting()
        {
            if (m_watchdog)
                m_watchdog->leave();
        }
        Waiting(const Waiting &) = delete;
        Waiting &operator=(const Waiting &) = delete;

    private:
        Watchdog *m_watchdog;
    };

private:
    using Clock = std::chrono::steady_clock;
    static constexpr int kNone = -1;
    static constexpr int kBarrier = static_cast<int>(kCollectiveKinds);

    void loop();
    std::string message(double waited) const;
    void abortJob(const std::string &message);

    const int m_rank;
    const pid_t m_launcher;
    AbortAction m_abort;

    mutable std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stop = false;
    bool m_armed = false;
    bool m_fired = false;
    Phase m_phase = Phase::Measured;
    int m_step = 0;
    Clock::time_point m_started;
    Clock::time_point m_deadline;
    double m_stepTimeout = 0.0;
    double m_predicted = 0.0;
    double m_slowest = 0.0;
    std::vector<std::pair<int, std::function<void()>>> m_hooks;
    int m_nextHook = 1;

    std::atomic<int> m_inside{kNone};  // the blocking collective the rank is in
    std::atomic<int> m_issued{kNone};  // the last collective issued this step
    std::atomic<const std::string *> m_subject{nullptr};  // what the rank works on
    std::atomic<bool> m_subjectIsOp{false};
    std::atomic<const std::string *> m_collectiveSubject{nullptr};  // the subject of m_inside or m_issued
    std::atomic<bool> m_collectiveSubjectIsOp{false};

    std::thread m_thread;
};

} // namespace tapestry::exec
