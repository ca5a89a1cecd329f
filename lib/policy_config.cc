#include "lib/policy_config.h"

#include <array>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/field_error.h"

namespace aside {
namespace {

constexpr std::array<absl::string_view, kPolicyKindCount> kNames = {
    "round_robin", "weighted_round_robin",
    "random",      "hash",
    "ketama",      "maglev",
    "p2c",         "least_time",
    "sticky",      "locality",
    "ring_hash",   "prequal"};

absl::Status FractionIn(absl::string_view field, double value, double low,
                        double high, bool low_open) {
  if (!std::isfinite(value) || value > high || value < low ||
      (low_open && value == low)) {
    return InvalidField(
        field, absl::StrCat(value, " out of range ", low_open ? "(" : "[", low,
                            ", ", high, "]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view PolicyName(PolicyKind kind) {
  const auto index = static_cast<size_t>(kind);
  return index < kNames.size() ? kNames[index] : "invalid";
}

absl::StatusOr<PolicyKind> ParsePolicyName(absl::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (kNames[i] == name) {
      return static_cast<PolicyKind>(i);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", name,
                   "' (known: ", absl::StrJoin(kNames, ", "), ")"));
}

bool IsHashPolicy(PolicyKind kind) {
  return kind == PolicyKind::kHash || kind == PolicyKind::kKetama ||
         kind == PolicyKind::kMaglev || kind == PolicyKind::kRingHash;
}

const PolicyConfig& PolicyConfig::child_or_default() const {
  static const PolicyConfig kDefault;
  return child ? *child : kDefault;
}

bool operator==(const PolicyConfig& a, const PolicyConfig& b) {
  if (a.kind != b.kind) {
    return false;
  }
  switch (a.kind) {
    case PolicyKind::kKetama:
      return a.ketama == b.ketama;
    case PolicyKind::kMaglev:
      return a.maglev == b.maglev;
    case PolicyKind::kRingHash:
      return a.ring_hash == b.ring_hash;
    case PolicyKind::kP2c:
      return a.p2c == b.p2c;
    case PolicyKind::kLeastTime:
      return a.least_time == b.least_time;
    case PolicyKind::kPrequal:
      return a.prequal == b.prequal;
    case PolicyKind::kSticky:
      return a.sticky == b.sticky &&
             a.child_or_default() == b.child_or_default();
    case PolicyKind::kLocality:
      return a.locality == b.locality &&
             a.child_or_default() == b.child_or_default();
    default:
      return true;
  }
}

bool IsPrime(uint64_t n) {
  if (n < 2) {
    return false;
  }
  if (n % 2 == 0) {
    return n == 2;
  }
  for (uint64_t d = 3; d * d <= n; d += 2) {
    if (n % d == 0) {
      return false;
    }
  }
  return true;
}

absl::Status ValidatePolicy(absl::string_view field,
                            const PolicyConfig& config) {
  const std::string prefix = absl::StrCat(field, ".", config.name());
  switch (config.kind) {
    case PolicyKind::kRoundRobin:
    case PolicyKind::kWeightedRoundRobin:
    case PolicyKind::kRandom:
    case PolicyKind::kHash:
      break;
    case PolicyKind::kKetama:
      return CheckInteger(absl::StrCat(prefix, ".points_per_weight"),
                          config.ketama.points_per_weight,
                          kKetamaPointsPerWeight);
    case PolicyKind::kMaglev:
      if (absl::Status s =
              CheckInteger(absl::StrCat(prefix, ".table_size"),
                           config.maglev.table_size, kMaglevTableSize);
          !s.ok()) {
        return s;
      }
      if (!IsPrime(config.maglev.table_size)) {
        return InvalidField(
            absl::StrCat(prefix, ".table_size"),
            absl::StrCat(config.maglev.table_size, " is not a prime"));
      }
      break;
    case PolicyKind::kRingHash:
      if (absl::Status s =
              CheckInteger(absl::StrCat(prefix, ".min_ring_size"),
                           config.ring_hash.min_ring_size, kRingHashSize);
          !s.ok()) {
        return s;
      }
      if (absl::Status s =
              CheckInteger(absl::StrCat(prefix, ".max_ring_size"),
                           config.ring_hash.max_ring_size, kRingHashSize);
          !s.ok()) {
        return s;
      }
      if (config.ring_hash.min_ring_size > config.ring_hash.max_ring_size) {
        return InvalidField(absl::StrCat(prefix, ".min_ring_size"),
                            absl::StrCat(config.ring_hash.min_ring_size,
                                         " is larger than max_ring_size ",
                                         config.ring_hash.max_ring_size));
      }
      break;
    case PolicyKind::kP2c: {
      absl::Status s = CheckDuration(absl::StrCat(prefix, ".decay"),
                                     config.p2c.decay, kP2cDecay);
      if (!s.ok()) {
        return s;
      }
      s = CheckDuration(absl::StrCat(prefix, ".default_rtt"),
                        config.p2c.default_rtt, kDefaultLatency);
      if (!s.ok()) {
        return s;
      }
      break;
    }
    case PolicyKind::kLeastTime: {
      absl::Status s = FractionIn(absl::StrCat(prefix, ".alpha"),
                                  config.least_time.alpha, 0, 1, true);
      if (!s.ok()) {
        return s;
      }
      s = CheckDuration(absl::StrCat(prefix, ".default_latency"),
                        config.least_time.default_latency, kDefaultLatency);
      if (!s.ok()) {
        return s;
      }
      break;
    }
    case PolicyKind::kPrequal: {
      absl::Status s = CheckInteger(absl::StrCat(prefix, ".pool_size"),
                                    config.prequal.pool_size, kPrequalPoolSize);
      if (!s.ok()) {
        return s;
      }
      s = CheckDuration(absl::StrCat(prefix, ".max_age"),
                        config.prequal.max_age, kPrequalMaxAge);
      if (!s.ok()) {
        return s;
      }
      s = FractionIn(absl::StrCat(prefix, ".hot_quantile"),
                     config.prequal.hot_quantile, 0, 1, false);
      if (!s.ok()) {
        return s;
      }
      break;
    }
    case PolicyKind::kSticky:
    case PolicyKind::kLocality: {
      if (config.kind == PolicyKind::kSticky) {
        absl::Status s = CheckDuration(absl::StrCat(prefix, ".ttl"),
                                       config.sticky.ttl, kStickyTtl);
        if (!s.ok()) {
          return s;
        }
      } else {
        const LocalityParams& p = config.locality;
        for (auto [name, value, range] :
             {std::tuple{"weight_expiration_period", p.weight_expiration_period,
                         kLocalityWeightExpiration},
              std::tuple{"update_period", p.update_period,
                         kLocalityUpdatePeriod},
              std::tuple{"smoothing_time_constant", p.smoothing_time_constant,
                         kLocalitySmoothing}}) {
          absl::Status s =
              CheckDuration(absl::StrCat(prefix, ".", name), value, range);
          if (!s.ok()) {
            return s;
          }
        }
        absl::Status s =
            FractionIn(absl::StrCat(prefix, ".utilization_variance_threshold"),
                       p.utilization_variance_threshold, 0, 1, false);
        if (!s.ok()) {
          return s;
        }
        s = FractionIn(absl::StrCat(prefix, ".remote_probe_fraction"),
                       p.remote_probe_fraction, 0, 1, false);
        if (!s.ok()) {
          return s;
        }
      }
      const char* child_name =
          config.kind == PolicyKind::kSticky ? "fallback" : "child";
      if (config.child) {
        if (config.child->kind == PolicyKind::kSticky ||
            config.child->kind == PolicyKind::kLocality) {
          return InvalidField(absl::StrCat(prefix, ".", child_name),
                              absl::StrCat("policy '", config.child->name(),
                                           "' cannot be nested"));
        }
        return ValidatePolicy(absl::StrCat(prefix, ".", child_name),
                              *config.child);
      }
      break;
    }
    default:
      return InvalidField(field, "invalid policy kind");
  }
  return absl::OkStatus();
}

}  // namespace aside
