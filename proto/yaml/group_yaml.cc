#include "proto/yaml/group_yaml.h"

#include <google/protobuf/util/json_util.h>

#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/convert.h"
#include "proto/yaml/shorthand.h"

namespace aside::yaml {

void FieldMarks::Set(std::string path, const YAML::Mark& mark) {
  marks_[std::move(path)] = mark;
}

YAML::Mark FieldMarks::Find(absl::string_view path) const {
  std::string p(path);
  while (true) {
    if (auto it = marks_.find(p); it != marks_.end()) {
      return it->second;
    }
    if (p.empty()) {
      return YAML::Mark::null_mark();
    }
    const size_t cut = p.find_last_of(".[");
    p.resize(cut == std::string::npos ? 0 : cut);
  }
}

namespace internal {

void Converter::Locality(const YAML::Node& node, const Paths& at,
                         v1::Locality* out) {
  if (!reader_.CheckMap(node, at.yaml, {"region", "zone", "subzone"})) {
    return;
  }
  std::string s;
  if (YAML::Node n = Child(node, at, "region");
      n && reader_.GetString(n, at.Key("region").yaml, &s)) {
    out->set_region(s);
  }
  if (YAML::Node n = Child(node, at, "zone");
      n && reader_.GetString(n, at.Key("zone").yaml, &s)) {
    out->set_zone(s);
  }
  if (YAML::Node n = Child(node, at, "subzone");
      n && reader_.GetString(n, at.Key("subzone").yaml, &s)) {
    out->set_subzone(s);
  }
}

void Converter::Backend(const YAML::Node& node, const Paths& at,
                        v1::Backend* out) {
  Mark(node, at);
  std::string s;
  if (node.IsScalar()) {
    Mark(node, at.Key("address"));
    out->set_address(node.Scalar());
    return;
  }
  if (!reader_.CheckMap(
          node, at.yaml,
          {"address", "weight", "locality", "metadata", "drained"})) {
    return;
  }
  if (YAML::Node n = Child(node, at, "address"); !n) {
    reader_.Error(node, at.yaml, "missing key 'address'");
  } else if (reader_.GetString(n, at.Key("address").yaml, &s)) {
    out->set_address(s);
  }
  uint32_t weight = 0;
  if (YAML::Node n = Child(node, at, "weight");
      n && reader_.GetUint32(n, at.Key("weight").yaml, &weight)) {
    out->set_weight(weight);
  }
  if (YAML::Node n = Child(node, at, "locality")) {
    Locality(n, at.Key("locality"), out->mutable_locality());
  }
  if (YAML::Node md = Child(node, at, "metadata")) {
    const Paths mp = at.Key("metadata");
    if (!md.IsMap()) {
      reader_.Error(md, mp.yaml, "expected a mapping of strings");
    } else {
      for (const auto& kv : md) {
        std::string key, value;
        if (reader_.GetString(kv.first, mp.yaml, &key) &&
            reader_.GetString(kv.second, JoinPath(mp.yaml, key), &value)) {
          marks_.Set(absl::StrCat(mp.field, "['", key, "']"), kv.second.Mark());
          if (!out->mutable_metadata()->emplace(key, value).second) {
            reader_.Error(kv.first, JoinPath(mp.yaml, key), "key given twice");
          }
        }
      }
    }
  }
  bool drained = false;
  if (YAML::Node n = Child(node, at, "drained");
      n && reader_.GetBool(n, at.Key("drained").yaml, &drained)) {
    out->set_drained(drained);
  }
}

void Converter::HttpCheck(const YAML::Node& node, const Paths& at,
                          v1::HttpCheck* out) {
  if (!reader_.CheckMap(node, at.yaml,
                        {"path", "host", "expected_statuses", "body_limit"})) {
    return;
  }
  std::string s;
  if (YAML::Node n = Child(node, at, "path");
      n && reader_.GetString(n, at.Key("path").yaml, &s)) {
    out->set_path(s);
  }
  if (YAML::Node n = Child(node, at, "host");
      n && reader_.GetString(n, at.Key("host").yaml, &s)) {
    out->set_host(s);
  }
  uint32_t limit = 0;
  if (YAML::Node n = Child(node, at, "body_limit");
      n && reader_.GetUint32(n, at.Key("body_limit").yaml, &limit)) {
    out->set_body_limit(limit);
  }
  if (YAML::Node es = Child(node, at, "expected_statuses")) {
    const Paths ep = at.Key("expected_statuses");
    // An empty list would read as "not set" (the default) in the Group.
    if (!es.IsSequence() || es.size() == 0) {
      reader_.Error(es, ep.yaml,
                    "expected a non-empty list like [\"200-299\", 404]");
      return;
    }
    for (size_t i = 0; i < es.size(); ++i) {
      const Paths ip = ep.Index(i);
      Mark(es[i], ip);
      if (!reader_.GetString(es[i], ip.yaml, &s)) {
        continue;
      }
      std::vector<std::string> parts = absl::StrSplit(s, '-');
      uint32_t from = 0, to = 0;
      if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &from) ||
          (parts.size() == 2 && !absl::SimpleAtoi(parts[1], &to))) {
        reader_.Error(es[i], ip.yaml,
                      absl::StrCat("expected a status like 200 or a range "
                                   "like 200-299, got '",
                                   s, "'"));
        continue;
      }
      v1::StatusRange* r = out->add_expected_statuses();
      r->set_from(from);
      r->set_to(parts.size() == 1 ? from : to);
    }
  }
}

