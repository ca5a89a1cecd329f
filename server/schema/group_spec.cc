#include "server/group_spec.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"

namespace aside::server {
namespace {

absl::Status DurationIn(absl::string_view field, absl::Duration value,
                        absl::Duration low, absl::Duration high) {
  if (value < low || value > high) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", absl::FormatDuration(value),
                     " out of range ", absl::FormatDuration(low), "..",
                     absl::FormatDuration(high)));
  }
  return absl::OkStatus();
}

bool HasControlOrSpace(absl::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return true;
    }
  }
  return false;
}

}  // namespace

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

absl::Status ValidateHealthCheck(absl::string_view field,
                                 const HealthCheckSpec& spec) {
  ASIDE_RETURN_IF_ERROR(DurationIn(absl::StrCat(field, ".interval"),
                                   spec.interval, absl::Milliseconds(100),
                                   absl::Hours(1)));
  ASIDE_RETURN_IF_ERROR(DurationIn(absl::StrCat(field, ".timeout"),
                                   spec.timeout, absl::Milliseconds(1),
                                   spec.interval));
  if (!(spec.jitter >= 0 && spec.jitter <= 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".jitter: ", spec.jitter, " out of range 0..0.5"));
  }
  if (spec.rise < 1 || spec.rise > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".rise: ", spec.rise, " out of range 1..100"));
  }
  if (spec.fall < 1 || spec.fall > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".fall: ", spec.fall, " out of range 1..100"));
  }
  if (spec.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".port: ", spec.port, " out of range 0..65535"));
  }
  if (spec.kind == HealthCheckSpec::Kind::kHttp) {
    if (spec.http_path.empty() || spec.http_path.front() != '/' ||
        spec.http_path.size() > 2048 || HasControlOrSpace(spec.http_path)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ".http.path: must start with '/', be at most 2048 bytes and hold "
          "no spaces or control characters (CR, LF)"));
    }
    if (spec.http_host.size() > 255 || HasControlOrSpace(spec.http_host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".http.host: at most 255 bytes, no spaces or control "
                 "characters"));
    }
    if (spec.http_expected_statuses.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".http.expected_statuses: empty"));
    }
    for (size_t i = 0; i < spec.http_expected_statuses.size(); ++i) {
      const StatusRange& r = spec.http_expected_statuses[i];
      if (r.from < 100 || r.to > 599 || r.from > r.to) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".http.expected_statuses[", i, "]: ", r.from, "-", r.to,
            " is not a range within 100..599"));
      }
    }
    if (spec.http_body_limit < 1024 || spec.http_body_limit > 1024 * 1024) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".http.body_limit: ", spec.http_body_limit,
                       " out of range 1024..1048576"));
    }
  }
  if (spec.kind == HealthCheckSpec::Kind::kGrpc) {
    if (spec.grpc_service.size() > 1024 ||
        HasControlOrSpace(spec.grpc_service)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".grpc.service: at most 1024 bytes, no spaces or control "
                 "characters"));
    }
    if (spec.grpc_authority.size() > 255 ||
        HasControlOrSpace(spec.grpc_authority)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".grpc.authority: at most 255 bytes, no spaces or control "
                 "characters"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateOutlier(absl::string_view field, const OutlierSpec& spec) {
  if (spec.consecutive_failures < 1 || spec.consecutive_failures > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".consecutive_failures: ",
                     spec.consecutive_failures, " out of range 1..1000"));
  }
  ASIDE_RETURN_IF_ERROR(DurationIn(absl::StrCat(field, ".base_ejection_time"),
                                   spec.base_ejection_time, absl::Seconds(1),
                                   absl::Hours(1)));
  ASIDE_RETURN_IF_ERROR(DurationIn(absl::StrCat(field, ".max_ejection_time"),
                                   spec.max_ejection_time,
                                   spec.base_ejection_time, absl::Hours(24)));
  if (!(spec.max_ejection_percent >= 0 && spec.max_ejection_percent <= 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".max_ejection_percent: ",
                     spec.max_ejection_percent, " out of range 0..100"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDns(absl::string_view field, const DnsSpec& spec) {
  if (spec.name.empty() || spec.name.size() > 253 ||
      HasControlOrSpace(spec.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".name: required, at most 253 bytes, no spaces"));
  }
  if (!spec.srv && (spec.port < 1 || spec.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".port: ", spec.port,
        " out of range 1..65535 (required unless srv is true)"));
  }
  if (spec.srv && spec.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".port: ", spec.port, " out of range 0..65535"));
  }
  ASIDE_RETURN_IF_ERROR(DurationIn(absl::StrCat(field, ".interval"),
                                   spec.interval, absl::Seconds(1),
                                   absl::Hours(1)));
  if (spec.weight > kMaxWeight) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".weight: ", spec.weight, " out of range 0..", kMaxWeight));
  }
  return absl::OkStatus();
}

