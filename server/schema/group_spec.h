// The group schema: the declared definition of a group (from the config file
// or the Admin API) and its parts, their names, the ranges of every field and
// the validators that enforce them.
//
// This is the one place that knows what a valid group is. Readers of the
// config file and of aside.v1.Group check only types and syntax and leave
// every range and cross-field rule to the validators below; the health
// registry and DNS discovery validate what they are given with the same
// functions. Errors are InvalidArgument (ResourceExhausted for the caps) and
// carry the field path relative to the group, in the message and as data
// (lib/field_error.h): "backends[2].weight: 20000 out of range 0..10000".
//
// Built as its own library (aside_schema) that depends on lib/ only, so that
// aside_health, aside_discovery and aside_server_lib all link it.
#ifndef ASIDE_SERVER_SCHEMA_GROUP_SPEC_H_
#define ASIDE_SERVER_SCHEMA_GROUP_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/backend.h"
#include "lib/field_error.h"
#include "lib/policy_config.h"

namespace aside::server {

// --- Health checking ---------------------------------------------------------

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
  double jitter = 0.05;  // fraction of the interval, kHealthJitter
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

// "tcp", "http", "grpc", "none" (config file keys, metric labels, logs).
absl::string_view HealthCheckKindName(HealthCheckSpec::Kind kind);
// The inverse of HealthCheckKindName.
std::optional<HealthCheckSpec::Kind> HealthCheckKindFromName(
    absl::string_view name);

inline constexpr Range<absl::Duration> kHealthInterval{absl::Milliseconds(100),
                                                       absl::Hours(1)};
// The upper end is the interval.
inline constexpr absl::Duration kHealthMinTimeout = absl::Milliseconds(1);
inline constexpr Range<double> kHealthJitter{0, 0.5};
inline constexpr Range<uint64_t> kHealthRiseFall{1, 100};
inline constexpr Range<uint64_t> kPort{0, 65535};
inline constexpr size_t kMaxHttpPathBytes = 2048;
inline constexpr size_t kMaxHostBytes = 255;
inline constexpr size_t kMaxGrpcServiceBytes = 1024;
inline constexpr Range<uint64_t> kHttpStatus{100, 599};
inline constexpr Range<uint64_t> kHttpBodyLimit{1024, 1024 * 1024};

// Validates a health-check spec as a group declares it; errors start with
// `field`. Interval kHealthInterval, timeout kHealthMinTimeout..interval,
// then everything ValidateProbeSpec checks.
absl::Status ValidateHealthCheck(absl::string_view field,
                                 const HealthCheckSpec& spec);

// What a prober needs of a spec, whoever declared it: a known kind (an
// unknown one is "unknown health-check kind"), an interval and timeout of at
// least kHealthMinTimeout (the group floor of the interval is not applied, so
// that the registry can be driven faster than groups may ask), and every
// other field within its range. A kNone spec is not probed and only needs a
// known kind.
absl::Status ValidateProbeSpec(absl::string_view field,
                               const HealthCheckSpec& spec);

// --- Passive outlier detection
// -------------------------------------------------

struct OutlierSpec {
  bool enabled = false;
  uint32_t consecutive_failures = 5;
  absl::Duration base_ejection_time = absl::Seconds(30);
  absl::Duration max_ejection_time = absl::Seconds(300);
  double max_ejection_percent = 10;
  friend bool operator==(const OutlierSpec&, const OutlierSpec&) = default;
};

inline constexpr Range<uint64_t> kOutlierConsecutiveFailures{1, 1000};
inline constexpr Range<absl::Duration> kOutlierBaseEjection{absl::Seconds(1),
                                                            absl::Hours(1)};
// From base_ejection_time up to this.
inline constexpr absl::Duration kOutlierMaxEjection = absl::Hours(24);
inline constexpr Range<double> kPercent{0, 100};

absl::Status ValidateOutlier(absl::string_view field, const OutlierSpec& spec);

// --- Backend load reports (ORCA) ---------------------------------------------

// Out-of-band ORCA (gRFC A51): the server streams each backend's own load
// reports (xds.service.orca.v3.OpenRcaService) and, with `weights`, turns
// them into effective weights as gRFC A58 does (lib/load/orca_weight.h).
struct OrcaSpec {
  bool enabled = false;
  // How often the backend is asked to report.
  absl::Duration interval = absl::Seconds(1);
  // Effective weights follow the reports (else they are only shown, and
  // feed the locality policy's zone utilisation).
  bool weights = false;
  // Hash policies keep their configured weights unless the group accepts
  // that keys move as utilisation changes.
  bool move_keys = false;
  absl::Duration blackout_period = absl::Seconds(10);
  absl::Duration weight_expiration_period = absl::Minutes(3);
  double error_utilization_penalty = 1.0;
  friend bool operator==(const OrcaSpec&, const OrcaSpec&) = default;
};

inline constexpr Range<absl::Duration> kOrcaInterval{absl::Milliseconds(100),
                                                     absl::Minutes(5)};
inline constexpr Range<absl::Duration> kOrcaBlackout{absl::ZeroDuration(),
                                                     absl::Hours(1)};
inline constexpr Range<absl::Duration> kOrcaExpiration{absl::Seconds(1),
                                                       absl::Hours(24)};
inline constexpr Range<double> kOrcaPenalty{0, 100};

// Ranges, an expiration of at least two intervals, and move_keys on a hash
// policy with weights.
absl::Status ValidateOrca(absl::string_view field, const OrcaSpec& spec,
                          const PolicyConfig& policy);

// Whether `spec`'s effective weights follow its backends' ORCA reports.
bool OrcaWeightsApply(const OrcaSpec& orca, const PolicyConfig& policy);

// --- DNS discovery of members ------------------------------------------------

struct DnsSpec {
  std::string name;
  uint32_t port = 0;
  bool srv = false;
  absl::Duration interval = absl::Seconds(30);
  uint32_t weight = kDefaultWeight;
  Locality locality;
  friend bool operator==(const DnsSpec&, const DnsSpec&) = default;
};

inline constexpr size_t kMaxDnsNameBytes = 253;
inline constexpr Range<absl::Duration> kDnsInterval{absl::Seconds(1),
                                                    absl::Hours(1)};

// Validates a DNS source. `min_interval` is the floor of the interval:
// groups use kDnsInterval.min; a DnsDiscovery configured with a lower
// minimum (tests, tuned deployments) passes its own.
absl::Status ValidateDns(absl::string_view field, const DnsSpec& spec,
                         absl::Duration min_interval = kDnsInterval.min);

// --- grpclb
// ----------------------------------------------------------------------

// How grpclb (stock gRPC clients) sees the group.
struct GrpclbSpec {
  // While the group is in panic, this percentage of calls is dropped by the
  // clients (0 disables), kGrpclbDropInPanic.
  double drop_in_panic_percent = 0;
  // When the fleet-wide rate reported for the group exceeds this, clients
  // drop the excess (0 disables).
  double max_requests_per_second = 0;
  friend bool operator==(const GrpclbSpec&, const GrpclbSpec&) = default;
};

inline constexpr Range<double> kGrpclbDropInPanic{0, 90};
inline constexpr Range<double> kGrpclbMaxRequestsPerSecond{0, 1e9};

// --- The group
// ---------------------------------------------------------------------

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
  OrcaSpec orca;

