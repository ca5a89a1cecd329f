// The declared definition of a group (from the config file or the Admin
// API), before health and load turn it into a table.
#ifndef ASIDE_SERVER_GROUP_SPEC_H_
#define ASIDE_SERVER_GROUP_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "lib/policy_config.h"

namespace aside::server {

// An inclusive range of HTTP status codes.
struct StatusRange {
  uint32_t from = 200;
  uint32_t to = 399;
  friend bool operator==(const StatusRange&, const StatusRange&) = default;
};

// How the targets of a group are probed. Targets are (address, spec): two
// groups with equal specs share the probes of a common address.
struct HealthCheckSpec {
  enum class Kind : uint8_t { kTcp, kHttp, kGrpc, kNone };
  Kind kind = Kind::kTcp;
  absl::Duration interval = absl::Seconds(5);
  absl::Duration timeout = absl::Seconds(1);
  double jitter = 0.05;  // fraction of the interval, 0..0.5
  uint32_t rise = 2;
  uint32_t fall = 3;
  bool require_first_probe = false;
  uint32_t port = 0;  // 0: the backend's port
  // http
  std::string http_path = "/";
  std::string http_host;  // empty: the address
  std::vector<StatusRange> http_expected_statuses = {{200, 399}};
  uint32_t http_body_limit = 64 * 1024;
  // grpc
  std::string grpc_service;
  std::string grpc_authority;

  friend bool operator==(const HealthCheckSpec&,
                         const HealthCheckSpec&) = default;
};

absl::string_view HealthCheckKindName(HealthCheckSpec::Kind kind);

// Validates a health-check spec; errors start with `field`.
absl::Status ValidateHealthCheck(absl::string_view field,
                                 const HealthCheckSpec& spec);

// Passive outlier detection.
struct OutlierSpec {
  bool enabled = false;
  uint32_t consecutive_failures = 5;
  absl::Duration base_ejection_time = absl::Seconds(30);
  absl::Duration max_ejection_time = absl::Seconds(300);
  double max_ejection_percent = 10;
  friend bool operator==(const OutlierSpec&, const OutlierSpec&) = default;
};

absl::Status ValidateOutlier(absl::string_view field, const OutlierSpec& spec);

// DNS discovery of members.
struct DnsSpec {
  std::string name;
  uint32_t port = 0;
  bool srv = false;
  absl::Duration interval = absl::Seconds(30);
  uint32_t weight = kDefaultWeight;
  Locality locality;
  friend bool operator==(const DnsSpec&, const DnsSpec&) = default;
};

absl::Status ValidateDns(absl::string_view field, const DnsSpec& spec);

// How grpclb (stock gRPC clients) sees the group.
struct GrpclbSpec {
  // While the group is in panic, this percentage of calls is dropped by the
  // clients (0 disables), 0..90.
  double drop_in_panic_percent = 0;
  // When the fleet-wide rate reported for the group exceeds this, clients
  // drop the excess (0 disables).
  double max_requests_per_second = 0;
  friend bool operator==(const GrpclbSpec&, const GrpclbSpec&) = default;
};

enum class GroupSource : uint8_t { kFile, kStore };

struct GroupSpec {
  std::string name;
  PolicyConfig policy;
  std::vector<Backend> backends;
  HealthCheckSpec health_check;
  double panic_threshold = 50;  // percent; 0 disables
  absl::Duration slow_start = absl::ZeroDuration();
  OutlierSpec outlier;
  std::optional<DnsSpec> dns;
  std::vector<std::string> aliases;
  GrpclbSpec grpclb;

  GroupSource source = GroupSource::kFile;
  // The config file that declares it (source kFile).
  std::string file;

  friend bool operator==(const GroupSpec&, const GroupSpec&) = default;
};

// Caps that keep one group or the server bounded.
inline constexpr size_t kMaxBackendsPerGroup = 10000;
inline constexpr size_t kMaxAliases = 32;

// Validates a whole group (name, policy, backends, unique addresses, weight
// sum, health check, panic threshold, slow start, outlier, dns) and
// canonicalises backend addresses in place. Errors are InvalidArgument and
// name the field, e.g. "backends[2].weight: 20000 out of range 0..10000".
absl::Status ValidateGroupSpec(GroupSpec& spec);

}  // namespace aside::server

#endif  // ASIDE_SERVER_GROUP_SPEC_H_