void Converter::HealthCheck(const YAML::Node& node, const Paths& at,
                            v1::HealthCheck* out) {
  if (!reader_.CheckMap(
          node, at.yaml,
          {"kind", "interval", "timeout", "jitter", "rise", "fall",
           "require_first_probe", "port", "http", "grpc"})) {
    return;
  }
  std::string kind;
  if (YAML::Node n = Child(node, at, "kind");
      n && reader_.GetString(n, at.Key("kind").yaml, &kind)) {
    v1::HealthCheck::Kind k;
    if (kind == absl::AsciiStrToLower(kind) &&
        v1::HealthCheck::Kind_Parse(absl::AsciiStrToUpper(kind), &k) &&
        k != v1::HealthCheck::KIND_UNSPECIFIED) {
      out->set_kind(k);
    } else {
      reader_.Error(n, at.Key("kind").yaml,
                    absl::StrCat("unknown kind '", kind,
                                 "' (allowed: tcp, http, grpc, none)"));
    }
  }
  if (YAML::Node n = Child(node, at, "interval")) {
    Duration(n, at.Key("interval"), [&] { return out->mutable_interval(); });
  }
  if (YAML::Node n = Child(node, at, "timeout")) {
    Duration(n, at.Key("timeout"), [&] { return out->mutable_timeout(); });
  }
  double jitter = 0;
  if (YAML::Node n = Child(node, at, "jitter");
      n && reader_.GetDouble(n, at.Key("jitter").yaml, &jitter)) {
    out->set_jitter(jitter);
  }
  uint32_t v = 0;
  if (YAML::Node n = Child(node, at, "rise");
      n && reader_.GetUint32(n, at.Key("rise").yaml, &v)) {
    out->set_rise(v);
  }
  if (YAML::Node n = Child(node, at, "fall");
      n && reader_.GetUint32(n, at.Key("fall").yaml, &v)) {
    out->set_fall(v);
  }
  bool first = false;
  if (YAML::Node n = Child(node, at, "require_first_probe");
      n && reader_.GetBool(n, at.Key("require_first_probe").yaml, &first)) {
    out->set_require_first_probe(first);
  }
  if (YAML::Node n = Child(node, at, "port");
      n && reader_.GetUint32(n, at.Key("port").yaml, &v)) {
    out->set_port(v);
  }
  if (YAML::Node n = Child(node, at, "http")) {
    HttpCheck(n, at.Key("http"), out->mutable_http());
  }
  if (YAML::Node n = Child(node, at, "grpc")) {
    const Paths gp = at.Key("grpc");
    v1::GrpcCheck* grpc = out->mutable_grpc();
    if (reader_.CheckMap(n, gp.yaml, {"service", "authority"})) {
      std::string s;
      if (YAML::Node c = Child(n, gp, "service");
          c && reader_.GetString(c, gp.Key("service").yaml, &s)) {
        grpc->set_service(s);
      }
      if (YAML::Node c = Child(n, gp, "authority");
          c && reader_.GetString(c, gp.Key("authority").yaml, &s)) {
        grpc->set_authority(s);
      }
    }
  }
}

