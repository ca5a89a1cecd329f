// The Admin service's reads (admin_service.h): GetGroup, ListGroups,
// ListTargets, ListMembers, and how a group is described in answers.
#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"
#include "proto/convert.h"
#include "server/api/admin_common.h"
#include "server/api/admin_service.h"
#include "server/base/status_util.h"
#include "server/schema/group_spec_proto.h"

namespace aside::server {

using admin_common::Invalid;

grpc::Status AdminService::DoListMembers(const v1::ListMembersRequest&,
                                         v1::ListMembersResponse* response) {
  if (members_) {
    members_(response);
  }
  return grpc::Status::OK;
}

void AdminService::Describe(const Group& group, bool with_backends,
                            v1::Group* out) const {
  // The spec and the table of one publication, so that they agree; shared
  // rather than copied: a summary (ListGroups) needs none of its backends.
  const std::shared_ptr<const Group::Publication> published = group.published();
  const GroupSpec& spec = *published->spec;
  GroupSpecToProto(spec, out, with_backends);
  if (spec.source == GroupSource::kStore) {
    out->set_store_revision(store_->revision(spec.name));
  }
  out->set_dns_error(group.dns_error());
  const TableConstPtr& table = published->table;
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

grpc::Status AdminService::DoListTargets(const v1::ListTargetsRequest& request,
                                         v1::ListTargetsResponse* response) {
  if (!request.group().empty() && groups_->Find(request.group()) == nullptr) {
    return {grpc::StatusCode::NOT_FOUND,
            absl::StrCat("group '", EchoName(request.group()), "' not found")};
  }
  const StoreState state = store_->store().state();
  v1::StoreState* out = response->mutable_store();
  out->set_type(state.type);
  out->set_location(state.location);
  out->set_up(state.up);
  out->set_revision(state.revision);
  out->set_last_error(state.last_error);
  if (state.last_error_at != absl::InfinitePast()) {
    out->set_last_error_unix_seconds(absl::ToUnixSeconds(state.last_error_at));
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
