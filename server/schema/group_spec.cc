#include "server/schema/group_spec.h"

#include <functional>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/policies/ketama.h"
#include "lib/status_macros.h"

namespace aside::server {

bool HasControlOrSpace(absl::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return true;
    }
  }
  return false;
}

absl::string_view GrpclbHost(absl::string_view name) {
  if (!name.empty() && name.front() == '[') {
    const size_t close = name.find(']');
    return close == absl::string_view::npos ? name : name.substr(0, close + 1);
  }
  const size_t colon = name.rfind(':');
  return colon == absl::string_view::npos ? name : name.substr(0, colon);
}

std::string FoldDialedName(absl::string_view name) {
  std::string out = absl::AsciiStrToLower(name);
  const size_t host_end = GrpclbHost(out).size();
  if (host_end > 1 && out[host_end - 1] == '.') {
    out.erase(host_end - 1, 1);
  }
  return out;
}

absl::string_view GrpclbLabel(absl::string_view name) {
  const absl::string_view host = GrpclbHost(name);
  return host.substr(0, host.find('.'));
}

std::string DescribeGroupSource(const GroupSpec& spec) {
  if (spec.source == GroupSource::kFile) {
    return spec.file.empty() ? "config file"
                             : absl::StrCat("config file ", spec.file);
  }
  return "created through Admin";
}

namespace {

// Alias `a` takes the dialed names equal to it and those whose host part
// equals it; two aliases overlap when some dialed name matches both. Both
// are folded (FoldDialedName).
bool AliasesOverlap(absl::string_view a, absl::string_view b) {
  return a == b || a == GrpclbHost(b) || b == GrpclbHost(a);
}

// Alias `alias` takes the clients of the group named `name`: equal, or the
// alias's first label resolves to that group (a dialed name equal to the
// alias would otherwise reach `name`). Both are folded.
bool AliasShadowsName(absl::string_view alias, absl::string_view name) {
  return alias == name || GrpclbLabel(alias) == name;
}

absl::Status Taken(absl::string_view field, absl::string_view message,
                   const GroupSpec& owner) {
  return FieldError(
      absl::StatusCode::kAlreadyExists, field,
      absl::StrCat(message, " (", DescribeGroupSource(owner), ")"));
}

}  // namespace

