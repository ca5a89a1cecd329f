#include "server/api/admin_service.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/address.h"
#include "lib/status_macros.h"
#include "proto/convert.h"
#include "server/base/log.h"
#include "server/base/status_util.h"
#include "server/net/guarded_relay.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {
namespace {

grpc::Status Invalid(std::string message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, std::move(message)};
}

// The metric and log label of a status: its canonical code name in lower
// case ("ok", "not_found", "permission_denied").
std::string CodeName(grpc::StatusCode code) {
  return absl::AsciiStrToLower(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(code)));
}

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

}  // namespace

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

template <typename Request, typename Response>
grpc::ServerUnaryReactor* AdminService::Handle(
    grpc::CallbackServerContext* context, const char* method, AdminRole role,
    const Request* request, Response* response,
    grpc::Status (AdminService::*op)(const Request&, Response*)) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status status = auth_ != nullptr
                            ? auth_->Authorize(*context, role)
                            : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                           "admin: no credentials configured");
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

grpc::Status AdminService::DoListMembers(const v1::ListMembersRequest&,
                                         v1::ListMembersResponse* response) {
  if (members_) {
    members_(response);
  }
  return grpc::Status::OK;
}

void AdminService::Describe(const Group& group, bool with_backends,
                            v1::Group* out) const {
  // The published spec, shared rather than copied: a summary (ListGroups)
  // needs none of its backends.
  const std::shared_ptr<const GroupSpec> snapshot = group.spec_snapshot();
  const GroupSpec& spec = *snapshot;
  GroupSpecToProto(spec, out, with_backends);
  if (store_ != nullptr && spec.source == GroupSource::kStore) {
    out->set_store_revision(store_->revision(spec.name));
  }
  out->set_dns_error(group.dns_error());
  TableConstPtr table = group.table();
  if (with_backends) {
    GroupStateToProto(*table, out);
    if (loads_ != nullptr) {
      for (v1::TableBackend& tb : *out->mutable_state()) {
        const LoadSnapshot l =
            loads_->Snapshot(spec.name, tb.backend().address());
        if (l.reporters == 0 && l.window_requests == 0 &&
            !l.utilization.has_value()) {
          continue;
        }
        v1::LoadView* view = tb.mutable_load();
        view->set_requests_per_second(l.requests_per_second);
        view->set_failure_ratio(l.failure_ratio);
        ToProto(l.mean_latency, view->mutable_mean_latency());
        ToProto(l.mean_first_byte_latency,
                view->mutable_mean_first_byte_latency());
        view->set_in_flight(l.in_flight);
        if (l.utilization.has_value()) {
          view->set_utilization(*l.utilization);
        }
        view->set_reporters(l.reporters);
        view->set_consecutive_failures(l.consecutive_failures);
      }
    }
    if (orca_ != nullptr && spec.orca.enabled) {
      OrcaViewsToProto(*orca_, out);
    }
    if (loads_ != nullptr) {
      const ClientStatsTotals stats = loads_->ClientStats(spec.name);
      const uint32_t streams = grpclb_streams_ ? grpclb_streams_(spec.name) : 0;
      if (stats.last_report != absl::InfinitePast() || streams > 0) {
        v1::ClientStatsView* view = out->mutable_client_stats();
        view->set_streams(streams);
        view->set_calls_started(stats.calls_started);
        view->set_calls_finished(stats.calls_finished);
        view->set_calls_finished_with_client_failed_to_send(
            stats.failed_to_send);
        view->set_calls_finished_known_received(stats.known_received);
        for (const auto& [token, n] : stats.dropped) {
          (*view->mutable_calls_dropped())[token] = n;
        }
        if (stats.last_report != absl::InfinitePast()) {
          view->mutable_last_report()->set_seconds(
              absl::ToUnixSeconds(stats.last_report));
        }
      }
    }
  } else {
    out->set_generation(table->generation());
    out->set_ready_count(table->ready_count());
    out->set_panic(table->panic());
  }
}

AdminService::MutationScope::MutationScope(AdminService* admin,
                                           std::string name,
                                           bool claims_aliases)
    : admin_(admin), name_(std::move(name)), claims_aliases_(claims_aliases) {
  aside::MutexLock lock(&admin_->mutation_mu_);
  if (claims_aliases_) {
    ++admin_->claims_waiting_;
    admin_->mutation_mu_.Await([this] {
      admin_->mutation_mu_.AssertHeld();
      return !admin_->claiming_ && admin_->sharing_ == 0 &&
             !admin_->mutating_.contains(name_);
    });
    --admin_->claims_waiting_;
    admin_->claiming_ = true;
  } else {
    admin_->mutation_mu_.Await([this] {
      admin_->mutation_mu_.AssertHeld();
      return !admin_->claiming_ && admin_->claims_waiting_ == 0 &&
             !admin_->mutating_.contains(name_);
    });
    ++admin_->sharing_;
  }
  admin_->mutating_.insert(name_);
}

