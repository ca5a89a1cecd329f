// The status page's short history: every `interval` (5 s) one sample per
// group and per backend, the last `samples` (180: 15 minutes) kept, served
// at /status/history.json and drawn by the page.
//
// Per group: picks/s and failed picks/s (the Pick RPC's counters, the same
// the page's table shows), requests/s, errors/s and mean latency from load
// reports (summed, latency weighted by requests), ready and total backends.
// Per backend: its share of the group's picks in the interval (server-side
// picks; when the group had none, its share of reported requests), the
// share its effective weight asks for (effective weight over the sum of the
// eligible members'; 0 when not eligible), effective weight, health,
// ready/drained/eligible, and from load reports in-flight, requests/s,
// errors/s and mean latency. A value never measured (no load report yet,
// no picks in the interval, a rate's first sample) is kept as "not
// measured" and served as null, never as a default.
//
// Memory is bounded and allocated per series when it is first tracked:
// each series is a fixed ring of `samples` points (24 bytes a point), so a
// sample is O(1) per series and nothing grows with time. At most
// `max_groups` groups, `max_backends_per_group` backends of a group and
// `max_backends` backends in all are tracked; a group or backend past a
// cap has no history, and the counts of those not tracked are served
// beside the series (and on the page). A series not seen for a whole
// window (a deleted group or removed backend) is forgotten.
//
// Time comes from the injected Clock: Sample() always samples, MaybeSample()
// samples when `interval` has passed on that clock since the last one (the
// timer of Start() calls it every second, or every interval if
// shorter), so tests drive time with FakeClock.
//
// Thread-safety: every method from any thread. Gathering reads each source
// through its own thread-safe accessor (as StatusPage does) with no lock of
// ours held; mu_ is then taken alone to write the rings and to read them.
#ifndef ASIDE_SERVER_STATUS_HISTORY_H_
#define ASIDE_SERVER_STATUS_HISTORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/base/event_loop.h"
#include "server/status/events.h"

namespace aside::server {

class GroupRegistry;
class LoadAggregator;

struct HistoryOptions {
  absl::Duration interval = absl::Seconds(5);
  size_t samples = 180;
  size_t max_groups = 1000;
  size_t max_backends_per_group = 64;
  size_t max_backends = 10000;
  const Clock* clock = &SystemClock::Get();
};

struct HistorySources {
  const GroupRegistry* groups = nullptr;  // required for Sample()
  const LoadAggregator* loads = nullptr;  // optional: no load columns
  // Optional: where store and fleet changes noticed at a sample go.
  EventRecorder* events = nullptr;
  // Optional: whether the state store is up now.
  std::function<bool()> store_up;
  // Optional: the fleet's live member ids now.
  std::function<std::vector<std::string>()> fleet_members;
};

// One sample's input, as gathered from the sources (tests and benchmarks
// feed it directly).
struct HistoryBackendInput {
  std::string address;
  uint32_t effective_weight = 0;
  HealthState health = HealthState::kUnknown;
  bool ready = false;
  bool drained = false;
  bool eligible = false;
  uint64_t picks = 0;     // cumulative server-side picks
  bool reported = false;  // any load reporter within the window
  double requests_per_second = 0;
  double errors_per_second = 0;
  double latency_ms = 0;  // mean over the window
  uint64_t window_requests = 0;
  uint64_t in_flight = 0;
};
struct HistoryGroupInput {
  std::string name;
  uint64_t picks = 0;  // cumulative Pick RPCs answered with a backend
  uint64_t pick_failures = 0;
  uint32_t ready = 0;
  uint32_t total = 0;
  std::vector<HistoryBackendInput> backends;
};

// A group's kept history, oldest first, aligned with `times` (NaN, and
// nullopt, where not measured or not tracked yet).
struct GroupHistory {
  struct Backend {
    std::string address;
    std::vector<double> pick_share;
    std::vector<double> weight_share;
    std::vector<std::optional<uint32_t>> effective_weight;
    std::vector<std::optional<HealthState>> health;
    std::vector<std::optional<bool>> ready;
    std::vector<std::optional<bool>> drained;
    std::vector<double> in_flight;
    std::vector<double> requests_per_second;
    std::vector<double> errors_per_second;
    std::vector<double> latency_ms;
  };
  std::string name;
  std::vector<absl::Time> times;
  std::vector<double> picks_per_second;
  std::vector<double> pick_failures_per_second;
  std::vector<double> requests_per_second;
  std::vector<double> errors_per_second;
  std::vector<double> latency_ms;
  std::vector<std::optional<uint32_t>> ready;
  std::vector<std::optional<uint32_t>> total;
  std::vector<Backend> backends;    // sorted by address
  uint64_t untracked_backends = 0;  // at the last sample
};

class StatusHistory {
 public:
  StatusHistory(HistorySources sources, HistoryOptions options = {});
  ~StatusHistory();  // Stop()
  StatusHistory(const StatusHistory&) = delete;
  StatusHistory& operator=(const StatusHistory&) = delete;

