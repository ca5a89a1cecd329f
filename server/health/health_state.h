// The rise/fall state machine of one health-check target, as pure logic so
// that it can be tested on its own and replayed against a reference model.
//
// Rules (DESIGN.md §3):
// - A target starts UNKNOWN. Its first probe result decides at once:
//   success -> HEALTHY, failure -> UNHEALTHY. A new target counts as ready
//   until then (unless require_first_probe), so waiting for `fall` failures
//   would route traffic to a dead backend for fall x interval; and with
//   require_first_probe, waiting for `rise` successes would delay a new
//   backend for no benefit. Envoy treats a host's first check the same way.
// - HEALTHY -> UNHEALTHY after `fall` consecutive failures.
// - UNHEALTHY -> HEALTHY after `rise` consecutive successes.
// - A success clears the consecutive-failure count and vice versa; the counts
//   saturate at UINT32_MAX.
#ifndef ASIDE_SERVER_HEALTH_HEALTH_STATE_H_
#define ASIDE_SERVER_HEALTH_HEALTH_STATE_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "lib/backend.h"
#include "server/schema/group_spec.h"

namespace aside::server {

// The state of one target and its consecutive counts. Plain data; the
// registry guards it with its mutex.
struct HealthCounters {
  HealthState state = HealthState::kUnknown;
  uint32_t consecutive_successes = 0;
  uint32_t consecutive_failures = 0;
};

// Applies one probe result. Returns true when `counters.state` changed.
// O(1), no allocation.
bool ApplyProbeResult(uint32_t rise, uint32_t fall, bool success,
                      HealthCounters& counters);

// Whether a target in `state` counts as ready: HEALTHY, or UNKNOWN when the
// spec does not require a first probe.
inline bool HealthReady(HealthState state, bool require_first_probe) {
  return state == HealthState::kHealthy ||
         (state == HealthState::kUnknown && !require_first_probe);
}

}  // namespace aside::server

#endif  // ASIDE_SERVER_HEALTH_HEALTH_STATE_H_
