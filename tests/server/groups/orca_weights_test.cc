// Backends' own ORCA reports become the group's effective weights (gRFC
// A58), and every edge reads them from the one table: Pick here, the
// Watch table's effective weights, grpclb and xDS (which encode the same
// member weights).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_orca.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::Eventually;
using ::aside::testing::OrcaBackend;
using ::aside::testing::OrcaReport;
using ::testing::HasSubstr;

class OrcaWeightsTest : public ::testing::Test {
 protected:
  // Starts a server whose group `web` holds the three backends, with
  // `policy` and `orca` written into the group.
  void StartServer(const std::string& policy, const std::string& orca,
                   const std::string& third_weight = "100") {
    const std::string yaml = absl::StrCat(
        "state_dir: ", dir_.path(), "\n", R"(
listen: 127.0.0.1:0
metrics: ""
groups:
  - name: web
    policy: )",
        policy, R"(
    health_check: {kind: none}
    orca: )",
        orca, R"(
    backends:
      - )",
        backends_[0].address(), "\n      - ", backends_[1].address(),
        "\n      - {address: ", backends_[2].address(),
        ", weight: ", third_weight, "}\n");
    absl::StatusOr<ServerConfig> config = ParseConfig(yaml, "t.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(*config));
    ASSERT_OK(server_->Start());
    stub_ = v1::LoadBalancer::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
    }
  }

  // The effective weights of the published table, by backend index.
  std::vector<uint32_t> Weights() {
    TableConstPtr table = server_->groups().Find("web")->table();
    std::vector<uint32_t> out;
    for (const OrcaBackend& b : backends_) {
      const int64_t i = table->Find(b.address());
      out.push_back(i < 0 ? 0 : table->member(static_cast<uint32_t>(i)).weight);
    }
    return out;
  }
  bool AwaitWeights(const std::vector<uint32_t>& want) {
    return Eventually([&] { return Weights() == want; });
  }

  // Each backend's share of `n` picks.
  std::vector<double> Shares(int n) {
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) {
      grpc::ClientContext c;
      v1::PickRequest r;
      r.set_group("web");
      r.set_key(absl::StrCat("key-", i));
      v1::PickResponse resp;
      EXPECT_TRUE(stub_->Pick(&c, r, &resp).ok());
      counts[resp.backends(0).address()]++;
    }
    std::vector<double> out;
    for (const OrcaBackend& b : backends_) {
      out.push_back(static_cast<double>(counts[b.address()]) / n);
    }
    return out;
  }

  aside::testing::TempDir dir_;
  OrcaBackend backends_[3];
  std::unique_ptr<AsideServer> server_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

TEST_F(OrcaWeightsTest, PicksFollowQpsOverUtilisation) {
  backends_[0].orca().Set(OrcaReport(100, 0.2));
  backends_[1].orca().Set(OrcaReport(100, 0.2));
  backends_[2].orca().Set(OrcaReport(100, 0.8));
  StartServer("weighted_round_robin",
              "{interval: 100ms, weights: true, blackout_period: 0s}");
  // 500 : 500 : 125, the largest scaled to 1000.
  ASSERT_TRUE(AwaitWeights({1000, 1000, 250}))
      << ::testing::PrintToString(Weights());
  const std::vector<double> shares = Shares(900);
  EXPECT_NEAR(shares[0], 4.0 / 9, 0.03);
  EXPECT_NEAR(shares[1], 4.0 / 9, 0.03);
  EXPECT_NEAR(shares[2], 1.0 / 9, 0.03);

  // One backend gets busy: 100 / 0.9 against 500 and 125.
  backends_[0].orca().Set(OrcaReport(100, 0.9));
  ASSERT_TRUE(AwaitWeights({222, 1000, 250}))
      << ::testing::PrintToString(Weights());
  EXPECT_NEAR(Shares(900)[0], 0.15, 0.03);
}

