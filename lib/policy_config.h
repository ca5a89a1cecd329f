// Selection policies by name, with their parameters, defaults and
// validation. Both the server (YAML config, Admin API) and the client stub
// (tables received over Watch) describe policies with these types.
#ifndef ASIDE_LIB_POLICY_CONFIG_H_
#define ASIDE_LIB_POLICY_CONFIG_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/field_error.h"

namespace aside {

enum class PolicyKind : uint8_t {
  kRoundRobin,
  kWeightedRoundRobin,
  kRandom,
  kHash,
  kKetama,
  kMaglev,
  kP2c,
  kLeastTime,
  kSticky,
  kLocality,
  kRingHash,
  kPrequal,
};
inline constexpr int kPolicyKindCount = 12;

// "round_robin", "weighted_round_robin", "random", "hash", "ketama",
// "maglev", "p2c", "least_time", "sticky", "locality", "ring_hash",
// "prequal".
absl::string_view PolicyName(PolicyKind kind);
absl::StatusOr<PolicyKind> ParsePolicyName(absl::string_view name);

// Policies that map a key to a backend. hash, ketama and maglev rebuild their
// ring or table when membership or weights change, never on a
// readiness-only change; ring_hash builds gRPC's ring over the eligible
// members, so readiness changes it too.
bool IsHashPolicy(PolicyKind kind);

struct KetamaParams {
  // nginx uses 160; any other value no longer matches nginx. 1..1000.
  uint32_t points_per_weight = 160;
  friend bool operator==(const KetamaParams&, const KetamaParams&) = default;
};

struct MaglevParams {
  // A prime, 101..5000011, at least the number of backends.
  uint64_t table_size = 65537;
  friend bool operator==(const MaglevParams&, const MaglevParams&) = default;
};

struct RingHashParams {
  // gRPC's ring_hash sizes (gRFC A42): the ring has between min and max
  // entries, 1..4096 each (4096 is the cap gRPC clients apply), min <= max.
  uint64_t min_ring_size = 1024;
  uint64_t max_ring_size = 4096;
  friend bool operator==(const RingHashParams&,
                         const RingHashParams&) = default;
};

struct P2cParams {
  enum class Load : uint8_t { kPending, kPeakEwma };
  Load load = Load::kPending;
  // Peak-EWMA decay time constant, 1ms..1h. 1 s, not Finagle's and Tower's
  // 10 s: with 10 s a backend whose estimate peaked while it was slow took
  // tens of seconds to be seen again once it recovered (bench/README.md,
  // "Arena simulator").
  absl::Duration decay = absl::Seconds(1);
  // RTT assumed for a backend without samples, 1us..1m.
  absl::Duration default_rtt = absl::Milliseconds(30);
  friend bool operator==(const P2cParams&, const P2cParams&) = default;
};

struct LeastTimeParams {
  enum class Metric : uint8_t { kFirstByte, kLastByte };
  Metric metric = Metric::kLastByte;
  // EWMA smoothing factor in (0, 1].
  double alpha = 0.3;
  // Latency assumed for a backend without samples, 1us..1m.
  absl::Duration default_latency = absl::Milliseconds(10);
  friend bool operator==(const LeastTimeParams&,
                         const LeastTimeParams&) = default;
};

// prequal: hot-cold lexicographic selection over the backends' reported
// requests in flight (RIF) and latency (Prequal, NSDI 2024); see
// lib/policies/prequal.h.
struct PrequalParams {
  // Backends drawn at random per pick, 2..64. 8, not the paper's 16: in
  // the simulator 16 sent 8 clients to the same few of 24 backends between
  // two reports (p99 11× the limit at 90 % load, 8: 1.9×), 4 saw too few
  // (2.7×); at 100 × 100, 8 and 16 were within 25 % of each other.
  uint32_t pool_size = 8;
  // A report older than this is not used; a failure younger than this
  // makes a backend hot. 10ms..1m.
  absl::Duration max_age = absl::Seconds(1);
  // A backend is hot when its RIF is above this quantile of the pool's
  // RIFs, in [0, 1].
  double hot_quantile = 0.84;
  // This client's calls since a report count this many times (other
  // clients may send where it does, reading the same kind of reports).
  // The simulator runs other values (bench/README.md, "prequal: own calls
  // since a report"); not in the group config.
  double own_weight = 1;
  friend bool operator==(const PrequalParams&, const PrequalParams&) = default;
};

struct StickyParams {
  // Validity of an issued token, 1s..30d.
  absl::Duration ttl = absl::Hours(1);
  friend bool operator==(const StickyParams&, const StickyParams&) = default;
};

struct LocalityParams {
  absl::Duration weight_expiration_period = absl::Seconds(180);
  absl::Duration update_period = absl::Seconds(1);
  absl::Duration smoothing_time_constant = absl::Seconds(5);
  double utilization_variance_threshold = 0.1;
  double remote_probe_fraction = 0.03;
  friend bool operator==(const LocalityParams&,
                         const LocalityParams&) = default;
};

// A policy with its parameters. Only the parameters of `kind` are
// meaningful; the others keep their defaults. `child` is the fallback of a
// sticky policy or the in-zone policy of a locality policy (null means
// round_robin) and must itself be neither sticky nor locality.
struct PolicyConfig {
  PolicyKind kind = PolicyKind::kRoundRobin;
  KetamaParams ketama;
  MaglevParams maglev;
  RingHashParams ring_hash;
  P2cParams p2c;
  LeastTimeParams least_time;
  PrequalParams prequal;
  StickyParams sticky;
  LocalityParams locality;
  std::shared_ptr<const PolicyConfig> child;