void Converter::Orca(const YAML::Node& node, const Paths& at,
                     v1::OrcaOptions* out) {
  if (!reader_.CheckMap(
          node, at.yaml,
          {"enabled", "interval", "weights", "move_keys", "blackout_period",
           "weight_expiration_period", "error_utilization_penalty"})) {
    return;
  }
  // Writing the section turns reports on unless it says otherwise.
  bool flag = true;
  if (YAML::Node n = Child(node, at, "enabled")) {
    reader_.GetBool(n, at.Key("enabled").yaml, &flag);
  }
  out->set_enabled(flag);
  if (YAML::Node n = Child(node, at, "weights");
      n && reader_.GetBool(n, at.Key("weights").yaml, &flag)) {
    out->set_weights(flag);
  }
  if (YAML::Node n = Child(node, at, "move_keys");
      n && reader_.GetBool(n, at.Key("move_keys").yaml, &flag)) {
    out->set_move_keys(flag);
  }
  if (YAML::Node n = Child(node, at, "interval")) {
    Duration(n, at.Key("interval"), [&] { return out->mutable_interval(); });
  }
  if (YAML::Node n = Child(node, at, "blackout_period")) {
    Duration(n, at.Key("blackout_period"),
             [&] { return out->mutable_blackout_period(); });
  }
  if (YAML::Node n = Child(node, at, "weight_expiration_period")) {
    Duration(n, at.Key("weight_expiration_period"),
             [&] { return out->mutable_weight_expiration_period(); });
  }
  double penalty = 0;
  if (YAML::Node n = Child(node, at, "error_utilization_penalty");
      n && reader_.GetDouble(n, at.Key("error_utilization_penalty").yaml,
                             &penalty)) {
    out->set_error_utilization_penalty(penalty);
  }
}

void Converter::Outlier(const YAML::Node& node, const Paths& at,
                        v1::OutlierDetection* out) {
  if (!reader_.CheckMap(
          node, at.yaml,
          {"enabled", "consecutive_failures", "base_ejection_time",
           "max_ejection_time", "max_ejection_percent"})) {
    return;
  }
  // Writing the section turns detection on unless it says otherwise.
  bool enabled = true;
  if (YAML::Node n = Child(node, at, "enabled")) {
    reader_.GetBool(n, at.Key("enabled").yaml, &enabled);
  }
  out->set_enabled(enabled);
  uint32_t failures = 0;
  if (YAML::Node n = Child(node, at, "consecutive_failures");
      n &&
      reader_.GetUint32(n, at.Key("consecutive_failures").yaml, &failures)) {
    out->set_consecutive_failures(failures);
  }
  if (YAML::Node n = Child(node, at, "base_ejection_time")) {
    Duration(n, at.Key("base_ejection_time"),
             [&] { return out->mutable_base_ejection_time(); });
  }
  if (YAML::Node n = Child(node, at, "max_ejection_time")) {
    Duration(n, at.Key("max_ejection_time"),
             [&] { return out->mutable_max_ejection_time(); });
  }
  double percent = 0;
  if (YAML::Node n = Child(node, at, "max_ejection_percent");
      n &&
      reader_.GetDouble(n, at.Key("max_ejection_percent").yaml, &percent)) {
    out->set_max_ejection_percent(percent);
  }
}