TEST_F(OrcaWeightsTest, ErrorsPenaliseAndABackendWithoutReportsTakesTheMean) {
  backends_[0].orca().Set(OrcaReport(100, 0.5));
  // 100 / (0.5 + 50/100 * 1.0) = 100.
  backends_[1].orca().Set(OrcaReport(100, 0.5, 50));
  // Reports no qps: no weight of its own, the mean of the others.
  backends_[2].orca().Set(OrcaReport(0, 0.5));
  StartServer("random",
              "{interval: 100ms, weights: true, blackout_period: 0s}");
  ASSERT_TRUE(AwaitWeights({1000, 500, 750}))
      << ::testing::PrintToString(Weights());
}

TEST_F(OrcaWeightsTest, AConfiguredWeightOfZeroStaysDrained) {
  for (OrcaBackend& b : backends_) {
    b.orca().Set(OrcaReport(100, 0.5));
  }
  StartServer("weighted_round_robin",
              "{interval: 100ms, weights: true, blackout_period: 0s}",
              /*third_weight=*/"0");
  ASSERT_TRUE(AwaitWeights({1000, 1000, 0}))
      << ::testing::PrintToString(Weights());
  EXPECT_EQ(Shares(100)[2], 0);
}

TEST_F(OrcaWeightsTest, WithoutWeightsReportsAreKeptAndWeightsStay) {
  for (OrcaBackend& b : backends_) {
    b.orca().Set(OrcaReport(100, 0.5));
  }
  StartServer("weighted_round_robin", "{interval: 100ms}");
  ASSERT_TRUE(Eventually([&] {
    return server_->orca().Latest(backends_[2].address()).has_value();
  }));
  EXPECT_EQ(Weights(), (std::vector<uint32_t>{100, 100, 100}));
}

TEST_F(OrcaWeightsTest, TheBlackoutKeepsConfiguredWeightsUntilItEnds) {
  backends_[0].orca().Set(OrcaReport(100, 0.2));
  backends_[1].orca().Set(OrcaReport(100, 0.4));
  backends_[2].orca().Set(OrcaReport(100, 0.8));
  StartServer("weighted_round_robin",
              "{interval: 100ms, weights: true, blackout_period: 1s}");
  ASSERT_TRUE(Eventually([&] {
    return server_->orca().Latest(backends_[2].address()).has_value();
  }));
  const int64_t first =
      server_->orca().Latest(backends_[2].address())->received_nanos;
  // Before the blackout ends, the configured weights.
  if (MonotonicNanos() - first < 800'000'000) {
    EXPECT_EQ(Weights(), (std::vector<uint32_t>{100, 100, 100}));
  }
  ASSERT_TRUE(AwaitWeights({1000, 500, 250}))
      << ::testing::PrintToString(Weights());
  // `first` may be the backend's second report, one interval after its
  // first.
  EXPECT_GE(MonotonicNanos() - first, 850'000'000);
}

TEST(OrcaConfigTest, AHashPolicyMustAcceptMovingKeys) {
  absl::StatusOr<ServerConfig> config = ParseConfig(R"(
groups:
  - name: web
    policy: ketama
    orca: {weights: true}
    backends: [127.0.0.1:9001]
)",
                                                    "t.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("t.yaml:"));
  EXPECT_THAT(config.status().message(), HasSubstr("orca.weights"));
  EXPECT_THAT(config.status().message(), HasSubstr("move_keys"));
  EXPECT_OK(ParseConfig(R"(
groups:
  - name: web
    policy: ketama
    orca: {weights: true, move_keys: true}
    backends: [127.0.0.1:9001]
)",
                        "t.yaml"));
}

TEST(OrcaConfigTest, RangesAreCheckedWithTheirLines) {
  for (const char* orca :
       {"{interval: 10ms}", "{interval: 1s, weight_expiration_period: 1s}",
        "{error_utilization_penalty: -1}", "{blackout_period: 2h}",
        "{interval: fast}", "{weights: maybe}", "{unknown: 1}"}) {
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("groups:\n  - name: web\n    orca: ", orca,
                                 "\n    backends: [127.0.0.1:9001]\n"),
                    "t.yaml");
    ASSERT_FALSE(config.ok()) << orca;
    EXPECT_THAT(config.status().message(), HasSubstr("t.yaml:3")) << orca;
  }
}

}  // namespace
}  // namespace aside::server
