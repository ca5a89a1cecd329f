// Internal: one health-check target as the registry and the prober share it.
// Not part of the API; include health_registry.h instead.
#ifndef ASIDE_SERVER_HEALTH_TARGET_H_
#define ASIDE_SERVER_HEALTH_TARGET_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "server/health/health_registry.h"
#include "server/health/health_state.h"
#include "server/schema/group_spec.h"

namespace aside::server::health_internal {

//
// Laid out for the prober thread: what every probe result touches comes
// first (with 10 000 targets each result finds its target cold in the cache).
struct Target {
  Target(uint64_t id_in, std::string address_in, HealthCheckSpec spec_in,
         std::string host_in, uint16_t port_in, bool ipv6_in)
      : kind(spec_in.kind),
        require_first_probe(spec_in.require_first_probe),
        rise(spec_in.rise),
        fall(spec_in.fall),
        id(id_in),
        address(std::move(address_in)),
        spec(std::move(spec_in)),
        host(std::move(host_in)),
        port(port_in),
        ipv6(ipv6_in) {}

  // Lock-free reads for groups (written under the registry mutex).
  std::atomic<HealthState> state{HealthState::kUnknown};
  std::atomic<int64_t> ready_since_nanos{0};
  // Whether this replica probes it (fleet ownership); the prober skips the
  // probes of a target it does not own. Written under RegistryCore::mu_.
  std::atomic<bool> owned{true};

  // Immutable copies of what every result needs, next to the counters.
  const HealthCheckSpec::Kind kind;
  const bool require_first_probe;
  const uint32_t rise;
  const uint32_t fall;

  // Guarded by RegistryCore::mu_: updated by every result.
  bool removed = false;
  HealthCounters counters;
  uint64_t probes = 0;
  std::optional<ProbeResult> last_result;

  // Immutable after creation.
  const uint64_t id;
  uint64_t fleet_key = 0;     // FleetTargetKey; set at creation
  const std::string address;  // canonical, as groups name it
  const HealthCheckSpec spec;
  const std::string host;  // IP literal without brackets
  const uint16_t port;     // the port probed (spec.port or the address's)
  const bool ipv6;

  // Guarded by RegistryCore::mu_: changed by groups and transitions.
  absl::Time last_transition = absl::InfinitePast();
  absl::flat_hash_map<std::string, uint32_t> groups;  // handle counts
  uint64_t refs = 0;
};

}  // namespace aside::server::health_internal

#endif  // ASIDE_SERVER_HEALTH_TARGET_H_
