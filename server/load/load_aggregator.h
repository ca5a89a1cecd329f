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
// Bounded influence. Anyone holding a report credential can lie, so no
// single reporter decides what the server believes about a backend. Every
// observation names a `source` (the credential it came in under, see
// server/auth/report_auth.h; a source may run many reporter ids). What an
// accepted observation feeds the server's load models (least-time and
// peak-EWMA samples, outlier detection) is the fleet's view, not the
// report's own:
// - each fresh source of the backend gets a weight: the requests it
//   reported within the window (exponentially decayed, time constant
//   `window`), capped by water-filling so that no source carries more than
//   `max_reporter_share` of the total (when there are too few sources for
//   the cap, all weigh the same);
// - the latency sample is the weighted median of the sources' latest means
//   (ties between two halves take the midpoint). A source holding less than
//   half the weight cannot move it outside the range of the others' values,
//   however many requests or reports it claims; a lone source is taken as
//   it reports, as before;
// - utilisation is the median of the fresh sources' latest values;
// - failures count towards outlier ejection only when sources holding at
//   least half the weight currently see failures in a row.
// A backend that only one source reports on still takes that source's view
// (there is nothing to weigh it against); see docs/operations.md.
//
// Fleet. Replicas share these aggregates (server/load/): each exports
// its own reporters' view per (group, backend, source) (ExportLocal) and
// folds in what its peers export (ApplyPeer). A peer's entry weighs in
// like one more reporter of its source, so one credential reporting to
// several replicas is still one source, and the bounded-influence rules
// above hold fleet-wide. What came from peers is never exported again.
//
// Thread-safe: one mutex; the report path is a few map lookups per
// observation plus one pass over the backend's fresh reporters.
#ifndef ASIDE_SERVER_LOAD_LOAD_AGGREGATOR_H_
#define ASIDE_SERVER_LOAD_LOAD_AGGREGATOR_H_

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
#include "lib/load/orca_weight.h"
#include "lib/sync.h"

namespace aside::server {

// One observation of one backend by one reporter, counters cumulative.
struct LoadObservation {
  // The unit whose influence is bounded (the credential; empty: the
  // reporter id itself).
  std::string source;
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

// One (group, backend, source) aggregate as a replica shares it with its
// peers: counters cumulative (summed over the deltas the source's reporters
// were accepted for), gauges over the source's reporters that reported
// within the window.
struct SourceAggregate {
  std::string group;
  std::string address;
  std::string source;
  uint64_t requests = 0;
  uint64_t failures = 0;
  int64_t latency_sum_nanos = 0;
  int64_t first_byte_sum_nanos = 0;
  uint64_t first_byte_requests = 0;
  uint64_t in_flight = 0;
  uint32_t consecutive_failures = 0;
  uint32_t reporters = 0;
  std::optional<double> utilization;

  friend bool operator==(const SourceAggregate&,
                         const SourceAggregate&) = default;
};

// One group's grpclb client stats and LRS-dropped calls, cumulative.
struct GroupCallTotals {
  std::string group;
  uint64_t calls_started = 0;
  uint64_t calls_finished = 0;
  uint64_t failed_to_send = 0;
  uint64_t known_received = 0;
  std::map<std::string, uint64_t> dropped;
  uint64_t lrs_dropped = 0;

  friend bool operator==(const GroupCallTotals&,
                         const GroupCallTotals&) = default;
};

// A backend's latest ORCA report from one replica's own stream
// (server/load/orca_collector.h); `seq` counts that replica's reports of
// the backend.
struct OrcaShare {
  std::string address;
  OrcaLoad load;
  uint64_t seq = 0;
  // The publisher owns the backend's stream.
  bool owner = false;