  // Starts sampling (once), on `loop` (null: a thread of its own). Stop()
  // ends it; idempotent.
  void Start(EventLoop* loop = nullptr);
  void Stop();

  // Samples now if `interval` has passed since the last sample (or none
  // was taken); returns whether it did.
  bool MaybeSample();
  // Gathers from the sources and records one sample, now. O(groups +
  // backends) reads of lock-free tables and the load aggregator.
  void Sample();
  // Records one sample of `groups` at the clock's now: O(1) per tracked
  // series, plus a series' ring allocated when it is first tracked.
  void Record(const std::vector<HistoryGroupInput>& groups);

  // The kept history of one group (nullopt when it is not tracked).
  std::optional<GroupHistory> Read(absl::string_view group) const;
  // /status/history.json: every tracked group (by name, those after
  // `after`), or only `group` when not empty, with backend series when
  // `backends`. Groups stop once the response passes `max_bytes`; it then
  // says "truncated": true and "next_after": the name to go on after.
  static constexpr size_t kMaxJsonBytes = 1 << 20;
  std::string Json(absl::string_view group, bool backends,
                   absl::string_view after = {},
                   size_t max_bytes = kMaxJsonBytes) const;

  struct Stats {
    uint64_t samples = 0;  // taken since start
    size_t groups = 0;     // tracked
    size_t backends = 0;
    uint64_t untracked_groups = 0;  // at the last sample
    uint64_t untracked_backends = 0;
    size_t ring_bytes = 0;  // the tracked series' rings
  };
  Stats stats() const;
  const HistoryOptions& options() const { return options_; }

 private:
  struct GroupPoint;
  struct BackendPoint;
  struct BackendSeries;
  struct GroupSeries;

  std::vector<HistoryGroupInput> Gather() const;
  void NoticeStoreAndFleet();
  std::optional<GroupHistory> ReadLocked(absl::string_view group) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HistorySources sources_;
  const HistoryOptions options_;

  mutable aside::Mutex mu_;
  // Sample number s (1, 2, ...) lives in slot (s - 1) % samples.
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_nanos_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<int64_t> times_unix_ms_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<GroupSeries>> groups_
      ABSL_GUARDED_BY(mu_);
  size_t backend_series_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t untracked_groups_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t untracked_backends_ ABSL_GUARDED_BY(mu_) = 0;

  // What the last sample saw of the store and the fleet (sampler only,
  // under notice_mu_, taken alone).
  aside::Mutex notice_mu_;
  std::optional<bool> store_up_ ABSL_GUARDED_BY(notice_mu_);
  std::optional<absl::flat_hash_set<std::string>> members_
      ABSL_GUARDED_BY(notice_mu_);

  std::unique_ptr<Ticker> ticker_;  // Start and Stop only
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STATUS_HISTORY_H_
