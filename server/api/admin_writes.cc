// The Admin service's writes (admin_service.h): CreateGroup, UpdateGroup,
// DeleteGroup, AddBackends, RemoveBackends, DrainBackends. Each checks its
// request, then makes its change through Mutate (admin_service.cc).
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/field_mask_util.h"
#include "lib/address.h"
#include "lib/status_macros.h"
#include "proto/convert.h"
#include "server/api/admin_common.h"
#include "server/api/admin_service.h"
#include "server/base/status_util.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {
namespace {

using admin_common::GroupNotFound;
using admin_common::GroupSettingPaths;
using admin_common::Invalid;

// Checks a list of addresses from a request and canonicalises them.
grpc::Status CanonicalAddresses(
    const google::protobuf::RepeatedPtrField<std::string>& in,
    std::vector<std::string>* out) {
  if (in.empty()) {
    return Invalid("addresses: at least one address is required");
  }
  if (in.size() > kMaxBackendsPerRequest) {
    return Invalid(absl::StrCat("addresses: ", in.size(), " entries (at most ",
                                kMaxBackendsPerRequest, ")"));
  }
  std::set<std::string> seen;
  for (int i = 0; i < in.size(); ++i) {
    absl::StatusOr<std::string> canonical = CanonicalAddress(in.Get(i));
    if (!canonical.ok()) {
      return Invalid(
          absl::StrCat("addresses[", i, "]: ", canonical.status().message()));
    }
    if (!seen.insert(*canonical).second) {
      return Invalid(
          absl::StrCat("addresses[", i, "]: ", *canonical, " is listed twice"));
    }
    out->push_back(*std::move(canonical));
  }
  return grpc::Status::OK;
}

// Whether top-level field `field` of Group is a setting an update may
// change: not the name, which selects the group, nor what the server
// reports (numbered 20 and up).
bool Settable(const google::protobuf::FieldDescriptor* field) {
  return field != nullptr && field->number() > v1::Group::kNameFieldNumber &&
         field->number() < v1::Group::kSourceFieldNumber;
}

}  // namespace

const std::vector<std::string>& admin_common::GroupSettingPaths() {
  static const auto* const paths = [] {
    auto* out = new std::vector<std::string>;
    const google::protobuf::Descriptor* group = v1::Group::descriptor();
    for (int i = 0; i < group->field_count(); ++i) {
      if (Settable(group->field(i))) {
        out->push_back(group->field(i)->name());
      }
    }
    return out;
  }();
  return *paths;
}

namespace {

// The current definition with the request's fields (its update mask)
// replaced, converted and validated. A path names a setting ("policy") or
// a field inside one ("health_check.interval"); a message or list it
// names is replaced whole, and one left unset in the request is cleared.
absl::StatusOr<GroupSpec> MergeUpdate(const GroupSpec& current,
                                      const v1::UpdateGroupRequest& request) {
  namespace util = google::protobuf::util;
  v1::Group merged;
  GroupSpecToProto(current, &merged);
  google::protobuf::FieldMask mask = request.update_mask();
  if (mask.paths().empty()) {
    for (const std::string& path : GroupSettingPaths()) {
      mask.add_paths(path);
    }
  }
  for (const std::string& path : mask.paths()) {
    const std::string top = path.substr(0, path.find('.'));
    if (!Settable(v1::Group::descriptor()->FindFieldByName(top)) ||
        !util::FieldMaskUtil::GetFieldDescriptors(v1::Group::descriptor(), path,
                                                  nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("update_mask: unknown path '", path,
                       "' (allowed: ", absl::StrJoin(GroupSettingPaths(), ", "),
                       ", or a field inside one)"));
    }
  }
  util::FieldMaskUtil::MergeOptions options;
  options.set_replace_message_fields(true);
  options.set_replace_repeated_fields(true);
  util::FieldMaskUtil::MergeMessageTo(request.group(), mask, options, &merged);
  return GroupSpecFromProto("group", merged);
}

}  // namespace

