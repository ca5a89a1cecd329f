#include "server/fleet/fleet_records.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "lib/json.h"

namespace aside::server::fleet {
namespace {

absl::StatusOr<google::protobuf::Struct> ParseObject(absl::string_view value) {
  google::protobuf::Struct s;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (auto st = google::protobuf::util::JsonStringToMessage(std::string(value),
                                                            &s, options);
      !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a JSON object: ", st.message().as_string()));
  }
  return s;
}

std::string String(const google::protobuf::Struct& s, const char* field) {
  auto it = s.fields().find(field);
  if (it == s.fields().end() || !it->second.has_string_value()) {
    return "";
  }
  return it->second.string_value();
}

// A non-negative integer field; 0 when absent or not one.
uint32_t Count(const google::protobuf::Struct& s, const char* field) {
  auto it = s.fields().find(field);
  if (it == s.fields().end() || !it->second.has_number_value()) {
    return 0;
  }
  const double v = it->second.number_value();
  if (!(v >= 0) || v > 4294967295.0) {
    return 0;
  }
  return static_cast<uint32_t>(std::floor(v));
}

std::optional<HealthState> StateFromName(absl::string_view name) {
  for (HealthState s : {HealthState::kUnknown, HealthState::kHealthy,
                        HealthState::kUnhealthy}) {
    if (HealthStateName(s) == name) {
      return s;
    }
  }
  return std::nullopt;
}

}  // namespace

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string EncodeMember(const MemberRecord& m) {
  std::string out = "{\"id\":";
  AppendJsonString(&out, m.id);
  out += ",\"address\":";
  AppendJsonString(&out, m.address);
  out += ",\"start_time\":";
  AppendJsonString(&out, m.start_time);
  absl::StrAppend(&out, ",\"targets_owned\":", m.targets_owned, "}");
  return out;
}

absl::StatusOr<MemberRecord> ParseMember(absl::string_view value) {
  absl::StatusOr<google::protobuf::Struct> s = ParseObject(value);
  if (!s.ok()) {
    return s.status();
  }
  MemberRecord m;
  m.id = String(*s, "id");
  m.address = String(*s, "address");
  m.start_time = String(*s, "start_time");
  m.targets_owned = Count(*s, "targets_owned");
  if (m.id.empty()) {
    return absl::InvalidArgumentError("member value without \"id\"");
  }
  return m;
}

std::string EncodeHealth(const HealthRecord& h) {
  std::string out = "{\"owner\":";
  AppendJsonString(&out, h.owner);
  out += ",\"address\":";
  AppendJsonString(&out, h.address);
  out += ",\"state\":";
  AppendJsonString(&out, HealthStateName(h.counters.state));
  absl::StrAppend(&out, ",\"successes\":", h.counters.consecutive_successes,
                  ",\"failures\":", h.counters.consecutive_failures,
                  ",\"reason\":");
  AppendJsonString(&out, h.reason);
  out += ",\"at\":";
  AppendJsonString(&out, h.at);
  out += "}";
  return out;
}

absl::StatusOr<HealthRecord> ParseHealth(absl::string_view value) {
  absl::StatusOr<google::protobuf::Struct> s = ParseObject(value);
  if (!s.ok()) {
    return s.status();
  }
  HealthRecord h;
  h.owner = String(*s, "owner");
  h.address = String(*s, "address");
  const std::string state = String(*s, "state");
  std::optional<HealthState> parsed = StateFromName(state);
  if (!parsed.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("health value with unknown \"state\" '", state, "'"));
  }
  h.counters.state = *parsed;
  h.counters.consecutive_successes = Count(*s, "successes");
  h.counters.consecutive_failures = Count(*s, "failures");
  h.reason = String(*s, "reason");
  h.at = String(*s, "at");
  return h;
}

std::string HealthKey(absl::string_view prefix, uint64_t fleet_key) {
  return absl::StrCat(prefix, "health/", absl::StrFormat("%016x", fleet_key));
}

std::optional<uint64_t> ParseHealthKey(absl::string_view health_prefix,
                                       absl::string_view key) {
  if (!absl::ConsumePrefix(&key, health_prefix) || key.size() != 16) {
    return std::nullopt;
  }
  uint64_t v = 0;
  if (!absl::SimpleHexAtoi(key, &v)) {
    return std::nullopt;
  }
  return v;
}

}  // namespace aside::server::fleet
