// The Admin service's mutation workers, their queue and its admission
// control: back-pressure instead of collapse.
//
// A mutation waits for a store commit, so it runs on a worker of its own
// (gRPC 1.51 runs callback handlers on a couple of threads only; see
// admin_service.h). Up to `max_workers` run at once, started as they are
// needed; the rest wait in order. A store that commits slower than writes
// arrive would let that queue, and every write's ack latency with it, grow
// without end. So Admit() refuses new mutations, before any work is done
// for them, while the queue is over either bound:
//   - `max_queued` mutations waiting (memory: each holds its request), or
//   - the oldest waiting one has waited `max_wait` (latency: a writer that
//     is admitted is acknowledged within about max_wait plus its own
//     commit, however many writers there are).
// A refusal carries a retry hint: how long the queue ahead needs to drain
// at the rate mutations finished lately (10 ms .. 10 s). The workers keep
// committing at the store's ceiling meanwhile.
//
// Time comes from a Clock, so tests drive the wait bound with a FakeClock.
//
// Threads: Admit, Run and stats from any thread; mu_ guards the queue, the
// workers and the counters; jobs run without it.
#ifndef ASIDE_SERVER_API_MUTATION_QUEUE_H_
#define ASIDE_SERVER_API_MUTATION_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"

namespace aside::server {

class MutationQueue {
 public:
  struct Options {
    size_t max_workers = 32;
    size_t max_queued = 1024;
    absl::Duration max_wait = absl::Seconds(1);
    const Clock* clock = &SystemClock::Get();
    // The workers' name (NameThisThread).
    const char* thread_name = "aside-worker";
  };
  static constexpr absl::Duration kMinRetryHint = absl::Milliseconds(10);
  static constexpr absl::Duration kMaxRetryHint = absl::Seconds(10);

  explicit MutationQueue(Options options);
  // Stop().
  ~MutationQueue();
  MutationQueue(const MutationQueue&) = delete;
  MutationQueue& operator=(const MutationQueue&) = delete;

  struct Admission {
    bool admitted = true;
    // Why not (names the bound), and when to try again.
    std::string reason;
    absl::Duration retry_after = absl::ZeroDuration();
  };
  // Whether `jobs` more mutations may queue now (one call of a batch RPC
  // may bring several; they are admitted or refused together).
  Admission Admit(size_t jobs = 1);
  // Queues `job` (admitted or not: Admit is the caller's check); a worker
  // more is started when every one is busy.
  void Run(std::function<void()> job);
  // Runs what is queued and in flight to the end, then joins the workers:
  // once it returns, no job is running (a job that answers a call has
  // returned from answering it). Nothing may be Run after it. Idempotent.
  void Stop();

  struct Stats {
    size_t workers = 0;  // started
    size_t running = 0;
    size_t queued = 0;
    uint64_t refused = 0;
  };
  Stats stats() const;

 private:
  struct Job {
    std::function<void()> run;
    int64_t queued_at = 0;  // clock nanoseconds
  };
  void Work();

  const Options options_;
  mutable aside::Mutex mu_;
  std::deque<Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  // Mean time a job took to run (exponentially weighted), for the hint.
  double mean_run_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_API_MUTATION_QUEUE_H_
