// What the fleet tests share: real aside-server replicas on a real etcd
// cluster on loopback (DESIGN.md §11), each with stubs for its Admin and
// LoadBalancer services, started from configs that point them at the
// cluster under one prefix.
#ifndef ASIDE_TESTS_FLEET_FLEET_HELPERS_H_
#define ASIDE_TESTS_FLEET_FLEET_HELPERS_H_

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/process.h"

namespace aside::testing {

inline constexpr char kFleetAdminToken[] = "fleet-admin-token";
// A `report` credential: load reports, and what replicas present to each
// other's LoadView.
inline constexpr char kFleetReportToken[] = "fleet-report-token-0123";
inline constexpr char kFleetPrefix[] = "/aside-fleet/";
// The store.etcd timeouts most fleet tests run with: a member that does not
// connect is left quickly.
inline constexpr char kQuickEtcdTimeouts[] =
    "    dial_timeout: 300ms\n    request_timeout: 2s\n";

// A group of loopback backends without health checks.
v1::Group MakeGroup(const std::string& name, std::vector<int> ports);

// One replica and its stubs.
struct Replica {
  RunningServer server;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<v1::LoadBalancer::Stub> lb;

  grpc::Status Create(const v1::Group& g, v1::Group* out = nullptr);
  grpc::Status SetBackends(const std::string& name, std::vector<int> ports,
                           v1::Group* out = nullptr);
  grpc::Status Delete(const std::string& name);
  std::optional<v1::Group> Get(const std::string& name);
  // The group's backend addresses as this replica serves them ("" when
  // it has no such group).
  std::string Backends(const std::string& name);
  uint64_t Generation(const std::string& name);
  v1::StoreState Store();
  grpc::Status Pick(const std::string& group, v1::PickResponse* out,
                    const std::string& token = "");
  // The /metrics page ("" when it cannot be read).
  std::string Metrics();
  // The value of an unlabelled metric; -1 when it cannot be read.
  double Metric(const std::string& name);
};

// A fixture with a real etcd cluster and replicas started on it.
class FleetTestBase : public ::testing::Test {
 protected:
  // Starts the cluster (skips the test when etcd is not installed) and
  // writes the token files the replicas share.
  void StartCluster(EtcdCluster::Options options = {});

  // A replica's config: the etcd store on `endpoints` with the
  // store.etcd lines `etcd_settings`, after the top-level YAML `extra`.
  std::string Config(const std::vector<std::string>& endpoints,
                     const std::string& extra = "",
                     const std::string& etcd_settings = kQuickEtcdTimeouts);
  // Starts one more replica with Config(endpoints, extra, etcd_settings).
  void AddReplica(const std::vector<std::string>& endpoints,
                  const std::string& extra = "",
                  const std::string& etcd_settings = kQuickEtcdTimeouts);

  // Keeps the servers' stderr pipes from filling.
  void Drain();

  TempDir dir_;
  // Lines added to the admin: block of the next replicas' configs
  // ("  max_queued_writes: 2\n").
  std::string admin_settings_;
  std::string tokens_;
  std::string peer_token_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_FLEET_FLEET_HELPERS_H_
