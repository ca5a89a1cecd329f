// The fleet's metrics, as handles into the server's registry (every family
// is defined in server/base/metrics.cc). Any handle may be null (tests).
#ifndef ASIDE_SERVER_FLEET_FLEET_METRICS_H_
#define ASIDE_SERVER_FLEET_FLEET_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "server/base/metrics.h"

namespace aside::server::fleet {

struct FleetMetrics {
  prometheus::Gauge* members = nullptr;
  prometheus::Gauge* targets_owned = nullptr;
  prometheus::Counter* transitions_published = nullptr;
  prometheus::Counter* transitions_applied = nullptr;
  prometheus::Counter* takeovers = nullptr;
  prometheus::Histogram* takeover_seconds = nullptr;
};

// The handles into the server's families.
inline FleetMetrics FleetMetricsOf(Metrics& m) {
  return {.members = &m.fleet_members,
          .targets_owned = &m.fleet_targets_owned,
          .transitions_published = &m.fleet_transitions_published,
          .transitions_applied = &m.fleet_transitions_applied,
          .takeovers = &m.fleet_takeovers,
          .takeover_seconds = &m.fleet_takeover_seconds};
}

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_FLEET_METRICS_H_
