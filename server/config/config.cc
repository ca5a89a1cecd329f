#include "server/config/config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/field_error.h"
#include "lib/status_macros.h"
#include "proto/yaml/group_yaml.h"
#include "proto/yaml/yaml_reader.h"
#include "server/config/server_settings.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {
namespace {

using yaml::IndexPath;
using yaml::JoinPath;
using yaml::YamlReader;

// Names and aliases are one namespace (CheckGroupNamespace): each group is
// checked against the earlier ones that could collide with it, and an error
// points at the later group's field.
void CheckNamespace(
    YamlReader& reader,
    const std::vector<std::pair<std::string, yaml::FieldMarks>>& where,
    const std::vector<GroupSpec>& groups) {
  std::map<std::string, size_t, std::less<>> by_name;
  std::vector<size_t> with_aliases;
  for (size_t i = 0; i < groups.size(); ++i) {
    const GroupSpec& spec = groups[i];
    std::set<size_t> candidates(with_aliases.begin(), with_aliases.end());
    for (const std::string& alias : spec.aliases) {
      // Group names are lower case; aliases compare folded, as DNS names.
      const std::string folded = FoldDialedName(alias);
      for (absl::string_view name :
           {absl::string_view(folded), GrpclbLabel(folded)}) {
        if (auto it = by_name.find(name); it != by_name.end()) {
          candidates.insert(it->second);
        }
      }
    }
    for (size_t j : candidates) {
      if (absl::Status s = CheckGroupNamespace(spec, groups[j]); !s.ok()) {
        const std::string field = ErrorFieldPath(s).value_or("");
        std::string message(s.message());
        if (!field.empty() && message.starts_with(field + ": ")) {
          message.erase(0, field.size() + 2);
        }
        const std::string owner = where[j].first;
        reader.ErrorAt(where[i].second.Find(field),
                       JoinPath(where[i].first, field),
                       absl::StrCat(message, " at ", owner));
        break;
      }
    }
    by_name.emplace(spec.name, i);
    if (!spec.aliases.empty()) {
      with_aliases.push_back(i);
    }
  }
}

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
  // Per accepted group: its YAML path and marks, for the namespace check.
  std::vector<std::pair<std::string, yaml::FieldMarks>> where;
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
    where.emplace_back(path, std::move(marks));
    out->group_lines.push_back(node.Mark().line + 1);
  }
  CheckNamespace(reader, where, out->groups);
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
    if (reader.CheckMapKeys(*root, "", SettingBlockKeys(""))) {
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

absl::StatusOr<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open config file"));
  }
  // Refuse an oversized file before reading it (LoadYaml would, after).
  in.seekg(0, std::ios::end);
  if (const std::streamoff size = in.tellg();
      size > static_cast<std::streamoff>(yaml::kMaxYamlBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes, more than the ",
                     yaml::kMaxYamlBytes, " a config file may hold"));
  }
  in.seekg(0, std::ios::beg);
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    return absl::InternalError(absl::StrCat(path, ": read error"));
  }
  return buffer.str();
}

absl::StatusOr<ServerConfig> LoadConfigFile(const std::string& path) {
  ASIDE_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path));
  return ParseConfig(text, path);
}

}  // namespace aside::server
