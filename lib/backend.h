// Backends and localities: the members of a group as operators declare them.
#ifndef ASIDE_LIB_BACKEND_H_
#define ASIDE_LIB_BACKEND_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aside {

inline constexpr uint32_t kDefaultWeight = 100;
inline constexpr uint32_t kMaxWeight = 10000;
inline constexpr size_t kMaxMetadataEntries = 64;
inline constexpr size_t kMaxMetadataKeyBytes = 63;
inline constexpr size_t kMaxMetadataValueBytes = 1024;
inline constexpr size_t kMaxLocalityFieldBytes = 128;

// Where a backend or a caller runs. Empty fields are unknown.
struct Locality {
  std::string region;
  std::string zone;
  std::string subzone;

  bool empty() const {
    return region.empty() && zone.empty() && subzone.empty();
  }
  // "region/zone/subzone", the form used in logs and as a map key.
  std::string ToString() const;
  // Same region and zone (subzone ignored): the unit the locality policy
  // balances between.
  bool SameZone(const Locality& other) const {
    return region == other.region && zone == other.zone;
  }
  friend bool operator==(const Locality&, const Locality&) = default;
  friend auto operator<=>(const Locality&, const Locality&) = default;
};

// Health as probed by the registry.
enum class HealthState : uint8_t { kUnknown, kHealthy, kUnhealthy };
absl::string_view HealthStateName(HealthState state);

// A member of a group. The address (canonical form, see lib/address.h) is the
// identity: weight, locality and metadata may change without resetting the
// backend's health or load state.
struct Backend {
  std::string address;
  // 0..kMaxWeight; 0 drains the backend (never picked).
  uint32_t weight = kDefaultWeight;
  Locality locality;
  // Labels passed through to clients unchanged.
  std::map<std::string, std::string, std::less<>> metadata;
  // Operator drain flag, separate from health.
  bool drained = false;

  friend bool operator==(const Backend&, const Backend&) = default;
};

// Validates a group name: [a-z0-9][a-z0-9._-]{0,252}. The error quotes the
// name through EchoName.
absl::Status ValidateGroupName(absl::string_view name);

// A name a caller sent, as an error message may echo it: bytes outside
// printable ASCII escaped as C does (\n, \000, \377; quotes and
// backslashes too), and past kMaxEchoedNameBytes
// cut, ending with "... (N bytes)". Names from validated definitions need
// none of this; names taken from requests do.
inline constexpr size_t kMaxEchoedNameBytes = 64;
std::string EchoName(absl::string_view name);

// Validates a backend and canonicalises its address in place. With
// `allow_hostname` false, the address must be an IP literal. Errors start
// with `field` (e.g. "backends[3]") so callers can point at the input.
absl::Status ValidateBackend(absl::string_view field, Backend& backend,
                             bool allow_hostname);

}  // namespace aside

#endif  // ASIDE_LIB_BACKEND_H_
