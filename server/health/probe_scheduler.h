// Internal: when each health-check target is probed next (DESIGN.md §3).
// Pure logic over explicit time: no sockets, no clock, no thread. The
// prober's glue (prober.cc) feeds it events with the current monotonic time
// and carries out what it answers: which probes to start now, and which
// probes in flight have run out of time.
//
// - A new target is due at once; the next probe of a target is due
//   interval x (1 +/- jitter) after the start of the previous one, and is
//   scheduled only when that one finished: at most one probe per target is
//   in flight.
// - All times are rounded up to ticks of interval / 100 (1..10 ms): targets
//   due together start in one batch on one wake-up, and a 1 s interval has
//   only ~100 live ticks. Due probes live in a calendar (a map from due tick
//   to the targets due then, in the order they were scheduled); entries are
//   cancelled lazily by sequence number.
// - At most `max_in_flight` probes at once; probes due beyond that wait in
//   one FIFO queue (fair: in the order they became due).
// - Timeouts (for probes whose timing asks for them): one FIFO per
//   (timeout, tick), in start order, which is the order they expire in, so
//   starting and ending a probe are O(1) and a wake-up looks at the oldest
//   probe of each list only.
//
// Thread-safety: none; one thread (the prober's) calls everything.
#ifndef ASIDE_SERVER_HEALTH_PROBE_SCHEDULER_H_
#define ASIDE_SERVER_HEALTH_PROBE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace aside::server::health_internal {

// Due times are rounded up to a tick of interval / 100, within 1..10 ms,
// so that targets due together start in one batch: one timer wake-up
// starts them all, and on loopback their connects complete together too
// (one epoll wake-up instead of one per probe). 10 ms is 1 % of the
// default-sized 1 s interval, well inside its 5 % jitter.
inline constexpr int64_t kMinTickNanos = 1'000'000;
inline constexpr int64_t kMaxTickNanos = 10'000'000;

class ProbeScheduler {
 public:
  // How one target is probed. Times in nanoseconds.
  struct Timing {
    int64_t interval = 0;
    int64_t timeout = 0;
    double jitter = 0;  // fraction of the interval, 0..0.5
    // Whether the scheduler reports the probe's timeout (socket probes);
    // false when the probe enforces its own deadline (gRPC).
    bool track_timeout = true;
  };
  static int64_t TickFor(int64_t interval_nanos);
  static int64_t RoundUpToTick(int64_t nanos, int64_t tick) {
    return (nanos + tick - 1) / tick * tick;
  }

  // What the caller must do now.
  struct Actions {
    std::vector<uint64_t> start;      // start these probes, in this order
    std::vector<uint64_t> timed_out;  // end these probes as timed out
    void clear() {
      start.clear();
      timed_out.clear();
    }
  };

  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  ProbeScheduler(uint32_t max_in_flight, uint64_t seed);
  ProbeScheduler(const ProbeScheduler&) = delete;
  ProbeScheduler& operator=(const ProbeScheduler&) = delete;

  // Registers target `id` (unknown so far); it is due at once: it starts
  // now (appended to `out.start`) or waits for a free slot.
  void Add(uint64_t id, const Timing& timing, int64_t now, Actions& out);
  // Forgets target `id`. A probe of it in flight keeps its slot until
  // Finished(id) is called for it; nothing of it starts again.
  void Remove(uint64_t id);
  // The probe of `id` in flight ended at `now`: frees its slot (starting
  // queued probes) and, unless the target was removed, schedules its next
  // probe. Ignored when `id` has no probe in flight.
  void Finished(uint64_t id, int64_t now, Actions& out);
  // Starts the probes due by `now` (or queues them) and reports the
  // probes whose timeout has passed (each once).
  void Poll(int64_t now, Actions& out);
  // Forgets everything (shutdown): nothing starts any more.
  void Clear();

  // When Poll has something to do next (a due tick or a timeout), or kNever.
  int64_t NextWake() const;

  uint32_t in_flight() const { return in_flight_; }
  size_t waiting() const { return waiting_.size(); }
  size_t size() const { return slots_.size(); }
  // When the probe in flight (or the last one) of `id` started, or -1.
  int64_t started(uint64_t id) const;

 private:
  struct TimeoutList;
  struct Slot {
    uint64_t id = 0;
    Timing timing;
    int64_t tick = 0;
    int64_t started = 0;
    uint64_t schedule_seq = 0;  // the pending calendar entry
    bool removed = false;
    bool in_flight = false;
    bool queued = false;
    TimeoutList* timeouts = nullptr;  // the list for (timeout, tick)
    Slot* timeout_prev = nullptr;
    Slot* timeout_next = nullptr;
    bool timeout_linked = false;
  };
  // The probes in flight with one (timeout, tick), in start order: an
  // intrusive list. A slot in flight stays in slots_ until it finishes.
  struct TimeoutList {
    Slot* head = nullptr;
    Slot* tail = nullptr;
  };
  struct ScheduleEntry {
    uint64_t seq = 0;  // the schedule_seq it belongs to
    std::shared_ptr<Slot> slot;
  };

  void StartOrQueue(const std::shared_ptr<Slot>& slot, int64_t now,
                    Actions& out);
  void Start(Slot& slot, int64_t now, Actions& out);
  void DrainQueue(int64_t now, Actions& out);
  void ScheduleNext(const std::shared_ptr<Slot>& slot);
  static int64_t TimeoutDue(const Slot& slot) {
    return RoundUpToTick(slot.started + slot.timing.timeout, slot.tick);
  }
  static void LinkTimeout(Slot& slot);
  static void UnlinkTimeout(Slot& slot);

  const uint32_t max_in_flight_;
  std::mt19937_64 rng_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Slot>> slots_;
  std::deque<std::shared_ptr<Slot>> waiting_;
  std::map<int64_t, std::vector<ScheduleEntry>> calendar_;  // by due tick
  std::vector<std::vector<ScheduleEntry>> spare_buckets_;
  // By (timeout, tick); nodes are stable, lists are never erased (there are
  // as many as distinct specs).
  std::map<std::pair<int64_t, int64_t>, TimeoutList> timeout_lists_;
  uint32_t in_flight_ = 0;
};

}  // namespace aside::server::health_internal

#endif  // ASIDE_SERVER_HEALTH_PROBE_SCHEDULER_H_
