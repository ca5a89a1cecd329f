// Internal to aside_yaml: the shorthand converter shared by
// group_yaml.cc (groups, backends, health checks, ...) and policy_yaml.cc
// (policies and their parameters).
#ifndef ASIDE_PROTO_YAML_SHORTHAND_H_
#define ASIDE_PROTO_YAML_SHORTHAND_H_

#include <yaml-cpp/yaml.h>

#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "aside/v1/admin.pb.h"
#include "proto/convert.h"
#include "proto/yaml/group_yaml.h"
#include "proto/yaml/yaml_reader.h"

namespace aside::yaml::internal {

// Field paths of the Group message ("policy.ketama") next to the YAML paths
// of the shorthand ("groups[0].policy"): errors found here name the YAML
// path, marks are recorded under the field path that validators report.
struct Paths {
  std::string yaml;
  std::string field;
  Paths Key(absl::string_view key) const {
    return {JoinPath(yaml, key), JoinPath(field, key)};
  }
  Paths Key(absl::string_view key, absl::string_view field_key) const {
    return {JoinPath(yaml, key), JoinPath(field, field_key)};
  }
  Paths Index(size_t i) const {
    return {IndexPath(yaml, i), IndexPath(field, i)};
  }
};

class Converter {
 public:
  Converter(YamlReader& reader, FieldMarks& marks)
      : reader_(reader), marks_(marks) {}

  void Group(const YAML::Node& node, const Paths& at, v1::Group* out);
  void Policy(const YAML::Node& node, const Paths& at, v1::Policy* out);

 private:
  // The value at `key` of a map (undefined when absent), its mark recorded.
  YAML::Node Child(const YAML::Node& node, const Paths& at,
                   absl::string_view key, absl::string_view field_key = {}) {
    YAML::Node child = node[std::string(key)];
    if (child) {
      Mark(child, field_key.empty() ? at.Key(key) : at.Key(key, field_key));
    }
    return child;
  }
  void Mark(const YAML::Node& node, const Paths& at) {
    marks_.Set(at.field, node.Mark());
  }

  template <typename Setter>
  void Duration(const YAML::Node& node, const Paths& at, Setter set) {
    absl::Duration d;
    if (reader_.GetDuration(node, at.yaml, &d)) {
      ToProto(d, set());
    }
  }

  void Locality(const YAML::Node& node, const Paths& at, v1::Locality* out);
  void Backend(const YAML::Node& node, const Paths& at, v1::Backend* out);
  void HealthCheck(const YAML::Node& node, const Paths& at,
                   v1::HealthCheck* out);
  void HttpCheck(const YAML::Node& node, const Paths& at, v1::HttpCheck* out);
  void Outlier(const YAML::Node& node, const Paths& at,
               v1::OutlierDetection* out);
  void Dns(const YAML::Node& node, const Paths& at, v1::DnsDiscovery* out);
  void Orca(const YAML::Node& node, const Paths& at, v1::OrcaOptions* out);

  YamlReader& reader_;
  FieldMarks& marks_;
};

}  // namespace aside::yaml::internal

#endif  // ASIDE_PROTO_YAML_SHORTHAND_H_
