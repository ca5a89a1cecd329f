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

absl::string_view ProbeKindName(HealthCheckSpec::Kind kind) {
  switch (kind) {
    case HealthCheckSpec::Kind::kTcp:
      return "tcp";
    case HealthCheckSpec::Kind::kHttp:
      return "http";
    case HealthCheckSpec::Kind::kGrpc:
      return "grpc";
    case HealthCheckSpec::Kind::kNone:
      return "none";
  }
  return "invalid";
}

}  // namespace aside::server
