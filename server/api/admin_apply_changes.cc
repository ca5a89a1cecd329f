// AdminService::ApplyGroupChanges (admin_service.h): many changes in one
// call, each run as its own call would run it and answered on its own.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/api/admin_common.h"
#include "server/api/admin_service.h"
#include "server/base/client_peer.h"
#include "server/base/log.h"

namespace aside::server {
namespace {

using admin_common::CodeName;
using admin_common::Invalid;

// The group a change names ("" when no change is set).
const std::string& ChangedGroup(const v1::GroupChange& change) {
  switch (change.change_case()) {
    case v1::GroupChange::kCreateGroup:
      return change.create_group().group().name();
    case v1::GroupChange::kUpdateGroup:
      return change.update_group().group().name();
    case v1::GroupChange::kDeleteGroup:
      return change.delete_group().name();
    case v1::GroupChange::kAddBackends:
      return change.add_backends().group();
    case v1::GroupChange::kRemoveBackends:
      return change.remove_backends().group();
    case v1::GroupChange::kDrainBackends:
      return change.drain_backends().group();
    case v1::GroupChange::CHANGE_NOT_SET:
      break;
  }
  static const std::string* const kNone = new std::string();
  return *kNone;
}

// The method a change stands for, as the mutation metric labels it.
const char* ChangeMethod(const v1::GroupChange& change) {
  switch (change.change_case()) {
    case v1::GroupChange::kCreateGroup:
      return "CreateGroup";
    case v1::GroupChange::kUpdateGroup:
      return "UpdateGroup";
    case v1::GroupChange::kDeleteGroup:
      return "DeleteGroup";
    case v1::GroupChange::kAddBackends:
      return "AddBackends";
    case v1::GroupChange::kRemoveBackends:
      return "RemoveBackends";
    case v1::GroupChange::kDrainBackends:
      return "DrainBackends";
    case v1::GroupChange::CHANGE_NOT_SET:
      break;
  }
  return "ApplyGroupChanges";
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::ApplyGroupChanges(
    grpc::CallbackServerContext* context,
    const v1::ApplyGroupChangesRequest* request,
    v1::ApplyGroupChangesResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status status = auth_ != nullptr
                            ? auth_->Authorize(*context, AdminRole::kAdmin)
                            : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                           "admin: no credentials configured");
  const int n = request->changes_size();
  if (status.ok() && (n == 0 || n > kMaxChangesPerRequest)) {
    status = Invalid(absl::StrCat("changes: ", n, " entries (1 to ",
                                  kMaxChangesPerRequest, ")"));
  }
  if (status.ok()) {
    // One job per changed group (below): admitted or refused together.
    absl::flat_hash_set<std::string> groups;
    for (const v1::GroupChange& change : request->changes()) {
      groups.insert(ChangedGroup(change));
    }
    if (grpc::Status refused = AdmitMutations(context, groups.size());
        !refused.ok()) {
      // Logged with the others refused (AdmitMutations).
      if (metrics_ != nullptr) {
        metrics_->admin_mutations
            .Add({{"method", "ApplyGroupChanges"},
                  {"result", CodeName(refused.error_code())}})
            .Increment();
      }
      reactor->Finish(refused);
      return reactor;
    }
  }
  const std::string peer = ClientPeer(context->peer());
  if (!status.ok()) {
    if (metrics_ != nullptr) {
      metrics_->admin_mutations
          .Add({{"method", "ApplyGroupChanges"},
                {"result", CodeName(status.error_code())}})
          .Increment();
    }
    Log(LogLevel::kWarn, "admin.mutation",
        {{"method", "ApplyGroupChanges"},
         {"peer", peer},
         {"result", CodeName(status.error_code())},
         {"message", status.error_message()}});
    reactor->Finish(status);
    return reactor;
  }
  // Every result exists before a worker writes one: workers fill distinct
  // elements and never resize the list.
  for (int i = 0; i < n; ++i) {
    response->add_results();
  }
  // The changes of each group, in the request's order.
  std::vector<std::vector<int>> chains;
  absl::flat_hash_map<std::string, size_t> chain_of;
  for (int i = 0; i < n; ++i) {
    const v1::GroupChange& change = request->changes(i);
    if (change.change_case() == v1::GroupChange::CHANGE_NOT_SET) {
      v1::GroupChangeResult* r = response->mutable_results(i);
      r->set_code(grpc::StatusCode::INVALID_ARGUMENT);
      r->set_message(
          "change: one of create_group, update_group, delete_group, "
          "add_backends, remove_backends, drain_backends is required");
      continue;
    }
    auto [it, added] =
        chain_of.try_emplace(ChangedGroup(change), chains.size());
    if (added) {
      chains.emplace_back();
    }
    chains[it->second].push_back(i);
  }
  auto finish = [reactor, response, peer, n] {
    int failed = 0;
    std::string first_failure;
    for (const v1::GroupChangeResult& r : response->results()) {
      if (r.code() != 0 && failed++ == 0) {
        first_failure = r.message();
      }
    }
    Log(failed == 0 ? LogLevel::kInfo : LogLevel::kWarn, "admin.mutation",
        {{"method", "ApplyGroupChanges"},
         {"peer", peer},
         {"result", "ok"},
         {"changes", absl::StrCat(n)},
         {"failed", absl::StrCat(failed)},
         {"message", first_failure}});
    reactor->Finish(grpc::Status::OK);
  };
  if (chains.empty()) {
    finish();
    return reactor;
  }
  auto left = std::make_shared<std::atomic<size_t>>(chains.size());
  for (std::vector<int>& chain : chains) {
    mutations_.Run(
        [this, request, response, chain = std::move(chain), left, finish] {
          for (int i : chain) {
            DoGroupChange(request->changes(i), response->mutable_results(i));
          }
          if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) {
            finish();
          }
        });
  }
  return reactor;
}

void AdminService::DoGroupChange(const v1::GroupChange& change,
                                 v1::GroupChangeResult* result) {
  result->set_group(ChangedGroup(change));
  grpc::Status status;
  v1::Group group;
  switch (change.change_case()) {
    case v1::GroupChange::kCreateGroup:
      status = DoCreateGroup(change.create_group(), &group);
      break;
    case v1::GroupChange::kUpdateGroup:
      status = DoUpdateGroup(change.update_group(), &group);
      break;
    case v1::GroupChange::kDeleteGroup: {
      v1::DeleteGroupResponse deleted;
      status = DoDeleteGroup(change.delete_group(), &deleted);
      group.set_generation(deleted.generation());
      group.set_store_revision(deleted.store_revision());
      break;
    }
    case v1::GroupChange::kAddBackends:
      status = DoAddBackends(change.add_backends(), &group);
      break;
    case v1::GroupChange::kRemoveBackends:
      status = DoRemoveBackends(change.remove_backends(), &group);
      break;
    case v1::GroupChange::kDrainBackends:
      status = DoDrainBackends(change.drain_backends(), &group);
      break;
    case v1::GroupChange::CHANGE_NOT_SET:
      status = Invalid("change: no change is set");
      break;
  }
  if (metrics_ != nullptr) {
    metrics_->admin_mutations
        .Add({{"method", ChangeMethod(change)},
              {"result", CodeName(status.error_code())}})
        .Increment();
  }
  result->set_code(status.error_code());
  result->set_message(status.error_message());
  if (status.ok()) {
    result->set_generation(group.generation());
    result->set_store_revision(group.store_revision());
  }
}

}  // namespace aside::server