absl::Status CheckAliasAgainst(absl::string_view alias, size_t index,
                               const GroupSpec& other) {
  const std::string field = absl::StrCat("aliases[", index, "]");
  const std::string folded = FoldDialedName(alias);
  const std::string other_name = FoldDialedName(other.name);
  if (folded == other_name) {
    return Taken(
        field,
        absl::StrCat("alias '", alias, "' is already the name of group '",
                     other.name, "'"),
        other);
  }
  if (AliasShadowsName(folded, other_name)) {
    return Taken(
        field,
        absl::StrCat("alias '", alias,
                     "' would take the clients of "
                     "group '",
                     other.name, "' (its first label names that group)"),
        other);
  }
  for (const std::string& theirs : other.aliases) {
    const std::string theirs_folded = FoldDialedName(theirs);
    if (AliasesOverlap(folded, theirs_folded)) {
      return Taken(field,
                   folded == theirs_folded
                       ? absl::StrCat("alias '", alias,
                                      "' is already an alias of group '",
                                      other.name, "'")
                       : absl::StrCat("alias '", alias, "' overlaps alias '",
                                      theirs, "' of group '", other.name, "'"),
                   other);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNameAgainstAliases(absl::string_view name,
                                     const GroupSpec& other) {
  const std::string folded = FoldDialedName(name);
  for (const std::string& theirs : other.aliases) {
    const std::string theirs_folded = FoldDialedName(theirs);
    if (theirs_folded == folded) {
      return Taken(
          "name",
          absl::StrCat("name '", name, "' is already an alias of group '",
                       other.name, "'"),
          other);
    }
    if (AliasShadowsName(theirs_folded, folded)) {
      return Taken(
          "name",
          absl::StrCat("name '", name, "' is the first label of alias '",
                       theirs, "' of group '", other.name,
                       "', which would take its clients"),
          other);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGroupNamespace(const GroupSpec& spec,
                                 const GroupSpec& other) {
  ASIDE_RETURN_IF_ERROR(CheckNameAgainstAliases(spec.name, other));
  for (size_t i = 0; i < spec.aliases.size(); ++i) {
    ASIDE_RETURN_IF_ERROR(CheckAliasAgainst(spec.aliases[i], i, other));
  }
  return absl::OkStatus();
}

absl::string_view HealthCheckKindName(HealthCheckSpec::Kind kind) {
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

std::optional<HealthCheckSpec::Kind> HealthCheckKindFromName(
    absl::string_view name) {
  for (HealthCheckSpec::Kind kind :
       {HealthCheckSpec::Kind::kTcp, HealthCheckSpec::Kind::kHttp,
        HealthCheckSpec::Kind::kGrpc, HealthCheckSpec::Kind::kNone}) {
    if (HealthCheckKindName(kind) == name) {
      return kind;
    }
  }
  return std::nullopt;
}

absl::Status ValidateHealthCheck(absl::string_view field,
                                 const HealthCheckSpec& spec) {
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "interval"),
                                      spec.interval, kHealthInterval));
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "timeout"),
                                      spec.timeout, kHealthMinTimeout,
                                      spec.interval));
  return ValidateProbeSpec(field, spec);
}

absl::Status ValidateProbeSpec(absl::string_view field,
                               const HealthCheckSpec& spec) {
  if (HealthCheckKindName(spec.kind) == "invalid") {
    return InvalidField(JoinFieldPath(field, "kind"),
                        "unknown health-check kind");
  }
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "interval"),
                                      spec.interval, kHealthMinTimeout,
                                      kHealthInterval.max));
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "timeout"),
                                      spec.timeout, kHealthMinTimeout,
                                      kHealthInterval.max));
  ASIDE_RETURN_IF_ERROR(
      CheckNumber(JoinFieldPath(field, "jitter"), spec.jitter, kHealthJitter));
  ASIDE_RETURN_IF_ERROR(
      CheckInteger(JoinFieldPath(field, "rise"), spec.rise, kHealthRiseFall));
  ASIDE_RETURN_IF_ERROR(
      CheckInteger(JoinFieldPath(field, "fall"), spec.fall, kHealthRiseFall));
  ASIDE_RETURN_IF_ERROR(
      CheckInteger(JoinFieldPath(field, "port"), spec.port, kPort));
  if (spec.kind == HealthCheckSpec::Kind::kHttp) {
    if (spec.http_path.empty() || spec.http_path.front() != '/' ||
        spec.http_path.size() > kMaxHttpPathBytes ||
        HasControlOrSpace(spec.http_path)) {
      return InvalidField(
          JoinFieldPath(field, "http.path"),
          absl::StrCat("must start with '/', be at most ", kMaxHttpPathBytes,
                       " bytes and hold no spaces or control characters "
                       "(CR, LF)"));
    }
    if (spec.http_host.size() > kMaxHostBytes ||
        HasControlOrSpace(spec.http_host)) {
      return InvalidField(JoinFieldPath(field, "http.host"),
                          absl::StrCat("at most ", kMaxHostBytes,
                                       " bytes, no spaces or control "
                                       "characters"));
    }
    const std::string statuses = JoinFieldPath(field, "http.expected_statuses");
    if (spec.http_expected_statuses.empty()) {
      return InvalidField(statuses, "empty");
    }
    for (size_t i = 0; i < spec.http_expected_statuses.size(); ++i) {
      const StatusRange& r = spec.http_expected_statuses[i];
      if (!kHttpStatus.Contains(r.from) || !kHttpStatus.Contains(r.to) ||
          r.from > r.to) {
        return InvalidField(
            absl::StrCat(statuses, "[", i, "]"),
            absl::StrCat(r.from, "-", r.to, " is not a range within ",
                         kHttpStatus.min, "..", kHttpStatus.max));
      }
    }
    ASIDE_RETURN_IF_ERROR(CheckInteger(JoinFieldPath(field, "http.body_limit"),
                                       spec.http_body_limit, kHttpBodyLimit));
  }
  if (spec.kind == HealthCheckSpec::Kind::kGrpc) {
    if (spec.grpc_service.size() > kMaxGrpcServiceBytes ||
        HasControlOrSpace(spec.grpc_service)) {
      return InvalidField(JoinFieldPath(field, "grpc.service"),
                          absl::StrCat("at most ", kMaxGrpcServiceBytes,
                                       " bytes, no spaces or control "
                                       "characters"));
    }
    if (spec.grpc_authority.size() > kMaxHostBytes ||
        HasControlOrSpace(spec.grpc_authority)) {
      return InvalidField(JoinFieldPath(field, "grpc.authority"),
                          absl::StrCat("at most ", kMaxHostBytes,
                                       " bytes, no spaces or control "
                                       "characters"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOutlier(absl::string_view field, const OutlierSpec& spec) {
  ASIDE_RETURN_IF_ERROR(
      CheckInteger(JoinFieldPath(field, "consecutive_failures"),
                   spec.consecutive_failures, kOutlierConsecutiveFailures));
  ASIDE_RETURN_IF_ERROR(
      CheckDuration(JoinFieldPath(field, "base_ejection_time"),
                    spec.base_ejection_time, kOutlierBaseEjection));
  ASIDE_RETURN_IF_ERROR(CheckDuration(
      JoinFieldPath(field, "max_ejection_time"), spec.max_ejection_time,
      spec.base_ejection_time, kOutlierMaxEjection));
  return CheckNumber(JoinFieldPath(field, "max_ejection_percent"),
                     spec.max_ejection_percent, kPercent);
}

absl::Status ValidateOrca(absl::string_view field, const OrcaSpec& spec,
                          const PolicyConfig& policy) {
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "interval"),
                                      spec.interval, kOrcaInterval));
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "blackout_period"),
                                      spec.blackout_period, kOrcaBlackout));
  ASIDE_RETURN_IF_ERROR(
      CheckDuration(JoinFieldPath(field, "weight_expiration_period"),
                    spec.weight_expiration_period, kOrcaExpiration));
  if (spec.weight_expiration_period < 2 * spec.interval) {
    return InvalidField(
        JoinFieldPath(field, "weight_expiration_period"),
        absl::StrCat(absl::FormatDuration(spec.weight_expiration_period),
                     " is shorter than two intervals (",
                     absl::FormatDuration(2 * spec.interval),
                     "): every weight would expire between reports"));
  }
  ASIDE_RETURN_IF_ERROR(
      CheckNumber(JoinFieldPath(field, "error_utilization_penalty"),
                  spec.error_utilization_penalty, kOrcaPenalty));
  if (spec.enabled && spec.weights && IsHashPolicy(policy.kind) &&
      !spec.move_keys) {
    return InvalidField(
        JoinFieldPath(field, "weights"),
        "a hash policy's keys would move as utilisation changes; set "
        "orca.move_keys: true to accept that, or leave weights off");
  }
  return absl::OkStatus();
}

