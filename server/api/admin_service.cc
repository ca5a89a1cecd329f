#include "server/api/admin_service.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/field_mask_util.h"
#include "lib/address.h"
#include "lib/status_macros.h"
#include "proto/convert.h"
#include "server/api/admin_common.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"
#include "server/base/status_util.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {

using admin_common::CodeName;
using admin_common::GroupNotFound;
using admin_common::GroupSettingPaths;
using admin_common::Invalid;

AdminService::AdminService(GroupRegistry* groups, StoreSync* store,
                           const AdminAuth* auth, Metrics* metrics,
                           const LoadAggregator* loads,
                           const HealthRegistry* health,
                           MutationQueue::Options queue)
    : groups_(groups),
      store_(store),
      auth_(auth),
      metrics_(metrics),
      loads_(loads),
      health_(health),
      mutations_([&queue] {
        queue.max_workers = kMutationWorkers;
        queue.thread_name = "aside-admin";
        return queue;
      }()) {}

AdminService::~AdminService() = default;

grpc::Status AdminService::AdmitMutations(grpc::CallbackServerContext* context,
                                          size_t jobs) {
  MutationQueue::Admission a = mutations_.Admit(jobs);
  if (a.admitted) {
    return grpc::Status::OK;
  }
  const std::string ms = absl::StrCat(absl::ToInt64Milliseconds(a.retry_after));
  // One log line per interval for all the refusals in it, not one per
  // refusal: under overload the log must not become the next bottleneck.
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t last = refusal_logged_at_.load(std::memory_order_relaxed);
  if (now - last >= absl::ToInt64Nanoseconds(kRefusalLogInterval) &&
      refusal_logged_at_.compare_exchange_strong(last, now,
                                                 std::memory_order_relaxed)) {
    const uint64_t refused = mutations_.stats().refused;
    Log(LogLevel::kWarn, "admin.writes_refused",
        {{"refused", absl::StrCat(refused - refusals_logged_)},
         {"reason", a.reason},
         {"retry_after_ms", ms}});
    refusals_logged_ = refused;
  }
  context->AddTrailingMetadata(kRetryPushbackKey, ms);
  context->AddTrailingMetadata(kRetryAfterKey, ms);
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("admin: writes are arriving faster than "
                                   "the store commits them: ",
                                   a.reason, "; retry in ", ms, " ms"));
}

template <typename Request>
grpc::Status AdminService::Authorize(const grpc::ServerContextBase& context,
                                     AdminRole role, const Request&) const {
  return auth_ != nullptr ? auth_->Authorize(context, role)
                          : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                         "admin: no credentials configured");
}

grpc::Status AdminService::Authorize(
    const grpc::ServerContextBase& context, AdminRole role,
    const v1::DrainBackendsRequest& request) const {
  if (auth_ == nullptr) {
    return Authorize<v1::DrainBackendsRequest>(context, role, request);
  }
  return auth_->AuthorizeDrain(
      context, {request.addresses().begin(), request.addresses().end()});
}

