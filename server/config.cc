#include "server/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/field_error.h"
#include "proto/yaml/group_yaml.h"
#include "proto/yaml/yaml_reader.h"
#include "server/admin_convert.h"
#include "server/server_settings.h"

namespace aside::server {
namespace {

using yaml::IndexPath;
using yaml::JoinPath;
using yaml::YamlReader;

// Reads, converts and validates groups[i]; errors go to `reader`.
void ReadGroups(YamlReader& reader, const YAML::Node& list, ServerConfig* out) {
  if (list.IsNull()) {
    return;
  }
  if (!list.IsSequence()) {
    reader.Error(list, "groups", "expected a list of groups");
    return;
  }
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node node = list[i];
    const std::string path = IndexPath("groups", i);
    v1::Group pb;
    yaml::FieldMarks marks;
    if (!yaml::GroupFromYaml(reader, node, path, &pb, &marks)) {
      continue;
    }
    if (auto [it, inserted] = names.emplace(pb.name(), i); !inserted) {
      reader.ErrorAt(marks.Find("name"), JoinPath(path, "name"),
                     absl::StrCat("duplicate group '", pb.name(),
                                  "' (also groups[", it->second, "])"));
      continue;
    }
    absl::StatusOr<GroupSpec> spec = GroupSpecFromProto("", pb);
    if (!spec.ok()) {
      // Point at the field the validator names (or the group).
      const std::string field = ErrorFieldPath(spec.status()).value_or("");
      std::string message(spec.status().message());
      if (!field.empty() && message.starts_with(field + ": ")) {
        message.erase(0, field.size() + 2);
      }
      reader.ErrorAt(marks.Find(field), JoinPath(path, field), message);
      continue;
    }
    spec->source = GroupSource::kFile;
    spec->file = reader.file();
    out->groups.push_back(*std::move(spec));
  }
  if (list.size() > out->max_groups) {
    reader.Error(list, "groups",
                 absl::StrCat(list.size(), " groups (limits.max_groups is ",
                              out->max_groups, ")"));
  }
}

}  // namespace

absl::StatusOr<ServerConfig> ParseConfig(absl::string_view text,
                                         const std::string& file) {
  absl::StatusOr<YAML::Node> root = yaml::LoadYaml(text, file);
  if (!root.ok()) {
    return root.status();
  }
  ServerConfig config;
  if (root->IsNull()) {
    return config;  // An empty file is a valid, empty config.
  }
  YamlReader reader(file);
  // yaml-cpp reports by exception: caught here, at the boundary.
  try {
    if (reader.CheckMap(*root, "",
                        {"listen", "metrics", "state_dir", "log_format",
                         "log_level", "shutdown_grace", "limits", "health",
                         "health_listen", "admin", "tls", "session_key_file",
                         "discovery", "grpclb", "store", "groups"})) {
      ReadServerSettings(reader, *root, &config);
      if (const YAML::Node groups = (*root)["groups"]; groups) {
        ReadGroups(reader, groups, &config);
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (absl::Status s = reader.Status(); !s.ok()) {
    return s;
  }
  return config;
}

absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open config file"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat(path, ": read error"));
  }
  return ParseConfig(buffer.str(), path);
}

}  // namespace aside::server
