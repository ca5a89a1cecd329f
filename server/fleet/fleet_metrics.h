// The fleet's metrics, as handles into the server's registry (every family
// is defined in server/base/metrics.cc). Any handle may be null (tests).
#ifndef ASIDE_SERVER_FLEET_FLEET_METRICS_H_
#define ASIDE_SERVER_FLEET_FLEET_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

namespace aside::server::fleet {

struct FleetMetrics {
  prometheus::Gauge* members = nullptr;
  prometheus::Gauge* targets_owned = nullptr;
  prometheus::Counter* transitions_published = nullptr;
  prometheus::Counter* transitions_applied = nullptr;
  prometheus::Counter* takeovers = nullptr;
  prometheus::Histogram* takeover_seconds = nullptr;
};

}  // namespace aside::server::fleet

#endif  // ASIDE_SERVER_FLEET_FLEET_METRICS_H_
