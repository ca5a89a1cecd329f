// The health registry's Prometheus metrics, resolved to children once so
// that recording a probe does no label lookup.
//
//   aside_probes_total{kind,result}          counter  probes finished, by
//       kind (tcp, http, grpc) and result (success, failure). A gRPC
//       backend without the health service counts as success.
//   aside_probe_duration_seconds{kind}       histogram  time from the start
//       of a probe (after any wait for a concurrency slot) to its result,
//       timeouts included; buckets 0.5 ms .. 10 s.
//   aside_health_targets{state}              gauge  targets by state
//       (unknown, healthy, unhealthy); a target shared by N groups counts
//       once; kind `none` targets count as healthy.
//   aside_health_transitions_total{to}       counter  state flips, by the
//       state entered (healthy, unhealthy).
//
// Written on the prober thread and under the registry's mutex; the
// prometheus-cpp children are thread-safe. Families are registered in the
// registry given to the constructor (merged when they already exist).
#ifndef ASIDE_SERVER_HEALTH_HEALTH_METRICS_H_
#define ASIDE_SERVER_HEALTH_HEALTH_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>

#include "lib/backend.h"
#include "server/schema/group_spec.h"

namespace aside::server {

class HealthMetrics {
 public:
  explicit HealthMetrics(prometheus::Registry& registry);
  HealthMetrics(const HealthMetrics&) = delete;
  HealthMetrics& operator=(const HealthMetrics&) = delete;

  // A finished probe of `kind` (not kNone).
  void RecordProbe(HealthCheckSpec::Kind kind, bool success, double seconds);
  // A target appeared in / left `state` (aside_health_targets).
  void AddTarget(HealthState state) { targets_[Index(state)]->Increment(); }
  void RemoveTarget(HealthState state) { targets_[Index(state)]->Decrement(); }
  // A target went from `from` to `to`.
  void RecordTransition(HealthState from, HealthState to);

 private:
  static size_t Index(HealthState state) { return static_cast<size_t>(state); }
  static size_t Index(HealthCheckSpec::Kind kind) {
    return static_cast<size_t>(kind);
  }

  // Indexed by HealthCheckSpec::Kind (tcp, http, grpc) and result.
  std::array<std::array<prometheus::Counter*, 2>, 3> probes_{};
  std::array<prometheus::Histogram*, 3> durations_{};
  // Indexed by HealthState.
  std::array<prometheus::Gauge*, 3> targets_{};
  std::array<prometheus::Counter*, 3> transitions_{};  // none for unknown
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_HEALTH_HEALTH_METRICS_H_