// As DrainBackends: a self-drain credential may wait for its own
// addresses.
grpc::Status AdminService::Authorize(
    const grpc::ServerContextBase& context, AdminRole role,
    const v1::WaitDrainedRequest& request) const {
  if (auth_ == nullptr) {
    return Authorize<v1::WaitDrainedRequest>(context, role, request);
  }
  return auth_->AuthorizeDrain(
      context, {request.addresses().begin(), request.addresses().end()});
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* AdminService::Handle(
    grpc::CallbackServerContext* context, const char* method, AdminRole role,
    const Request* request, Response* response,
    grpc::Status (AdminService::*op)(const Request&, Response*)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status status = Authorize(*context, role, *request);
  auto finish = [this, context, method, role, reactor](grpc::Status status) {
    if (role == AdminRole::kAdmin && metrics_ != nullptr) {
      metrics_->admin_mutations
          .Add({{"method", method}, {"result", CodeName(status.error_code())}})
          .Increment();
    }
    if (role == AdminRole::kAdmin) {
      Log(status.ok() ? LogLevel::kInfo : LogLevel::kWarn, "admin.mutation",
          {{"method", method},
           {"peer", ClientPeer(context->peer())},
           {"result", CodeName(status.error_code())},
           {"message", status.error_message()}});
    }
    reactor->Finish(status);
  };
  if (status.ok() && role == AdminRole::kAdmin) {
    if (grpc::Status refused = AdmitMutations(context, 1); !refused.ok()) {
      // Counted like any answer, logged with the others refused
      // (AdmitMutations).
      if (metrics_ != nullptr) {
        metrics_->admin_mutations
            .Add({{"method", method},
                  {"result", CodeName(refused.error_code())}})
            .Increment();
      }
      reactor->Finish(refused);
      return reactor;
    }
  }
  if (status.ok() && role == AdminRole::kAdmin) {
    // Off gRPC's callback threads (see the file comment); the call, its
    // request and its response live until the reactor finishes.
    mutations_.Run([this, context, request, response, op, finish] {
      if (context->deadline() < std::chrono::system_clock::now()) {
        finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            "admin: the deadline passed while the write "
                            "waited for a worker; it was not made"));
        return;
      }
      finish((this->*op)(*request, response));
    });
    return reactor;
  }
  if (status.ok()) {
    status = (this->*op)(*request, response);
  }
  finish(status);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::CreateGroup(
    grpc::CallbackServerContext* context, const v1::CreateGroupRequest* request,
    v1::Group* response) {
  return Handle(context, "CreateGroup", AdminRole::kAdmin, request, response,
                &AdminService::DoCreateGroup);
}
grpc::ServerUnaryReactor* AdminService::UpdateGroup(
    grpc::CallbackServerContext* context, const v1::UpdateGroupRequest* request,
    v1::Group* response) {
  return Handle(context, "UpdateGroup", AdminRole::kAdmin, request, response,
                &AdminService::DoUpdateGroup);
}
grpc::ServerUnaryReactor* AdminService::DeleteGroup(
    grpc::CallbackServerContext* context, const v1::DeleteGroupRequest* request,
    v1::DeleteGroupResponse* response) {
  return Handle(context, "DeleteGroup", AdminRole::kAdmin, request, response,
                &AdminService::DoDeleteGroup);
}
grpc::ServerUnaryReactor* AdminService::GetGroup(
    grpc::CallbackServerContext* context, const v1::GetGroupRequest* request,
    v1::Group* response) {
  return Handle(context, "GetGroup", AdminRole::kRead, request, response,
                &AdminService::DoGetGroup);
}
grpc::ServerUnaryReactor* AdminService::ListGroups(
    grpc::CallbackServerContext* context, const v1::ListGroupsRequest* request,
    v1::ListGroupsResponse* response) {
  return Handle(context, "ListGroups", AdminRole::kRead, request, response,
                &AdminService::DoListGroups);
}
grpc::ServerUnaryReactor* AdminService::AddBackends(
    grpc::CallbackServerContext* context, const v1::AddBackendsRequest* request,
    v1::Group* response) {
  return Handle(context, "AddBackends", AdminRole::kAdmin, request, response,
                &AdminService::DoAddBackends);
}
grpc::ServerUnaryReactor* AdminService::RemoveBackends(
    grpc::CallbackServerContext* context,
    const v1::RemoveBackendsRequest* request, v1::Group* response) {
  return Handle(context, "RemoveBackends", AdminRole::kAdmin, request, response,
                &AdminService::DoRemoveBackends);
}
grpc::ServerUnaryReactor* AdminService::DrainBackends(
    grpc::CallbackServerContext* context,
    const v1::DrainBackendsRequest* request, v1::Group* response) {
  return Handle(context, "DrainBackends", AdminRole::kAdmin, request, response,
                &AdminService::DoDrainBackends);
}
grpc::ServerUnaryReactor* AdminService::ListTargets(
    grpc::CallbackServerContext* context, const v1::ListTargetsRequest* request,
    v1::ListTargetsResponse* response) {
  return Handle(context, "ListTargets", AdminRole::kRead, request, response,
                &AdminService::DoListTargets);
}

