// The arena's shared memory: one file mapped by the coordinator, the
// backend processes and the client processes (bench/arena/arena.cc).
// Backends publish their exact instantaneous queue length there, which the
// perfect-information dispatcher reads on every call; the coordinator
// publishes the current load step there, which the backends read to follow
// the scenario's schedule. Every field is a lock-free atomic: the processes
// share nothing else.
#ifndef ASIDE_BENCH_ARENA_ARENA_SHM_H_
#define ASIDE_BENCH_ARENA_ARENA_SHM_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

namespace aside::bench {

inline constexpr int kArenaMaxBackends = 256;
inline constexpr int kArenaMaxSteps = 16;

struct ArenaBackendSlot {
  // Calls in the backend now: queued plus in service.
  std::atomic<int32_t> rif{0};
  // Calls the perfect-information dispatcher sent that have not arrived
  // yet (it adds one when it chooses the backend, the backend takes it
  // back on arrival), so that its clients do not all choose the same
  // backend before its queue shows their calls.
  std::atomic<int32_t> dispatched{0};
  // The largest `rif` seen during each load step.
  std::atomic<int32_t> max_rif[kArenaMaxSteps];
  // Calls of each kind the backend received or sent since it started
  // (never reset; the coordinator takes differences): the workload's calls,
  // health checks, out-of-band ORCA reports written, any other call (a
  // client's probe), and workload calls dropped from the queue because
  // their client gave up before service.
  std::atomic<uint64_t> queries{0};
  std::atomic<uint64_t> health_checks{0};
  std::atomic<uint64_t> orca_reports{0};
  std::atomic<uint64_t> other_calls{0};
  std::atomic<uint64_t> abandoned{0};
};

struct ArenaShm {
  // CLOCK_MONOTONIC nanoseconds at which the run's first step starts (its
  // warmup); the clients of a run wait for it. 0 until every client of the
  // run is ready.
  std::atomic<int64_t> run_start_ns{0};
  // CLOCK_MONOTONIC nanoseconds at which the current step's measurement
  // starts (the zero of the scenario's event times); 0 between steps.
  std::atomic<int64_t> step_zero_ns{0};
  // The current step's index into max_rif, -1 between steps.
  std::atomic<int32_t> step{-1};
  ArenaBackendSlot backends[kArenaMaxBackends];
};

static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

// Maps the file at `path`, creating and sizing it when `create`; null on
// failure. The mapping lives until the process exits.
inline ArenaShm* MapArenaShm(const std::string& path, bool create) {
  const int fd =
      open(path.c_str(), create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0600);
  if (fd < 0) {
    return nullptr;
  }
  if (create && ftruncate(fd, sizeof(ArenaShm)) != 0) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(ArenaShm), PROT_READ | PROT_WRITE, MAP_SHARED,
                 fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    return nullptr;
  }
  // A fresh file is all zero bytes, which is every atomic's initial value
  // but `step`'s; the coordinator sets that.
  return static_cast<ArenaShm*>(p);
}

}  // namespace aside::bench

#endif  // ASIDE_BENCH_ARENA_ARENA_SHM_H_
