// Rebuilds group tables off the request path, coalesced.
//
// Inputs that change often and in bursts (health flips, DNS answers, slow
// start ramps, ejection expiries, load-driven zone weights) do not rebuild
// a table each: they ask for a rebuild after a delay, and every request for
// the same group before that rebuild runs folds into it (the earliest
// requested time wins). Health flaps inside the merge window thus go out as
// one generation.
//
// Time comes from a Clock (monotonic), so that a wall-clock step neither
// delays nor hurries rebuilds. Three ways to run:
// - On a loop (the server): a timer on the server's control loop
//   (server/base/event_loop.h) runs each rebuild when it is due, on the
//   loop's thread. The system clock.
// - Threaded: one thread of its own waits for the earliest due rebuild and
//   runs it. Needs a clock that advances by itself (the system clock).
// - Manual (tests with a FakeClock): no thread; RunDue() runs, on the
//   caller's thread, what is due at the clock's time. Advance the clock,
//   call RunDue, observe: no sleeps.
//
// Thread rules: Schedule, RunDue, NextDue and rebuilds from any thread;
// mu_ guards the pending rebuilds and the counters. Rebuilds run without
// mu_ held (on the loop's or the scheduler's thread, or RunDue's caller),
// so a rebuild may Schedule again.
#ifndef ASIDE_SERVER_GROUPS_REBUILD_SCHEDULER_H_
#define ASIDE_SERVER_GROUPS_REBUILD_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/base/event_loop.h"

namespace aside::server {

class Group;

class RebuildScheduler {
 public:
  enum class Mode { kThreaded, kManual };

  // Threaded on the system clock.
  RebuildScheduler();
  RebuildScheduler(const Clock* clock, Mode mode);
  // On `loop`, on the system clock.
  explicit RebuildScheduler(EventLoop* loop);
  // Stops the thread or the timer (waiting for a rebuild in progress);
  // pending rebuilds are dropped.
  ~RebuildScheduler();
  RebuildScheduler(const RebuildScheduler&) = delete;
  RebuildScheduler& operator=(const RebuildScheduler&) = delete;

  // Rebuilds `group` no later than `delay` from now, once, however many
  // requests arrive before then. A group that is gone by then is skipped.
  void Schedule(const std::shared_ptr<Group>& group, absl::Duration delay);

  // Runs every rebuild due at the clock's time, on the calling thread;
  // returns how many ran. (Threaded mode runs them by itself.)
  size_t RunDue();

  // The earliest pending rebuild (the clock's monotonic nanoseconds).
  std::optional<int64_t> NextDue() const;

  // Rebuilds done so far (for tests and metrics).
  uint64_t rebuilds() const;

 private:
  struct Pending {
    std::weak_ptr<Group> group;
    int64_t due = 0;  // clock nanoseconds
  };
  void Run();
  // Takes the due entries out of pending_.
  std::vector<std::shared_ptr<Group>> TakeDueLocked(int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  mutable Mutex mu_;
  std::map<const Group*, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Counts the Schedule calls that added an entry or moved one earlier:
  // the thread's wait ends when it changes.
  uint64_t schedule_changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t rebuilds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // threaded mode only
  // On a loop: runs what is due, then waits for the next. Last: stopped
  // (in the destructor) before the state it reads goes.
  std::unique_ptr<LoopTimer> timer_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUPS_REBUILD_SCHEDULER_H_