AdminService::MutationScope::~MutationScope() {
  aside::MutexLock lock(&admin_->mutation_mu_);
  admin_->mutating_.erase(name_);
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

namespace {

absl::Status GroupNotFound(const std::string& name) {
  return absl::NotFoundError(
      absl::StrCat("group '", EchoName(name), "' not found"));
}

}  // namespace

grpc::Status AdminService::Mutate(
    const std::string& name, int64_t expected_revision,
    StoreSync::OnConflict on_conflict, const StoreSync::Edit& edit,
    v1::Group* response, uint64_t* deleted_generation, int64_t* revision) {
  auto answer = [](const absl::Status& s) {
    return ToGrpcStatus(ErrorFieldPath(s) ? PrefixFieldPath("group", s) : s);
  };
  if (store_ == nullptr) {
    // Nothing persisted: the registry is the only copy.
    if (expected_revision != 0) {
      return Invalid("expected_revision: nothing is stored (leave it 0)");
    }
    const GroupPtr group = groups_->Find(name);
    std::optional<GroupSpec> current;
    if (group != nullptr) {
      current = group->spec();
    }
    absl::StatusOr<std::optional<GroupSpec>> next =
        edit(current.has_value() ? &*current : nullptr);
    if (!next.ok()) {
      return answer(next.status());
    }
    absl::Status s;
    if (!next->has_value()) {
      s = groups_->Remove(name, [&](uint64_t g) {
        *deleted_generation = g;
        return absl::OkStatus();
      });
    } else if (group != nullptr) {
      s = groups_->Update(group, **std::move(next));
    } else {
      s = groups_->Add(**std::move(next));
    }
    if (!s.ok()) {
      return answer(s);
    }
    if (response != nullptr) {
      Describe(*groups_->Find(name), true, response);
    }
    return grpc::Status::OK;
  }
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
    response->set_store_revision(written->revision);
  }
  return grpc::Status::OK;
}

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
  MutationScope scope(this, name, !spec->aliases.empty());
  if (groups_->Find(name) != nullptr && store_ == nullptr) {
    return {grpc::StatusCode::ALREADY_EXISTS,
            absl::StrCat("group '", name, "' already exists")};
  }
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

namespace {

// The current definition with the request's fields (its update mask)
// replaced, converted and validated.
absl::StatusOr<GroupSpec> MergeUpdate(const GroupSpec& current,
                                      const v1::UpdateGroupRequest& request) {
  v1::Group merged;
  GroupSpecToProto(current, &merged);
  const v1::Group& in = request.group();
  std::vector<std::string> paths(request.update_mask().paths().begin(),
                                 request.update_mask().paths().end());
  if (paths.empty()) {
    paths = {"policy",       "backends",
             "health_check", "panic_threshold",
             "slow_start",   "outlier_detection",
             "dns",          "aliases",
             "grpclb",       "orca"};
  }
  for (const std::string& path : paths) {
    if (path == "policy") {
      merged.clear_policy();
      if (in.has_policy()) *merged.mutable_policy() = in.policy();
    } else if (path == "backends") {
      *merged.mutable_backends() = in.backends();
    } else if (path == "health_check") {
      merged.clear_health_check();
      if (in.has_health_check())
        *merged.mutable_health_check() = in.health_check();
    } else if (path == "panic_threshold") {
      merged.clear_panic_threshold();
      if (in.has_panic_threshold())
        merged.set_panic_threshold(in.panic_threshold());
    } else if (path == "slow_start") {
      merged.clear_slow_start();
      if (in.has_slow_start()) *merged.mutable_slow_start() = in.slow_start();
    } else if (path == "outlier_detection") {
      merged.clear_outlier_detection();
      if (in.has_outlier_detection()) {
        *merged.mutable_outlier_detection() = in.outlier_detection();
      }
    } else if (path == "dns") {
      merged.clear_dns();
      if (in.has_dns()) *merged.mutable_dns() = in.dns();
    } else if (path == "aliases") {
      *merged.mutable_aliases() = in.aliases();
    } else if (path == "grpclb") {
      merged.clear_grpclb();
      if (in.has_grpclb()) *merged.mutable_grpclb() = in.grpclb();
    } else if (path == "orca") {
      merged.clear_orca();
      if (in.has_orca()) *merged.mutable_orca() = in.orca();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "update_mask: unknown path '", path,
          "' (allowed: policy, backends, health_check, panic_threshold, "
          "slow_start, outlier_detection, dns, aliases, grpclb, orca)"));
    }
  }
  return GroupSpecFromProto("group", merged);
}

}  // namespace