bool OrcaWeightsApply(const OrcaSpec& orca, const PolicyConfig& policy) {
  return orca.enabled && orca.weights &&
         (!IsHashPolicy(policy.kind) || orca.move_keys);
}

absl::Status ValidateDns(absl::string_view field, const DnsSpec& spec,
                         absl::Duration min_interval) {
  if (spec.name.empty() || spec.name.size() > kMaxDnsNameBytes ||
      HasControlOrSpace(spec.name)) {
    return InvalidField(JoinFieldPath(field, "name"),
                        absl::StrCat("required, at most ", kMaxDnsNameBytes,
                                     " bytes, no spaces"));
  }
  const std::string port = JoinFieldPath(field, "port");
  if (!spec.srv && (spec.port < 1 || spec.port > kPort.max)) {
    return InvalidField(port,
                        absl::StrCat(spec.port, " out of range 1..", kPort.max,
                                     " (required unless srv is true)"));
  }
  ASIDE_RETURN_IF_ERROR(CheckInteger(port, spec.port, kPort));
  ASIDE_RETURN_IF_ERROR(CheckDuration(JoinFieldPath(field, "interval"),
                                      spec.interval, min_interval,
                                      kDnsInterval.max));
  return CheckInteger(JoinFieldPath(field, "weight"), spec.weight,
                      {0, kMaxWeight});
}