void Converter::Dns(const YAML::Node& node, const Paths& at,
                    v1::DnsDiscovery* out) {
  if (!reader_.CheckMap(
          node, at.yaml,
          {"name", "port", "srv", "interval", "weight", "locality"})) {
    return;
  }
  std::string name;
  if (YAML::Node n = Child(node, at, "name"); !n) {
    reader_.Error(node, at.yaml, "missing key 'name'");
  } else if (reader_.GetString(n, at.Key("name").yaml, &name)) {
    out->set_name(name);
  }
  uint32_t v = 0;
  if (YAML::Node n = Child(node, at, "port");
      n && reader_.GetUint32(n, at.Key("port").yaml, &v)) {
    out->set_port(v);
  }
  bool srv = false;
  if (YAML::Node n = Child(node, at, "srv");
      n && reader_.GetBool(n, at.Key("srv").yaml, &srv)) {
    out->set_srv(srv);
  }
  if (YAML::Node n = Child(node, at, "interval")) {
    Duration(n, at.Key("interval"), [&] { return out->mutable_interval(); });
  }
  if (YAML::Node n = Child(node, at, "weight");
      n && reader_.GetUint32(n, at.Key("weight").yaml, &v)) {
    out->set_weight(v);
  }
  if (YAML::Node n = Child(node, at, "locality")) {
    Locality(n, at.Key("locality"), out->mutable_locality());
  }
}

void Converter::Group(const YAML::Node& node, const Paths& at, v1::Group* out) {
  Mark(node, at);
  if (!reader_.CheckMap(node, at.yaml,
                        {"name", "policy", "backends", "health_check",
                         "panic_threshold", "slow_start", "outlier_detection",
                         "dns", "aliases", "grpclb", "orca"})) {
    return;
  }
  std::string name;
  if (YAML::Node n = Child(node, at, "name"); !n) {
    reader_.Error(node, at.yaml, "missing key 'name'");
  } else if (reader_.GetString(n, at.Key("name").yaml, &name)) {
    out->set_name(name);
  }
  if (YAML::Node n = node["policy"]) {
    Policy(n, at.Key("policy"), out->mutable_policy());
  }
  if (YAML::Node b = Child(node, at, "backends"); b && !b.IsNull()) {
    // (An empty list written as "backends:" is fine.)
    const Paths bp = at.Key("backends");
    if (!b.IsSequence()) {
      reader_.Error(b, bp.yaml, "expected a list of backends");
    } else {
      for (size_t i = 0; i < b.size(); ++i) {
        Backend(b[i], bp.Index(i), out->add_backends());
      }
    }
  }
  if (YAML::Node n = Child(node, at, "health_check")) {
    HealthCheck(n, at.Key("health_check"), out->mutable_health_check());
  }
  double threshold = 0;
  if (YAML::Node n = Child(node, at, "panic_threshold");
      n && reader_.GetDouble(n, at.Key("panic_threshold").yaml, &threshold)) {
    out->set_panic_threshold(threshold);
  }
  if (YAML::Node n = Child(node, at, "slow_start")) {
    Duration(n, at.Key("slow_start"),
             [&] { return out->mutable_slow_start(); });
  }
  if (YAML::Node n = Child(node, at, "outlier_detection")) {
    Outlier(n, at.Key("outlier_detection"), out->mutable_outlier_detection());
  }
  if (YAML::Node n = Child(node, at, "dns")) {
    Dns(n, at.Key("dns"), out->mutable_dns());
  }
  if (YAML::Node n = Child(node, at, "orca")) {
    Orca(n, at.Key("orca"), out->mutable_orca());
  }
  if (YAML::Node a = Child(node, at, "aliases")) {
    const Paths ap = at.Key("aliases");
    if (!a.IsSequence()) {
      reader_.Error(a, ap.yaml, "expected a list of names");
    } else {
      for (size_t i = 0; i < a.size(); ++i) {
        std::string alias;
        Mark(a[i], ap.Index(i));
        if (reader_.GetString(a[i], ap.Index(i).yaml, &alias)) {
          out->add_aliases(alias);
        }
      }
    }
  }
  if (YAML::Node l = Child(node, at, "grpclb")) {
    const Paths lp = at.Key("grpclb");
    if (reader_.CheckMap(
            l, lp.yaml, {"drop_in_panic_percent", "max_requests_per_second"})) {
      double v = 0;
      if (YAML::Node n = Child(l, lp, "drop_in_panic_percent");
          n && reader_.GetDouble(n, lp.Key("drop_in_panic_percent").yaml, &v)) {
        out->mutable_grpclb()->set_drop_in_panic_percent(v);
      }
      if (YAML::Node n = Child(l, lp, "max_requests_per_second");
          n &&
          reader_.GetDouble(n, lp.Key("max_requests_per_second").yaml, &v)) {
        out->mutable_grpclb()->set_max_requests_per_second(v);
      }
      out->mutable_grpclb();
    }
  }
}

}  // namespace internal

