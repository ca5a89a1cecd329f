// The config file's shorthand for a group, converted to aside.v1.Group.
//
// One converter serves the server's config file and `asidectl create-group
// FILE`, so the shorthand has one meaning:
//   name: payments
//   policy: ketama                      # or {name: ketama, points_per_weight:
//   40} backends: ["10.0.0.1:80", {address: "10.0.0.2:80", weight: 50}]
//   health_check: {kind: http, interval: 5s, http: {expected_statuses:
//   ["200-299", 404]}} outlier_detection: {}               # present means
//   enabled unless enabled: false dns: {name: web.svc, port: 80} aliases: [web]
//   grpclb: {drop_in_panic_percent: 10}
//
// The converter checks what the shorthand itself defines: known keys, no key
// given twice, types (string, integer that fits the field, number, bool,
// duration), policy, kind and enum names, required keys (`name`, a backend's
// `address`). It checks no range and no cross-field rule: the server
// validates the resulting Group (server/schema/group_spec.h), and maps an
// error's field path back to the YAML position through FieldMarks.
#ifndef ASIDE_PROTO_YAML_GROUP_YAML_H_
#define ASIDE_PROTO_YAML_GROUP_YAML_H_

#include <yaml-cpp/yaml.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "aside/v1/admin.pb.h"
#include "proto/yaml/yaml_reader.h"

namespace aside::yaml {

// Where each field of one converted group was written, by its field path
// relative to the group as validators name it: "backends[1].weight",
// "policy.maglev.table_size", "health_check.http.expected_statuses[0]".
class FieldMarks {
 public:
  void Set(std::string path, const YAML::Mark& mark);
  // The mark of `path`, else of its closest recorded ancestor
  // ("a.b[2].c" -> "a.b[2]" -> "a.b" -> "a" -> the group); a null mark when
  // nothing was recorded.
  YAML::Mark Find(absl::string_view path) const;

 private:
  std::map<std::string, YAML::Mark, std::less<>> marks_;
};

// Converts one group written in the shorthand into `out`, recording the
// position of every field in `marks`. Errors go to `reader` under `path`
// (the YAML path of the group, e.g. "groups[2]"). Returns false when any was
// reported.
bool GroupFromYaml(YamlReader& reader, const YAML::Node& node,
                   absl::string_view path, v1::Group* out, FieldMarks* marks);

// The groups of a group file, as asidectl takes it: a list under `groups:`
// (other top-level keys, such as those of a whole server config file, are
// ignored), one group under `group:`, or a bare group; each written in the
// shorthand. A JSON file may instead hold protobuf JSON, as grpcurl takes
// it. Errors are InvalidArgument naming file:line:column and the key.
absl::StatusOr<std::vector<v1::Group>> GroupsFromText(absl::string_view text,
                                                      absl::string_view file);

}  // namespace aside::yaml

#endif  // ASIDE_PROTO_YAML_GROUP_YAML_H_