absl::Status ValidateGroupSpec(GroupSpec& spec) {
  ASIDE_RETURN_IF_ERROR(ValidateGroupName(spec.name));
  ASIDE_RETURN_IF_ERROR(ValidatePolicy("policy", spec.policy));
  if (spec.backends.size() > kMaxBackendsPerGroup) {
    return absl::ResourceExhaustedError(
        absl::StrCat("backends: ", spec.backends.size(),
                     " backends (at most ", kMaxBackendsPerGroup, ")"));
  }
  std::set<std::string, std::less<>> seen;
  uint64_t weight_sum = 0;
  for (size_t i = 0; i < spec.backends.size(); ++i) {
    const std::string field = absl::StrCat("backends[", i, "]");
    ASIDE_RETURN_IF_ERROR(ValidateBackend(field, spec.backends[i],
                                          /*allow_hostname=*/false));
    if (!seen.insert(spec.backends[i].address).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".address: ", spec.backends[i].address,
                       " is listed twice"));
    }
    weight_sum += spec.backends[i].weight;
  }
  if (weight_sum > 0xffffffffULL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backends: the weights sum to ", weight_sum, " (at most 2^32-1)"));
  }
  if (spec.policy.kind == PolicyKind::kMaglev &&
      spec.backends.size() > spec.policy.maglev.table_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy.maglev.table_size: ", spec.policy.maglev.table_size,
        " is smaller than the ", spec.backends.size(), " backends"));
  }
  ASIDE_RETURN_IF_ERROR(ValidateHealthCheck("health_check", spec.health_check));
  if (!(spec.panic_threshold >= 0 && spec.panic_threshold <= 100)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "panic_threshold: ", spec.panic_threshold, " out of range 0..100"));
  }
  ASIDE_RETURN_IF_ERROR(DurationIn("slow_start", spec.slow_start,
                                   absl::ZeroDuration(), absl::Hours(1)));
  ASIDE_RETURN_IF_ERROR(ValidateOutlier("outlier_detection", spec.outlier));
  if (spec.dns) {
    ASIDE_RETURN_IF_ERROR(ValidateDns("dns", *spec.dns));
  }
  if (spec.aliases.size() > kMaxAliases) {
    return absl::InvalidArgumentError(absl::StrCat(
        "aliases: ", spec.aliases.size(), " aliases (at most ", kMaxAliases,
        ")"));
  }
  for (size_t i = 0; i < spec.aliases.size(); ++i) {
    if (spec.aliases[i].empty() || spec.aliases[i].size() > 253 ||
        HasControlOrSpace(spec.aliases[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "aliases[", i, "]: must be 1..253 bytes without spaces"));
    }
  }
  if (!(spec.grpclb.drop_in_panic_percent >= 0 &&
        spec.grpclb.drop_in_panic_percent <= 90)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpclb.drop_in_panic_percent: ",
                     spec.grpclb.drop_in_panic_percent, " out of range 0..90"));
  }
  if (!(spec.grpclb.max_requests_per_second >= 0 &&
        spec.grpclb.max_requests_per_second <= 1e9)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpclb.max_requests_per_second: ",
                     spec.grpclb.max_requests_per_second,
                     " out of range 0..1e9"));
  }
  return absl::OkStatus();
}

}  // namespace aside::server
