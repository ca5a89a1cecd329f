// Load reports change what the server picks: least_time follows reported
// latency, locality's zone weights follow reported utilisation, and bad
// reports change nothing.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

class LoadEffectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("state_dir: ", dir_.path(), "\n", R"(
listen: 127.0.0.1:0
metrics: ""
load_reports: {auth: open}
groups:
  - name: lt
    policy: {name: least_time, metric: last_byte}
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002]
  - name: loc
    policy: {name: locality, update_period: 100ms, smoothing_time_constant: 100ms}
    health_check: {kind: none}
    backends:
      - {address: 127.0.0.1:9101, locality: {region: r, zone: a}}
      - {address: 127.0.0.1:9102, locality: {region: r, zone: a}}
      - {address: 127.0.0.1:9201, locality: {region: r, zone: b}}
      - {address: 127.0.0.1:9202, locality: {region: r, zone: b}}
)"),
                    "t.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(*config));
    ASSERT_OK(server_->Start());
    stub_ = v1::LoadBalancer::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown(absl::Seconds(1));
    server_->Wait();
  }

  // Sends one report; returns the response.
  v1::ReportLoadResponse Report(const std::vector<v1::BackendLoad>& loads) {
    grpc::ClientContext c;
    v1::ReportLoadResponse response;
    auto writer = stub_->ReportLoad(&c, &response);
    v1::LoadReport r;
    r.set_reporter("pod-1");
    for (const auto& l : loads) *r.add_loads() = l;
    EXPECT_TRUE(writer->Write(r));
    writer->WritesDone();
    EXPECT_TRUE(writer->Finish().ok());
    return response;
  }

  static v1::BackendLoad Latency(const std::string& group,
                                 const std::string& address, uint64_t requests,
                                 absl::Duration sum) {
    v1::BackendLoad l;
    l.set_group(group);
    l.set_address(address);
    l.set_requests(requests);
    l.mutable_latency_sum()->set_seconds(absl::ToInt64Seconds(sum));
    l.mutable_latency_sum()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(sum) % 1000000000));
    return l;
  }

  static v1::BackendLoad Utilization(const std::string& address, double u) {
    v1::BackendLoad l;
    l.set_group("loc");
    l.set_address(address);
    l.mutable_utilization()->set_application(u);
    return l;
  }

  std::map<std::string, int> Picks(const std::string& group, int n,
                                   const char* zone = nullptr) {
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) {
      grpc::ClientContext c;
      v1::PickRequest r;
      r.set_group(group);
      if (zone != nullptr) {
        r.mutable_caller_locality()->set_region("r");
        r.mutable_caller_locality()->set_zone(zone);
      }
      v1::PickResponse resp;
      EXPECT_TRUE(stub_->Pick(&c, r, &resp).ok());
      counts[resp.backends(0).address()]++;
    }
    return counts;
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

TEST_F(LoadEffectsTest, LeastTimeFollowsReportedLatency) {
  // Baselines, then 100 requests each: 9001 at 50 ms, 9002 at 1 ms.
  Report({Latency("lt", "127.0.0.1:9001", 0, absl::ZeroDuration()),
          Latency("lt", "127.0.0.1:9002", 0, absl::ZeroDuration())});
  v1::ReportLoadResponse r =
      Report({Latency("lt", "127.0.0.1:9001", 100, absl::Seconds(5)),
              Latency("lt", "127.0.0.1:9002", 100, absl::Milliseconds(100))});
  EXPECT_EQ(r.accepted(), 2u);
  const auto counts = Picks("lt", 50);
  EXPECT_EQ(counts.count("127.0.0.1:9001"), 0u);
  EXPECT_EQ(counts.at("127.0.0.1:9002"), 50);
}

TEST_F(LoadEffectsTest, LocalityZoneWeightsFollowUtilisation) {
  GroupPtr loc = server_->groups().Find("loc");
  Report(
      {Utilization("127.0.0.1:9101", 0.9), Utilization("127.0.0.1:9102", 0.9),
       Utilization("127.0.0.1:9201", 0.1), Utilization("127.0.0.1:9202", 0.1)});
  // The zone weights follow on the update_period ticks: wait rebuild by
  // rebuild (each wait bounded) until the smoothing has converged.
  auto weights = [&] {
    std::map<std::string, double> w;
    for (const ZoneWeight& z : loc->table()->zone_weights()) {
      w[z.locality.zone] = z.weight;
    }
    return w;
  };
  auto converged = [&] {
    auto w = weights();
    return w.count("a") && std::abs(w["a"] - 0.2) < 0.01;
  };
  for (int ticks = 0; ticks < 100 && !converged(); ++ticks) {
    ASSERT_TRUE(loc->AwaitRebuilds(loc->rebuilds() + 1, absl::Seconds(10)));
  }
  auto w = weights();
  EXPECT_NEAR(w["a"], 2 * (1 - 0.9), 0.01);
  EXPECT_NEAR(w["b"], 2 * (1 - 0.1), 0.01);

  // A caller in the busy zone is sent mostly to the other one.
  const auto counts = Picks("loc", 200, "a");
  const int in_b =
      counts.count("127.0.0.1:9201") ? counts.at("127.0.0.1:9201") : 0;
  const int in_b2 =
      counts.count("127.0.0.1:9202") ? counts.at("127.0.0.1:9202") : 0;
  EXPECT_GT(in_b + in_b2, 150);

  // A bad report is rejected and changes nothing.
  const uint64_t generation = loc->table()->generation();
  v1::ReportLoadResponse bad = Report({Utilization("127.0.0.1:9101", NAN)});
  EXPECT_EQ(bad.accepted(), 0u);
  ASSERT_EQ(bad.rejected_size(), 1);
  // A few update periods pass: three rebuilds of the group run.
  ASSERT_TRUE(loc->AwaitRebuilds(loc->rebuilds() + 3, absl::Seconds(10)));
  w = weights();
  EXPECT_NEAR(w["a"], 0.2, 0.01);
  // Unchanged weights publish no new generation.
  EXPECT_EQ(loc->table()->generation(), generation);
}

}  // namespace
}  // namespace aside::server
