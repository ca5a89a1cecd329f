// Aggregates load reports from every reporter (client stubs through
// ReportLoad, stock gRPC clients through grpclb ClientStats, backends
// reporting their own utilisation) into one windowed view per group and
// backend.
//
// Reporters send cumulative counters; the aggregator keeps each reporter's
// last values, validates every observation on its own (a bad one is
// rejected with a reason naming the field and never touches an average),
// and adds the deltas into one-second buckets over `window`. Gauges
// (in-flight, consecutive failures) are kept per reporter and count only
// while the reporter is fresh (reported within the window).
//
// Thread-safe: one mutex; the report path is a few map lookups per
// observation.
#ifndef ASIDE_SERVER_LOAD_AGGREGATOR_H_
#define ASIDE_SERVER_LOAD_AGGREGATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"

namespace aside::server {

// One observation of one backend by one reporter, counters cumulative.
struct LoadObservation {
  std::string group;
  std::string address;
  uint64_t requests = 0;
  uint64_t failures = 0;
  int64_t latency_sum_nanos = 0;
  int64_t first_byte_latency_sum_nanos = 0;
  uint64_t in_flight = 0;
  uint32_t consecutive_failures = 0;
  // Backend-reported utilisation (ORCA); unset when unknown.
  std::optional<double> cpu;
  std::optional<double> application;
  bool reset = false;
  // True for reporters that send deltas (grpclb ClientStats) rather than
  // cumulative counters.
  bool deltas = false;
};

// grpclb ClientStats of one group, summed since the server started.
struct ClientStatsTotals {
  uint64_t calls_started = 0;
  uint64_t calls_finished = 0;
  uint64_t failed_to_send = 0;
  uint64_t known_received = 0;
  std::map<std::string, uint64_t> dropped;  // by drop token
  absl::Time last_report = absl::InfinitePast();
};

// The aggregated view of one backend.
struct LoadSnapshot {
  double requests_per_second = 0;
  double failure_ratio = 0;
  // Means over the window; 0 when nothing completed.
  absl::Duration mean_latency;
  absl::Duration mean_first_byte_latency;
  uint64_t in_flight = 0;
  std::optional<double> utilization;
  absl::Time utilization_at = absl::InfinitePast();
  uint32_t reporters = 0;
  uint32_t consecutive_failures = 0;
  uint64_t window_requests = 0;
  uint64_t window_failures = 0;
};

class LoadAggregator {
 public:
  // Decides whether (group, address) exists; unknown ones are rejected.
  using Membership =
      std::function<bool(const std::string& group, const std::string& address)>;
  // Told about every accepted observation after it is folded in (outside
  // the aggregator's lock): the per-report latency mean and failures feed
  // the server's load models and outlier detection.
  struct Accepted {
    std::string group;
    std::string address;
    uint64_t new_requests = 0;
    uint64_t new_failures = 0;
    // Mean latencies of the new requests; 0 when none completed.
    absl::Duration mean_latency;
    absl::Duration mean_first_byte_latency;
    uint32_t consecutive_failures = 0;
  };
  using Listener = std::function<void(const Accepted&)>;

  LoadAggregator(const Clock* clock, absl::Duration window,
                 Membership membership);

  void set_listener(Listener listener);

  // Validates and folds in one observation from `reporter`; returns the
  // reason when it is rejected (the field name first).
  absl::Status Add(const std::string& reporter, const LoadObservation& o);

  // Adds one grpclb ClientStats report (deltas since the client's last one)
  // for `group`. Negative counts are rejected; drop tokens are kept as
  // given, at most 64 distinct ones per group.
  absl::Status AddClientStats(
      const std::string& group, int64_t started, int64_t finished,
      int64_t failed_to_send, int64_t known_received,
      const std::vector<std::pair<std::string, int64_t>>& dropped);
  ClientStatsTotals ClientStats(const std::string& group) const;

  // Calls stock xDS clients dropped for `group` (the dropped requests of
  // their LRS reports). Their locality counts cover only the calls they
  // sent, so these make GroupRequestsPerSecond the offered rate, as grpclb
  // client stats do.
  void AddDroppedCalls(const std::string& group, uint64_t dropped);

  // Completed requests per second over the window: ReportLoad requests
  // summed over the group's backends, plus the calls grpclb clients
  // reported finished (ClientStats count a dropped call as finished, so
  // theirs is the offered rate, drops included).
  double GroupRequestsPerSecond(const std::string& group) const;

  // The aggregated view of one backend (zeros when nothing is known).
  LoadSnapshot Snapshot(const std::string& group,
                        const std::string& address) const;

  // Drops state of groups or backends that no longer exist and of
  // reporters that went quiet long ago. Called periodically.
  void Prune();

  absl::Duration window() const { return window_; }

 private:
  struct Bucket {
    int64_t second = 0;
    uint64_t requests = 0;
    uint64_t failures = 0;
    int64_t latency_nanos = 0;
    int64_t first_byte_nanos = 0;
    uint64_t first_byte_requests = 0;
  };
  struct ReporterState {
    uint64_t requests = 0;
    uint64_t failures = 0;
    int64_t latency_sum_nanos = 0;
    int64_t first_byte_sum_nanos = 0;
    uint64_t in_flight = 0;
    uint32_t consecutive_failures = 0;
    int64_t last_seen_nanos = 0;
  };
  struct BackendState {
    absl::flat_hash_map<std::string, ReporterState> reporters;
    std::deque<Bucket> buckets;  // ascending seconds, within the window
    std::optional<double> utilization;
    absl::Time utilization_at = absl::InfinitePast();
  };

  void AddToBucketsLocked(std::deque<Bucket>& buckets, int64_t now_nanos,
                          const Bucket& delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const absl::Duration window_;
  const Membership membership_;
  Listener listener_;

  mutable aside::Mutex mu_;
  // Keyed by "group\naddress".
  absl::flat_hash_map<std::string, BackendState> backends_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ClientStatsTotals> client_stats_
      ABSL_GUARDED_BY(mu_);
  // grpclb calls finished per group, in one-second buckets over the window.
  absl::flat_hash_map<std::string, std::deque<Bucket>> client_call_buckets_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_LOAD_AGGREGATOR_H_