  GroupSource source = GroupSource::kFile;
  // The config file that declares it (source kFile).
  std::string file;

  friend bool operator==(const GroupSpec&, const GroupSpec&) = default;
};

// Caps that keep one group or the server bounded.
inline constexpr size_t kMaxBackendsPerGroup = 10000;
inline constexpr size_t kMaxAliases = 32;
inline constexpr size_t kMaxAliasBytes = 253;
inline constexpr uint64_t kMaxWeightSum = 0xffffffffULL;
inline constexpr Range<absl::Duration> kSlowStart{absl::ZeroDuration(),
                                                  absl::Hours(1)};

// Validates a whole group (name, policy, backends, unique addresses, weight
// sum, health check, panic threshold, slow start, outlier, dns, aliases,
// grpclb, orca) and canonicalises backend addresses in place. Field paths are
// relative to the group: "backends[2].weight", "policy.maglev.table_size".
absl::Status ValidateGroupSpec(GroupSpec& spec);

// True when `s` holds a space, a control character (CR, LF, ...) or DEL.
bool HasControlOrSpace(absl::string_view s);

// --- The grpclb namespace
// ---------------------------------------------------------------------
//
// Names and aliases are one namespace. A dialed name ("web.example:443")
// resolves to the group with an alias equal to it or to its host part,
// else to the group named by the host's first label (grpclb, xDS). So an
// alias may not equal another group's name or have it as its first label,
// and no dialed name may match aliases of two groups: either would let one
// group take another's clients. Names compare as DNS names do: ASCII case
// is ignored and so is a trailing dot on the host ("Web.Example.:443" is
// "web.example:443"); everything compares in FoldDialedName's form.

// `name` lower-cased (ASCII), without a trailing dot on its host part:
// "Web.Example.:443" -> "web.example:443".
std::string FoldDialedName(absl::string_view name);

// The host part of a dialed name or alias: "web:443" -> "web",
// "[::1]:80" -> "[::1]", "web" -> "web".
absl::string_view GrpclbHost(absl::string_view name);
// The host's first label: "web.example:443" -> "web".
absl::string_view GrpclbLabel(absl::string_view name);

// Where a group comes from, for messages: "config file aside.yaml" or
// "created through Admin".
std::string DescribeGroupSource(const GroupSpec& spec);

// Whether `spec`'s name and aliases collide with those of `other` (a
// different group; equal names are the caller's check). ALREADY_EXISTS
// naming the field ("name", "aliases[2]") and the owner, e.g.
//   aliases[0]: alias 'web' is already the name of group 'web' (config file
//   aside.yaml)
// or OK.
absl::Status CheckGroupNamespace(const GroupSpec& spec, const GroupSpec& other);
// The same for one alias of `spec` (its field "aliases[index]").
absl::Status CheckAliasAgainst(absl::string_view alias, size_t index,
                               const GroupSpec& other);
// The same for `spec`'s name against `other`'s aliases.
absl::Status CheckNameAgainstAliases(absl::string_view name,
                                     const GroupSpec& other);

}  // namespace aside::server

#endif  // ASIDE_SERVER_SCHEMA_GROUP_SPEC_H_