grpc::ServerUnaryReactor* AdminService::ListMembers(
    grpc::CallbackServerContext* context, const v1::ListMembersRequest* request,
    v1::ListMembersResponse* response) {
  return Handle(context, "ListMembers", AdminRole::kRead, request, response,
                &AdminService::DoListMembers);
}

AdminService::MutationScope::MutationScope(AdminService* admin,
                                           bool claims_aliases)
    : admin_(admin), claims_aliases_(claims_aliases) {
  // StoreSync::Mutate orders (and folds) the writes of one name.
  aside::MutexLock lock(&admin_->mutation_mu_);
  if (claims_aliases_) {
    ++admin_->claims_waiting_;
    admin_->mutation_mu_.Await([this] {
      admin_->mutation_mu_.AssertHeld();
      return !admin_->claiming_ && admin_->sharing_ == 0;
    });
    --admin_->claims_waiting_;
    admin_->claiming_ = true;
  } else {
    admin_->mutation_mu_.Await([this] {
      admin_->mutation_mu_.AssertHeld();
      return !admin_->claiming_ && admin_->claims_waiting_ == 0;
    });
    ++admin_->sharing_;
  }
}

AdminService::MutationScope::~MutationScope() {
  aside::MutexLock lock(&admin_->mutation_mu_);
  if (claims_aliases_) {
    admin_->claiming_ = false;
  } else {
    --admin_->sharing_;
  }
}

grpc::Status AdminService::CheckMutable(const std::string& name) const {
  if (name.empty()) {
    return Invalid("group: a group name is required");
  }
  if (absl::Status s = ValidateGroupName(name); !s.ok()) {
    return Invalid(absl::StrCat("group: ", s.message()));
  }
  if (GroupPtr group = groups_->Find(name);
      group != nullptr && group->spec().source == GroupSource::kFile) {
    return {grpc::StatusCode::FAILED_PRECONDITION,
            absl::StrCat("group '", name, "' is declared in the config file ",
                         group->spec().file, "; change it there")};
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Mutate(
    const std::string& name, int64_t expected_revision,
    StoreSync::OnConflict on_conflict, const StoreSync::Edit& edit,
    v1::Group* response, uint64_t* deleted_generation, int64_t* revision) {
  auto answer = [](const absl::Status& s) {
    return ToGrpcStatus(ErrorFieldPath(s) ? PrefixFieldPath("group", s) : s);
  };
  absl::StatusOr<StoreSync::Written> written =
      store_->Mutate(name, expected_revision, on_conflict, edit);
  if (!written.ok()) {
    return answer(written.status());
  }
  if (deleted_generation != nullptr) {
    *deleted_generation = written->generation;
  }
  if (revision != nullptr) {
    *revision = written->revision;
  }
  if (response != nullptr && written->group != nullptr) {
    Describe(*written->group, true, response);
    // Describe gives the revision applied now: a later write may have been
    // applied since this one committed. The reply's settings are this
    // write's own (the caller's change, never one undone by another
    // writer); the state is the group's now, at the revision it names.
    const int64_t applied = response->store_revision();
    if (written->spec != nullptr && applied != written->revision) {
      v1::Group own;
      GroupSpecToProto(*written->spec, &own);
      google::protobuf::FieldMask settings;
      for (const std::string& path : GroupSettingPaths()) {
        settings.add_paths(path);
      }
      google::protobuf::util::FieldMaskUtil::MergeOptions options;
      options.set_replace_message_fields(true);
      options.set_replace_repeated_fields(true);
      google::protobuf::util::FieldMaskUtil::MergeMessageTo(own, settings,
                                                            options, response);
      response->set_state_revision(applied);
    }
    response->set_store_revision(written->revision);
  }
  return grpc::Status::OK;
}

}  // namespace aside::server
