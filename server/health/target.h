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
#include "server/group_spec.h"
#include "server/health/health_registry.h"
#include "server/health/health_state.h"

namespace aside::server::health_internal {

struct Target {
  Target(uint64_t id_in, std::string address_in, HealthCheckSpec spec_in,
         std::string host_in, uint16_t port_in, bool ipv6_in)
      : id(id_in),
        address(std::move(address_in)),
        spec(std::move(spec_in)),
        host(std::move(host_in)),
        port(port_in),
        ipv6(ipv6_in) {}

  // Immutable after creation.
  const uint64_t id;
  const std::string address;  // canonical, as groups name it
  const HealthCheckSpec spec;
  const std::string host;  // IP literal without brackets
  const uint16_t port;     // the port probed (spec.port or the address's)
  const bool ipv6;

  // Lock-free reads for groups (written under the registry mutex).
  std::atomic<HealthState> state{HealthState::kUnknown};
  std::atomic<int64_t> ready_since_nanos{0};

  // Guarded by RegistryCore::mu_.
  HealthCounters counters;
  std::optional<ProbeResult> last_result;
  uint64_t probes = 0;
  absl::Time last_transition = absl::InfinitePast();
  absl::flat_hash_map<std::string, uint32_t> groups;  // handle counts
  uint64_t refs = 0;
  bool removed = false;
};

}  // namespace aside::server::health_internal

#endif  // ASIDE_SERVER_HEALTH_TARGET_H_
