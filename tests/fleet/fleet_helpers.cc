#include "tests/fleet/fleet_helpers.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/testing/http_client.h"
#include "tests/testing/status_matchers.h"

namespace aside::testing {

v1::Group MakeGroup(const std::string& name, std::vector<int> ports) {
  v1::Group g;
  g.set_name(name);
  g.mutable_health_check()->set_kind(v1::HealthCheck::NONE);
  for (int port : ports) {
    g.add_backends()->set_address(absl::StrCat("127.0.0.1:", port));
  }
  return g;
}

grpc::Status Replica::Create(const v1::Group& g, v1::Group* out) {
  v1::CreateGroupRequest req;
  *req.mutable_group() = g;
  v1::Group ignored;
  return admin->CreateGroup(Context(kFleetAdminToken).get(), req,
                            out != nullptr ? out : &ignored);
}

grpc::Status Replica::SetBackends(const std::string& name,
                                  std::vector<int> ports, v1::Group* out) {
  v1::UpdateGroupRequest req;
  *req.mutable_group() = MakeGroup(name, std::move(ports));
  req.mutable_update_mask()->add_paths("backends");
  v1::Group ignored;
  return admin->UpdateGroup(Context(kFleetAdminToken).get(), req,
                            out != nullptr ? out : &ignored);
}

grpc::Status Replica::Delete(const std::string& name) {
  v1::DeleteGroupRequest req;
  req.set_name(name);
  v1::DeleteGroupResponse resp;
  return admin->DeleteGroup(Context(kFleetAdminToken).get(), req, &resp);
}

std::optional<v1::Group> Replica::Get(const std::string& name) {
  v1::GetGroupRequest req;
  req.set_name(name);
  v1::Group g;
  if (!admin->GetGroup(Context(kFleetAdminToken).get(), req, &g).ok()) {
    return std::nullopt;
  }
  return g;
}

std::string Replica::Backends(const std::string& name) {
  std::optional<v1::Group> g = Get(name);
  if (!g.has_value()) {
    return "";
  }
  std::vector<std::string> out;
  for (const v1::Backend& b : g->backends()) {
    out.push_back(b.address());
  }
  return absl::StrJoin(out, ",");
}

uint64_t Replica::Generation(const std::string& name) {
  v1::ListGroupsResponse resp;
  admin->ListGroups(Context(kFleetAdminToken).get(), v1::ListGroupsRequest(),
                    &resp);
  for (const v1::Group& g : resp.groups()) {
    if (g.name() == name) {
      return g.generation();
    }
  }
  return 0;
}

v1::StoreState Replica::Store() {
  v1::ListTargetsResponse resp;
  admin->ListTargets(Context(kFleetAdminToken).get(), v1::ListTargetsRequest(),
                     &resp);
  return resp.store();
}

grpc::Status Replica::Pick(const std::string& group, v1::PickResponse* out,
                           const std::string& token) {
  v1::PickRequest req;
  req.set_group(group);
  req.set_session_token(token);
  return lb->Pick(Context().get(), req, out);
}

std::string Replica::Metrics() {
  absl::StatusOr<HttpResponse> r =
      HttpGet("127.0.0.1", server.metrics_port, "/metrics");
  return r.ok() ? r->body : "";
}

double Replica::Metric(const std::string& name) {
  return ScrapedMetric(server.metrics_port, name);
}

void FleetTestBase::StartCluster(EtcdCluster::Options options) {
  absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
      EtcdCluster::Start(std::move(options));
  if (!cluster.ok() && absl::IsNotFound(cluster.status())) {
    GTEST_SKIP() << cluster.status();
  }
  ASSERT_OK(cluster.status());
  cluster_ = *std::move(cluster);
  tokens_ =
      dir_.WriteSecret("tokens", absl::StrCat(kFleetAdminToken, " admin\n",
                                              kFleetReportToken, " report\n"));
  peer_token_ =
      dir_.WriteSecret("peer-token", absl::StrCat(kFleetReportToken, "\n"));
}

std::string FleetTestBase::Config(const std::vector<std::string>& endpoints,
                                  const std::string& extra,
                                  const std::string& etcd_settings) {
  return absl::StrCat(
      extra, "store:\n  type: etcd\n  etcd:\n    endpoints: [",
      absl::StrJoin(endpoints, ", "), "]\n    prefix: ", kFleetPrefix, "\n",
      etcd_settings, "admin:\n  token_file: ", tokens_, "\n", admin_settings_,
      "fleet:\n  member_ttl: 2s\n  peer_token_file: ", peer_token_, "\n");
}

void FleetTestBase::AddReplica(const std::vector<std::string>& endpoints,
                               const std::string& extra,
                               const std::string& etcd_settings) {
  const int i = static_cast<int>(replicas_.size());
  const std::string config =
      dir_.WriteFile(absl::StrCat("aside-", i, ".yaml"),
                     Config(endpoints, extra, etcd_settings));
  absl::StatusOr<RunningServer> server = StartServer(
      absl::StrCat(dir_.path(), "/state-", i), {"--config", config});
  ASSERT_OK(server.status());
  auto r = std::make_unique<Replica>();
  r->server = *std::move(server);
  auto channel = grpc::CreateChannel(r->server.target(),
                                     grpc::InsecureChannelCredentials());
  r->admin = v1::Admin::NewStub(channel);
  r->lb = v1::LoadBalancer::NewStub(channel);
  replicas_.push_back(std::move(r));
}

void FleetTestBase::Drain() {
  for (auto& r : replicas_) {
    r->server.process->ReadAvailable();
  }
}

}  // namespace aside::testing