absl::Status ValidateGroupSpec(GroupSpec& spec) {
  if (absl::Status s = ValidateGroupName(spec.name); !s.ok()) {
    return InvalidField("name", s.message());
  }
  ASIDE_RETURN_IF_ERROR(ValidatePolicy("policy", spec.policy));
  if (spec.backends.size() > kMaxBackendsPerGroup) {
    return FieldError(absl::StatusCode::kResourceExhausted, "backends",
                      absl::StrCat(spec.backends.size(), " backends (at most ",
                                   kMaxBackendsPerGroup, ")"));
  }
  // Keys point into spec.backends, which does not change size below.
  absl::flat_hash_map<absl::string_view, size_t> seen;
  seen.reserve(spec.backends.size());
  uint64_t weight_sum = 0;
  // "backends[i]", written into one buffer rather than allocated per
  // backend (ValidateBackend builds deeper paths only for an error).
  std::string field;
  for (size_t i = 0; i < spec.backends.size(); ++i) {
    field.clear();
    absl::StrAppend(&field, "backends[", i, "]");
    ASIDE_RETURN_IF_ERROR(ValidateBackend(field, spec.backends[i],
                                          /*allow_hostname=*/false));
    auto [it, inserted] = seen.emplace(spec.backends[i].address, i);
    if (!inserted) {
      return InvalidField(
          JoinFieldPath(field, "address"),
          absl::StrCat(spec.backends[i].address,
                       " is listed twice (also backends[", it->second, "])"));
    }
    weight_sum += spec.backends[i].weight;
  }
  if (weight_sum > kMaxWeightSum) {
    return InvalidField(
        "backends",
        absl::StrCat("the weights sum to ", weight_sum, " (at most 2^32-1)"));
  }
  if (spec.policy.kind == PolicyKind::kMaglev &&
      spec.backends.size() > spec.policy.maglev.table_size) {
    return InvalidField(
        "policy.maglev.table_size",
        absl::StrCat(spec.policy.maglev.table_size, " is smaller than the ",
                     spec.backends.size(), " backends"));
  }
  if (spec.policy.kind == PolicyKind::kKetama) {
    // Every listed backend may be in the ring at once: the table build
    // would refuse a ring past the cap, so refuse the group up front.
    const uint64_t points = weight_sum * spec.policy.ketama.points_per_weight;
    if (points > kMaxKetamaPoints) {
      return InvalidField(
          "policy.ketama.points_per_weight",
          absl::StrCat("weights summing to ", weight_sum, " × ",
                       spec.policy.ketama.points_per_weight, " make ", points,
                       " ring points, more than ", kMaxKetamaPoints,
                       "; lower the weights or points_per_weight"));
    }
  }
  ASIDE_RETURN_IF_ERROR(ValidateHealthCheck("health_check", spec.health_check));
  ASIDE_RETURN_IF_ERROR(
      CheckNumber("panic_threshold", spec.panic_threshold, kPercent));
  ASIDE_RETURN_IF_ERROR(
      CheckDuration("slow_start", spec.slow_start, kSlowStart));
  ASIDE_RETURN_IF_ERROR(ValidateOutlier("outlier_detection", spec.outlier));
  if (spec.dns) {
    ASIDE_RETURN_IF_ERROR(ValidateDns("dns", *spec.dns));
  }
  if (spec.aliases.size() > kMaxAliases) {
    return InvalidField("aliases",
                        absl::StrCat(spec.aliases.size(), " aliases (at most ",
                                     kMaxAliases, ")"));
  }
  for (size_t i = 0; i < spec.aliases.size(); ++i) {
    if (spec.aliases[i].empty() || spec.aliases[i].size() > kMaxAliasBytes ||
        HasControlOrSpace(spec.aliases[i])) {
      return InvalidField(
          absl::StrCat("aliases[", i, "]"),
          absl::StrCat("must be 1..", kMaxAliasBytes, " bytes without spaces"));
    }
  }
  ASIDE_RETURN_IF_ERROR(ValidateOrca("orca", spec.orca, spec.policy));
  ASIDE_RETURN_IF_ERROR(CheckNumber("grpclb.drop_in_panic_percent",
                                    spec.grpclb.drop_in_panic_percent,
                                    kGrpclbDropInPanic));
  return CheckNumber("grpclb.max_requests_per_second",
                     spec.grpclb.max_requests_per_second,
                     kGrpclbMaxRequestsPerSecond);
}

}  // namespace aside::server
