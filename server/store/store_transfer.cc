#include "server/store/store_transfer.h"

#include <google/protobuf/util/json_util.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {

absl::StatusOr<size_t> ExportState(Store& store, const std::string& path) {
  ASIDE_ASSIGN_OR_RETURN(StoreSnapshot snapshot, store.Load());
  v1::ListGroupsResponse out;
  for (StoredGroup& g : snapshot.groups) {
    *out.add_groups() = std::move(g.definition);
  }
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  if (auto s = google::protobuf::util::MessageToJsonString(out, &json, options);
      !s.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot encode the groups: ", s.message().as_string()));
  }
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << json;
  file.close();
  if (!file) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot write the exported groups"));
  }
  return static_cast<size_t>(out.groups_size());
}

absl::StatusOr<ImportResult> ImportState(Store& store,
                                         const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  v1::ListGroupsResponse in;
  if (auto s = google::protobuf::util::JsonStringToMessage(buffer.str(), &in);
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an exported state file: ", s.message().as_string()));
  }
  for (int i = 0; i < in.groups_size(); ++i) {
    absl::StatusOr<GroupSpec> spec =
        GroupSpecFromProto(absl::StrCat("groups[", i, "]"), in.groups(i));
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", spec.status().message()));
    }
  }
  ASIDE_ASSIGN_OR_RETURN(StoreSnapshot existing, store.Load());
  ImportResult result;
  for (const v1::Group& g : in.groups()) {
    bool present = false;
    for (const StoredGroup& e : existing.groups) {
      present = present || e.definition.name() == g.name();
    }
    if (present) {
      result.skipped.push_back(g.name());
      continue;
    }
    // Only the definition fields: state (generation, readiness) is not
    // part of what a store keeps.
    absl::StatusOr<GroupSpec> spec = GroupSpecFromProto("group", g);
    v1::Group definition;
    GroupSpecToProto(*spec, &definition);
    absl::StatusOr<int64_t> written = store.PutGroup(definition, 0);
    if (absl::IsAborted(written.status())) {
      result.skipped.push_back(g.name());  // created meanwhile
      continue;
    }
    if (!written.ok()) {
      return absl::Status(
          written.status().code(),
          absl::StrCat("after importing ", result.imported.size(),
                       " groups: ", written.status().message()));
    }
    result.imported.push_back(g.name());
  }
  return result;
}

}  // namespace aside::server
