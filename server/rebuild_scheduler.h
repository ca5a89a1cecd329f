// Rebuilds group tables off the request path, coalesced.
//
// Inputs that change often and in bursts (health flips, DNS answers, slow
// start ramps, ejection expiries, load-driven zone weights) do not rebuild
// a table each: they ask for a rebuild after a delay, and every request for
// the same group before that rebuild runs folds into it (the earliest
// requested time wins). Health flaps inside the merge window thus go out as
// one generation.
//
// Thread-safe; one thread runs the rebuilds. std::mutex rather than
// absl::Mutex so ThreadSanitizer sees the ordering (Debian's abseil is not
// instrumented).
#ifndef ASIDE_SERVER_REBUILD_SCHEDULER_H_
#define ASIDE_SERVER_REBUILD_SCHEDULER_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace aside::server {

class Group;

class RebuildScheduler {
 public:
  RebuildScheduler();
  ~RebuildScheduler();  // stops the thread; pending rebuilds are dropped
  RebuildScheduler(const RebuildScheduler&) = delete;
  RebuildScheduler& operator=(const RebuildScheduler&) = delete;

  // Rebuilds `group` no later than `delay` from now, once, however many
  // requests arrive before then. A group that is gone by then is skipped.
  void Schedule(const std::shared_ptr<Group>& group, absl::Duration delay);

  // Rebuilds done so far (for tests and metrics).
  uint64_t rebuilds() const;

 private:
  struct Pending {
    std::weak_ptr<Group> group;
    absl::Time due;
  };
  void Run();

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<const Group*, Pending> pending_;
  bool stop_ = false;
  uint64_t rebuilds_ = 0;
  std::thread thread_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_REBUILD_SCHEDULER_H_