  friend bool operator==(const OrcaShare&, const OrcaShare&) = default;
};

// What a replica shares: its own aggregates, sorted by (group, address,
// source), its groups' call totals, sorted by group, and the ORCA reports
// of its own streams, sorted by address.
struct LocalLoads {
  std::vector<SourceAggregate> sources;
  std::vector<GroupCallTotals> calls;
  std::vector<OrcaShare> orca;
};

// What one message from a peer says.
struct PeerLoadUpdate {
  struct Key {
    std::string group;
    std::string address;
    std::string source;
  };
  // Replaces everything known from the peer.
  bool snapshot = false;
  std::vector<SourceAggregate> loads;
  std::vector<Key> removed;
  std::vector<GroupCallTotals> calls;
  std::vector<OrcaShare> orca;
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
    // The fleet's latency view after this observation (the weighted
    // median over sources, see the file comment); 0 when no new request
    // completed.
    absl::Duration mean_latency;
    absl::Duration mean_first_byte_latency;
    // Whether the fleet's view counts this batch as failed (more failures
    // than successes by weighted median of the sources' latest batches).
    bool failed = false;
    uint32_t consecutive_failures = 0;
    // Whether sources holding at least half the weight see failures in a
    // row now (outlier detection acts only then).
    bool failures_corroborated = false;
  };
  using Listener = std::function<void(const Accepted&)>;

  // `max_reporter_share` in (0, 1]: the most weight one source carries.
  LoadAggregator(const Clock* clock, absl::Duration window,
                 Membership membership, double max_reporter_share = 1.0);

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

  // The share of `group`'s calls its clients should drop so that the rate
  // above stays at `max_requests_per_second`: the excess over it, at most
  // kMaxOverloadFraction; 0 without a limit (<= 0). One level per group,
  // read from the rate at most once a second (the clock's) and then the
  // same for every caller, so every edge that sends drops (grpclb server
  // lists, xDS ClusterLoadAssignments) drops the same share and builds its
  // message once per level.
  static constexpr double kMaxOverloadFraction = 0.9;
  double OverloadFraction(const std::string& group,
                          double max_requests_per_second) const;

  // The aggregated view of one backend (zeros when nothing is known).
  LoadSnapshot Snapshot(const std::string& group,
                        const std::string& address) const;

  // The reporters (ReportLoad, heard from within the window) whose last
  // report showed calls in flight to the backend, by the name they report
  // as, with that count.
  std::vector<std::pair<std::string, uint64_t>> InFlight(
      const std::string& group, const std::string& address) const;

  // Drops state of groups or backends that no longer exist and of
  // reporters that went quiet long ago. Called periodically.
  void Prune();

  // This replica's own aggregates (never what peers contributed): the
  // sources with a reporter fresh within the window, and every group's
  // call totals.
  LocalLoads ExportLocal() const;
  // Folds in one update from `peer` (even an empty one: it says the peer
  // is alive). Each entry is validated like a report; the rejected ones
  // are returned with their index in `update.loads` and a reason naming
  // the field. A peer entry's first counters are its baseline; later ones
  // add their growth, and a counter that went backwards starts a new
  // baseline.
  std::vector<std::pair<size_t, std::string>> ApplyPeer(
      const std::string& peer, const PeerLoadUpdate& update);
  // Forgets everything `peer` contributed (it left the fleet). Rates it
  // already added age out of the window like any other.
  void RemovePeer(const std::string& peer);
  // Peers with contributions, and when each was last heard from.
  std::map<std::string, absl::Time> Peers() const;

  absl::Duration window() const { return window_; }

  // The weights `weights` carry after capping each at `share` of the total
  // by water-filling (all equal when there are fewer than 1/share of
  // them). Exposed for tests.
  static std::vector<double> CapWeights(std::vector<double> weights,
                                        double share);
  // The weighted median of (value, weight) pairs; the midpoint when the
  // weight splits exactly in half between two values. NaN when empty or
  // weightless.
  static double WeightedMedian(std::vector<std::pair<double, double>> values);

 private:
  static constexpr uint64_t kMaxInFlight = 10'000'000;
  // "group\naddress", the key of backends_.
  static std::string Key(const std::string& group, const std::string& address);
  // A utilisation value is finite and within 0..10.
  static absl::Status CheckUtilization(const char* field,
                                       const std::optional<double>& v);
  // Checks one peer entry as a report is checked (membership included).
  absl::Status ValidatePeerEntry(const SourceAggregate& a) const;