  absl::string_view name() const { return PolicyName(kind); }
  // The child, or the default (round_robin) when none is set.
  const PolicyConfig& child_or_default() const;

  friend bool operator==(const PolicyConfig& a, const PolicyConfig& b);
};

// The ranges ValidatePolicy enforces (the only place they are checked).
inline constexpr Range<uint64_t> kKetamaPointsPerWeight{1, 1000};
inline constexpr Range<uint64_t> kMaglevTableSize{101, 5000011};
inline constexpr Range<uint64_t> kRingHashSize{1, 4096};
inline constexpr Range<absl::Duration> kP2cDecay{absl::Milliseconds(1),
                                                 absl::Hours(1)};
// p2c default_rtt and least_time default_latency.
inline constexpr Range<absl::Duration> kDefaultLatency{absl::Microseconds(1),
                                                       absl::Minutes(1)};
inline constexpr Range<uint64_t> kPrequalPoolSize{2, 64};
inline constexpr Range<absl::Duration> kPrequalMaxAge{absl::Milliseconds(10),
                                                      absl::Minutes(1)};
inline constexpr Range<absl::Duration> kStickyTtl{absl::Seconds(1),
                                                  absl::Hours(24 * 30)};
inline constexpr Range<absl::Duration> kLocalityWeightExpiration{
    absl::Seconds(1), absl::Hours(24)};
inline constexpr Range<absl::Duration> kLocalityUpdatePeriod{
    absl::Milliseconds(100), absl::Minutes(10)};
inline constexpr Range<absl::Duration> kLocalitySmoothing{
    absl::Milliseconds(100), absl::Hours(1)};

// Checks every parameter of `config.kind` (and of its child). Errors are
// InvalidArgument and start with `field`, e.g.
// "policy.ketama.points_per_weight: 0 out of range 1..1000", with the field
// path carried as data (lib/field_error.h).
absl::Status ValidatePolicy(absl::string_view field,
                            const PolicyConfig& config);

// True when `n` is prime (used for Maglev table sizes).
bool IsPrime(uint64_t n);

}  // namespace aside

#endif  // ASIDE_LIB_POLICY_CONFIG_H_