grpc::Status AdminService::DoCreateGroup(const v1::CreateGroupRequest& request,
                                         v1::Group* response) {
  if (!request.has_group()) {
    return Invalid("group: required");
  }
  absl::StatusOr<GroupSpec> spec = GroupSpecFromProto("group", request.group());
  if (!spec.ok()) {
    return ToGrpcStatus(spec.status());
  }
  const std::string name = spec->name;
  MutationScope scope(this, !spec->aliases.empty());
  if (GroupPtr g = groups_->Find(name);
      g != nullptr && g->spec().source == GroupSource::kFile) {
    return {grpc::StatusCode::ALREADY_EXISTS,
            absl::StrCat("group '", name, "' already exists (declared in ",
                         g->spec().file, ")")};
  }
  return Mutate(
      name, 0, StoreSync::OnConflict::kAbortOnConflict,
      [&](const GroupSpec* current)
          -> absl::StatusOr<std::optional<GroupSpec>> {
        if (current != nullptr) {
          return absl::AlreadyExistsError(
              absl::StrCat("group '", name, "' already exists"));
        }
        return std::optional<GroupSpec>(*spec);
      },
      response);
}

grpc::Status AdminService::DoUpdateGroup(const v1::UpdateGroupRequest& request,
                                         v1::Group* response) {
  if (!request.has_group()) {
    return Invalid("group: required");
  }
  const std::string& name = request.group().name();
  const auto& paths = request.update_mask().paths();
  MutationScope scope(
      this, request.group().aliases_size() > 0 &&
                (paths.empty() || std::find(paths.begin(), paths.end(),
                                            "aliases") != paths.end()));
  if (grpc::Status s = CheckMutable(name); !s.ok()) {
    return s;
  }
  // Replacing fields is not commutative with a concurrent change to them:
  // a lost race is ABORTED rather than retried.
  return Mutate(
      name, request.expected_revision(),
      StoreSync::OnConflict::kAbortOnConflict,
      [&](const GroupSpec* current)
          -> absl::StatusOr<std::optional<GroupSpec>> {
        if (current == nullptr) {
          return GroupNotFound(name);
        }
        ASIDE_ASSIGN_OR_RETURN(GroupSpec next, MergeUpdate(*current, request));
        return std::optional<GroupSpec>(std::move(next));
      },
      response);
}

grpc::Status AdminService::DoDeleteGroup(const v1::DeleteGroupRequest& request,
                                         v1::DeleteGroupResponse* response) {
  MutationScope scope(this, false);
  if (grpc::Status s = CheckMutable(request.name()); !s.ok()) {
    return s;
  }
  uint64_t generation = 0;
  int64_t revision = 0;
  grpc::Status status = Mutate(
      request.name(), request.expected_revision(),
      StoreSync::OnConflict::kRetryOnConflict,
      [&](const GroupSpec* current)
          -> absl::StatusOr<std::optional<GroupSpec>> {
        if (current == nullptr) {
          return GroupNotFound(request.name());
        }
        return std::optional<GroupSpec>();
      },
      nullptr, &generation, &revision);
  if (!status.ok()) {
    return status;
  }
  response->set_generation(generation);
  response->set_store_revision(revision);
  return grpc::Status::OK;
}

