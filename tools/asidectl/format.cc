// asidectl's output helpers (format.h): stderr messages, protobuf JSON,
// the short texts of its table cells, and column layout.
#include "tools/asidectl/format.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "lib/policy_config.h"
#include "proto/convert.h"

namespace aside::asidectl {

void Say(absl::string_view message) {
  std::string line(message);
  while (!line.empty() && line.back() == '\n') {
    line.pop_back();
  }
  line.push_back('\n');
  std::cerr << line << std::flush;
}

std::string ToJson(const google::protobuf::Message& m, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = false;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string PolicyText(const v1::Policy& p) {
  absl::StatusOr<PolicyConfig> c = FromProto("policy", p);
  return c.ok() ? std::string(c->name()) : "invalid";
}

std::string SourceText(v1::GroupSource s) {
  switch (s) {
    case v1::GROUP_SOURCE_FILE:
      return "file";
    case v1::GROUP_SOURCE_STORE:
      return "admin";
    default:
      return "-";
  }
}

std::string HealthText(v1::HealthState s) {
  switch (s) {
    case v1::HEALTH_STATE_HEALTHY:
      return "healthy";
    case v1::HEALTH_STATE_UNHEALTHY:
      return "unhealthy";
    case v1::HEALTH_STATE_UNKNOWN:
      return "unknown";
    default:
      return "-";
  }
}

std::string LocalityText(const v1::Locality& l) {
  if (l.region().empty() && l.zone().empty() && l.subzone().empty()) {
    return "-";
  }
  return FromProto(l).ToString();
}

std::string MetadataText(
    const google::protobuf::Map<std::string, std::string>& m) {
  if (m.empty()) {
    return "-";
  }
  std::map<std::string, std::string> sorted(m.begin(), m.end());
  return absl::StrJoin(sorted, ",", absl::PairFormatter("="));
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) {
        line += std::string(widths[i] - row[i].size() + 2, ' ');
      }
    }
    std::cout << line << "\n";
  }
}

}  // namespace aside::asidectl