  struct Bucket {
    int64_t second = 0;
    uint64_t requests = 0;
    uint64_t failures = 0;
    int64_t latency_nanos = 0;
    int64_t first_byte_nanos = 0;
    uint64_t first_byte_requests = 0;
  };
  struct ReporterState {
    std::string source;
    uint64_t requests = 0;
    uint64_t failures = 0;
    int64_t latency_sum_nanos = 0;
    int64_t first_byte_sum_nanos = 0;
    uint64_t in_flight = 0;
    uint32_t consecutive_failures = 0;
    int64_t last_seen_nanos = 0;
    // Requests within the window, decayed by exp(-dt/window) from
    // `decayed_at_nanos`.
    double window_requests = 0;
    int64_t decayed_at_nanos = 0;
    // Means of the latest batch with completed requests (first byte < 0:
    // unknown), whether it failed more than it succeeded, and the latest
    // utilisation.
    double last_latency_nanos = -1;
    double last_first_byte_nanos = -1;
    bool last_failed = false;
    std::optional<double> utilization;
  };
  // The fleet's view of one backend (see the file comment).
  struct Bounded {
    double latency_nanos = -1;
    double first_byte_nanos = -1;
    bool failed = false;
    bool failures_corroborated = false;
    std::optional<double> utilization;
  };
  // The counters a source's local reporters were accepted for (exported).
  struct SourceTotals {
    uint64_t requests = 0;
    uint64_t failures = 0;
    int64_t latency_nanos = 0;
    int64_t first_byte_nanos = 0;
    uint64_t first_byte_requests = 0;
  };
  // One peer's contribution for one source, kept like a reporter whose
  // counters are the peer's totals; fresh while the peer holds it.
  struct RemoteState {
    ReporterState r;
    uint64_t first_byte_requests = 0;
    uint32_t reporters = 0;
  };
  struct BackendState {
    absl::flat_hash_map<std::string, ReporterState> reporters;
    absl::flat_hash_map<std::string, SourceTotals> local_sources;
    // Keyed by (peer, source).
    absl::flat_hash_map<std::pair<std::string, std::string>, RemoteState>
        remote;
    std::deque<Bucket> buckets;  // ascending seconds, within the window
    std::optional<double> utilization;
    absl::Time utilization_at = absl::InfinitePast();
  };

  void AddToBucketsLocked(std::deque<Bucket>& buckets, int64_t now_nanos,
                          const Bucket& delta)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Bounded BoundedLocked(const BackendState& state, int64_t now_nanos) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Folds an accepted `delta` and the gauges into reporter `r` of `state`
  // at `now`; returns what the listener is told.
  Accepted FoldLocked(BackendState& state, ReporterState& r,
                      const Bucket& delta, uint64_t in_flight,
                      uint32_t consecutive_failures,
                      const std::optional<double>& utilization, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Folds one validated peer entry in; true when the listener hears of it.
  bool ApplyPeerEntryLocked(const std::string& peer, const SourceAggregate& a,
                            int64_t now, Accepted* accepted, std::string* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* const clock_;
  const absl::Duration window_;
  const Membership membership_;
  const double max_reporter_share_;
  Listener listener_;

  // The overload levels (OverloadFraction): taken before mu_, never after.
  struct OverloadLevel {
    double limit = 0;
    double fraction = 0;
    int64_t read_at = 0;  // clock nanoseconds
  };
  mutable aside::Mutex overload_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::flat_hash_map<std::string, OverloadLevel> overloads_
      ABSL_GUARDED_BY(overload_mu_);
  mutable int64_t overloads_swept_at_ ABSL_GUARDED_BY(overload_mu_) = 0;

  mutable aside::Mutex mu_;
  // Keyed by "group\naddress".
  absl::flat_hash_map<std::string, BackendState> backends_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, ClientStatsTotals> client_stats_
      ABSL_GUARDED_BY(mu_);
  // grpclb calls finished per group, in one-second buckets over the window.
  absl::flat_hash_map<std::string, std::deque<Bucket>> client_call_buckets_
      ABSL_GUARDED_BY(mu_);
  // Calls xDS clients dropped, per group, since start (exported).
  absl::flat_hash_map<std::string, uint64_t> lrs_dropped_ ABSL_GUARDED_BY(mu_);
  // Per peer: its groups' call totals, and when it was last heard from.
  struct PeerState {
    absl::flat_hash_map<std::string, GroupCallTotals> calls;
    absl::flat_hash_map<std::string, absl::Time> calls_at;
    absl::Time heard = absl::InfinitePast();
  };
  absl::flat_hash_map<std::string, PeerState> peers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_LOAD_LOAD_AGGREGATOR_H_
