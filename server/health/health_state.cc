#include "server/health/health_state.h"

#include <limits>

namespace aside::server {
namespace {

void Increment(uint32_t& count) {
  if (count != std::numeric_limits<uint32_t>::max()) {
    ++count;
  }
}

}  // namespace

bool ApplyProbeResult(uint32_t rise, uint32_t fall, bool success,
                      HealthCounters& counters) {
  const HealthState before = counters.state;
  if (success) {
    Increment(counters.consecutive_successes);
    counters.consecutive_failures = 0;
    if (before == HealthState::kUnknown ||
        (before == HealthState::kUnhealthy &&
         counters.consecutive_successes >= rise)) {
      counters.state = HealthState::kHealthy;
    }
  } else {
    Increment(counters.consecutive_failures);
    counters.consecutive_successes = 0;
    if (before == HealthState::kUnknown ||
        (before == HealthState::kHealthy &&
         counters.consecutive_failures >= fall)) {
      counters.state = HealthState::kUnhealthy;
    }
  }
  return counters.state != before;
}

}  // namespace aside::server