grpc::Status AdminService::DoUpdateGroup(const v1::UpdateGroupRequest& request,
                                         v1::Group* response) {
  if (!request.has_group()) {
    return Invalid("group: required");
  }
  const std::string& name = request.group().name();
  const auto& paths = request.update_mask().paths();
  MutationScope scope(
      this, name,
      request.group().aliases_size() > 0 &&
          (paths.empty() ||
           std::find(paths.begin(), paths.end(), "aliases") != paths.end()));
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
  MutationScope scope(this, request.name(), false);
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

grpc::Status AdminService::DoGetGroup(const v1::GetGroupRequest& request,
                                      v1::Group* response) {
  if (request.name().empty()) {
    return Invalid("name: required");
  }
  GroupPtr group = groups_->Find(request.name());
  if (group == nullptr) {
    return {grpc::StatusCode::NOT_FOUND,
            absl::StrCat("group '", EchoName(request.name()), "' not found")};
  }
  Describe(*group, true, response);
  return grpc::Status::OK;
}

grpc::Status AdminService::DoListGroups(const v1::ListGroupsRequest&,
                                        v1::ListGroupsResponse* response) {
  for (const GroupPtr& group : groups_->List()) {
    Describe(*group, false, response->add_groups());
  }
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
  MutationScope scope(this, request.group(), false);
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
  MutationScope scope(this, group_name, false);
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

grpc::Status AdminService::DoListTargets(const v1::ListTargetsRequest& request,
                                         v1::ListTargetsResponse* response) {
  if (!request.group().empty() && groups_->Find(request.group()) == nullptr) {
    return {grpc::StatusCode::NOT_FOUND,
            absl::StrCat("group '", EchoName(request.group()), "' not found")};
  }
  if (store_ != nullptr) {
    const StoreState state = store_->store().state();
    v1::StoreState* out = response->mutable_store();
    out->set_type(state.type);
    out->set_location(state.location);
    out->set_up(state.up);
    out->set_revision(state.revision);
    out->set_last_error(state.last_error);
    if (state.last_error_at != absl::InfinitePast()) {
      out->set_last_error_unix_seconds(
          absl::ToUnixSeconds(state.last_error_at));
    }
  }
  if (health_ == nullptr) {
    return grpc::Status::OK;
  }
  for (const TargetInfo& info : health_->List(request.group())) {
    v1::Target* t = response->add_targets();
    t->set_address(info.address);
    HealthCheckToProto(info.spec, t->mutable_health_check());
    t->set_state(ToProto(info.state));
    t->set_consecutive_successes(info.consecutive_successes);
    t->set_consecutive_failures(info.consecutive_failures);
    if (info.last_result) {
      v1::ProbeResult* r = t->mutable_last_result();
      r->set_success(info.last_result->success);
      r->set_reason(info.last_result->reason);
      ToProto(info.last_result->latency, r->mutable_latency());
      r->mutable_finished_at()->set_seconds(
          absl::ToUnixSeconds(info.last_result->finished_at));
      r->mutable_finished_at()->set_nanos(static_cast<int32_t>(
          absl::ToUnixNanos(info.last_result->finished_at) % 1000000000));
    }
    for (const std::string& g : info.groups) {
      t->add_groups(g);
    }
    t->set_probes(info.probes);
    t->set_probed_here(info.probed_here);
    if (info.last_transition != absl::InfinitePast()) {
      t->mutable_last_transition()->set_seconds(
          absl::ToUnixSeconds(info.last_transition));
    }
    for (const std::string& g : info.groups) {
      GroupPtr group = groups_->Find(g);
      if (group == nullptr) {
        continue;
      }
      for (const OutlierDetector::Ejection& e : group->Ejections()) {
        if (e.address == info.address) {
          v1::Ejection* out = t->add_ejections();
          out->set_group(g);
          out->mutable_until()->set_seconds(absl::ToUnixSeconds(e.until));
          out->set_count(e.count);
        }
      }
    }
  }
  return grpc::Status::OK;
}

}  // namespace aside::server