grpc::Status AdminService::DoAddBackends(const v1::AddBackendsRequest& request,
                                         v1::Group* response) {
  if (request.backends().empty()) {
    return Invalid("backends: at least one backend is required");
  }
  if (request.backends_size() > kMaxBackendsPerRequest) {
    return Invalid(absl::StrCat("backends: ", request.backends_size(),
                                " entries (at most ", kMaxBackendsPerRequest,
                                ")"));
  }
  std::vector<Backend> added;
  for (int i = 0; i < request.backends_size(); ++i) {
    absl::StatusOr<Backend> b =
        FromProto(absl::StrCat("backends[", i, "]"), request.backends(i),
                  /*allow_hostname=*/false);
    if (!b.ok()) {
      return ToGrpcStatus(b.status());
    }
    added.push_back(*std::move(b));
  }
  MutationScope scope(this, false);
  if (grpc::Status s = CheckMutable(request.group()); !s.ok()) {
    return s;
  }
  // Adding distinct backends commutes with other changes: a lost race is
  // retried on the stored value.
  return Mutate(
      request.group(), request.expected_revision(),
      StoreSync::OnConflict::kRetryOnConflict,
      [&](const GroupSpec* current)
          -> absl::StatusOr<std::optional<GroupSpec>> {
        if (current == nullptr) {
          return GroupNotFound(request.group());
        }
        GroupSpec spec = *current;
        // Views into spec.backends, which grows only after the check.
        absl::flat_hash_set<absl::string_view> present;
        present.reserve(spec.backends.size() + added.size());
        for (const Backend& b : spec.backends) {
          present.insert(b.address);
        }
        for (size_t i = 0; i < added.size(); ++i) {
          if (!present.insert(added[i].address).second) {
            return absl::AlreadyExistsError(
                absl::StrCat("backends[", i, "]: ", added[i].address,
                             " is already in group '", spec.name, "'"));
          }
        }
        if (spec.backends.size() + added.size() > kMaxBackendsPerGroup) {
          return absl::ResourceExhaustedError(
              absl::StrCat("group '", spec.name, "' would have ",
                           spec.backends.size() + added.size(),
                           " backends (at most ", kMaxBackendsPerGroup, ")"));
        }
        spec.backends.insert(spec.backends.end(), added.begin(), added.end());
        ASIDE_RETURN_IF_ERROR(ValidateGroupSpec(spec));
        return std::optional<GroupSpec>(std::move(spec));
      },
      response);
}

grpc::Status AdminService::EditBackends(
    const std::string& group_name,
    const google::protobuf::RepeatedPtrField<std::string>& addresses,
    int64_t expected_revision,
    const std::function<void(GroupSpec&, std::vector<Backend>::iterator)>& edit,
    v1::Group* response) {
  std::vector<std::string> canonical;
  if (grpc::Status s = CanonicalAddresses(addresses, &canonical); !s.ok()) {
    return s;
  }
  MutationScope scope(this, false);
  if (grpc::Status s = CheckMutable(group_name); !s.ok()) {
    return s;
  }
  // Removing, draining and undraining named backends commute with other
  // changes: a lost race is retried on the stored value.
  return Mutate(
      group_name, expected_revision, StoreSync::OnConflict::kRetryOnConflict,
      [&](const GroupSpec* current)
          -> absl::StatusOr<std::optional<GroupSpec>> {
        if (current == nullptr) {
          return GroupNotFound(group_name);
        }
        GroupSpec spec = *current;
        for (const std::string& address : canonical) {
          auto it = std::find_if(
              spec.backends.begin(), spec.backends.end(),
              [&](const Backend& b) { return b.address == address; });
          if (it == spec.backends.end()) {
            return absl::NotFoundError(absl::StrCat(
                "backend ", address, " is not in group '", spec.name, "'"));
          }
          edit(spec, it);
        }
        ASIDE_RETURN_IF_ERROR(ValidateGroupSpec(spec));
        return std::optional<GroupSpec>(std::move(spec));
      },
      response);
}

grpc::Status AdminService::DoRemoveBackends(
    const v1::RemoveBackendsRequest& request, v1::Group* response) {
  return EditBackends(
      request.group(), request.addresses(), request.expected_revision(),
      [](GroupSpec& spec, std::vector<Backend>::iterator it) {
        spec.backends.erase(it);
      },
      response);
}

grpc::Status AdminService::DoDrainBackends(
    const v1::DrainBackendsRequest& request, v1::Group* response) {
  const bool drained = request.drained();
  return EditBackends(
      request.group(), request.addresses(), request.expected_revision(),
      [drained](GroupSpec&, std::vector<Backend>::iterator it) {
        it->drained = drained;
      },
      response);
}

}  // namespace aside::server