namespace {

using internal::Converter;
using internal::Paths;

// A JSON file holding protobuf JSON (grpcurl's form) rather than the
// shorthand: {"group": {...}}, {"groups": [...]} or a bare Group.
absl::StatusOr<std::vector<v1::Group>> GroupsFromProtoJson(
    const YAML::Node& root, absl::string_view text) {
  google::protobuf::util::JsonParseOptions options;
  const std::string json(text);
  std::vector<v1::Group> out;
  google::protobuf::util::Status status;
  if (root["groups"]) {
    v1::ListGroupsResponse list;
    status = google::protobuf::util::JsonStringToMessage(json, &list, options);
    out.assign(list.groups().begin(), list.groups().end());
  } else if (root["group"]) {
    v1::CreateGroupRequest request;
    status =
        google::protobuf::util::JsonStringToMessage(json, &request, options);
    out.push_back(request.group());
  } else {
    v1::Group group;
    status = google::protobuf::util::JsonStringToMessage(json, &group, options);
    out.push_back(group);
  }
  if (!status.ok()) {
    return absl::InvalidArgumentError(std::string(status.message()));
  }
  return out;
}

}  // namespace

bool GroupFromYaml(YamlReader& reader, const YAML::Node& node,
                   absl::string_view path, v1::Group* out, FieldMarks* marks) {
  const size_t before = reader.error_count();
  Converter(reader, *marks).Group(node, Paths{std::string(path), ""}, out);
  return reader.error_count() == before;
}

absl::StatusOr<std::vector<v1::Group>> GroupsFromText(absl::string_view text,
                                                      absl::string_view file) {
  absl::StatusOr<YAML::Node> root = LoadYaml(text, file);
  if (!root.ok()) {
    return root.status();
  }
  YamlReader reader{std::string(file)};
  std::vector<v1::Group> groups;
  try {
    auto convert = [&](const YAML::Node& node, const std::string& path) {
      FieldMarks marks;
      GroupFromYaml(reader, node, path, &groups.emplace_back(), &marks);
    };
    if (root->IsMap() && (*root)["groups"]) {
      const YAML::Node list = (*root)["groups"];
      if (!list.IsSequence()) {
        reader.Error(list, "groups", "expected a list of groups");
      } else {
        for (size_t i = 0; i < list.size(); ++i) {
          convert(list[i], IndexPath("groups", i));
        }
      }
    } else if (root->IsMap() && (*root)["group"]) {
      convert((*root)["group"], "group");
    } else {
      convert(*root, "");
    }
  } catch (const YAML::Exception& e) {
    reader.ErrorAt(e.mark, "", e.msg);
  }
  if (reader.error_count() == 0) {
    return groups;
  }
  const absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(text);
  if (!trimmed.empty() && trimmed.front() == '{') {
    absl::StatusOr<std::vector<v1::Group>> json =
        GroupsFromProtoJson(*root, text);
    if (json.ok()) {
      return json;
    }
  }
  return reader.Status();
}

}  // namespace aside::yaml
