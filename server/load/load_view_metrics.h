// The fleet load view's Prometheus metrics (docs/metrics.md):
//
//   aside_fleet_load_view_age_seconds{peer}       gauge  time since the
//       last update (heartbeats included) from each peer this replica
//       subscribes to (never heard from: since subscribing); `peer` is
//       the peer's replica id when membership gave it, else its address.
//   aside_fleet_load_view_bytes_total{direction}   counter  LoadView
//       message bytes sent (to subscribers) and received (from peers).
//   aside_fleet_load_view_updates_total{direction} counter  messages.
//   aside_fleet_load_view_entries_total{direction} counter  (group,
//       backend, source) entries carried.
//   aside_fleet_load_view_rejected_total            counter  peer entries
//       refused (unknown backend, bad value; logged with the field).
//   aside_fleet_load_view_subscribers               gauge  peers
//       subscribed to this replica now.
//
// prometheus-cpp children are thread-safe; families are registered in the
// registry given (merged when they already exist).
#ifndef ASIDE_SERVER_LOAD_LOAD_VIEW_METRICS_H_
#define ASIDE_SERVER_LOAD_LOAD_VIEW_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace aside::server {

struct LoadViewMetrics {
  explicit LoadViewMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Gauge>& age;
  prometheus::Counter& bytes_sent;
  prometheus::Counter& bytes_received;
  prometheus::Counter& updates_sent;
  prometheus::Counter& updates_received;
  prometheus::Counter& entries_sent;
  prometheus::Counter& entries_received;
  prometheus::Counter& rejected;
  prometheus::Gauge& subscribers;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_LOAD_LOAD_VIEW_METRICS_H_
