// Server-side picks over equal backends that nobody has reported on spread
// evenly for every load-aware policy: neither the address order nor the
// order the backends were created in may become a preference.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "server/config/config.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

constexpr int kBackends = 10;
constexpr int kPicks = 2000;

// (group, policy as written in the config file).
const std::pair<const char*, const char*> kPolicies[] = {
    {"random", "random"},
    {"p2c-pending", "{name: p2c, load: pending}"},
    {"p2c-peak-ewma", "{name: p2c, load: peak_ewma}"},
    {"least-time-last", "{name: least_time, metric: last_byte}"},
    {"least-time-first", "{name: least_time, metric: first_byte}"},
    {"locality", "locality"},
};

class PickBiasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string yaml = absl::StrCat("state_dir: ", state_dir_.path(),
                                    "\nlisten: 127.0.0.1:0\nmetrics: \"\"\n"
                                    "groups:\n");
    for (const auto& [group, policy] : kPolicies) {
      absl::StrAppend(&yaml, "  - name: ", group, "\n    policy: ", policy,
                      "\n    health_check: {kind: none}\n    backends:\n");
      for (int i = 0; i < kBackends; ++i) {
        absl::StrAppend(&yaml, "      - 127.0.0.", 1 + i, ":", 9000 + i, "\n");
      }
    }
    ASSERT_OK_AND_ASSIGN(ServerConfig config, ParseConfig(yaml, "test.yaml"));
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(config));
    ASSERT_OK(server_->Start());
    stub_ = v1::LoadBalancer::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
    }
  }

  aside::testing::TempDir state_dir_;
  std::unique_ptr<AsideServer> server_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

// Each count against its binomial expectation (n = 2000, p = 1/10: sd ~13)
// within +-35 % (~5 sd), and the spread under a chi-square bound (9 degrees
// of freedom; 50 is beyond the 99.9999th percentile).
TEST_F(PickBiasTest, EqualBackendsWithoutReportsShareThePicks) {
  for (const auto& [group, policy] : kPolicies) {
    SCOPED_TRACE(group);
    std::map<std::string, int> counts;
    for (int i = 0; i < kPicks; ++i) {
      v1::PickRequest request;
      request.set_group(group);
      v1::PickResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(10));
      grpc::Status status = stub_->Pick(&context, request, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      ASSERT_EQ(response.backends_size(), 1);
      counts[response.backends(0).address()]++;
    }
    ASSERT_EQ(counts.size(), static_cast<size_t>(kBackends))
        << ::testing::PrintToString(counts);
    const double expected = static_cast<double>(kPicks) / kBackends;
    double chi2 = 0;
    for (const auto& [address, count] : counts) {
      EXPECT_GT(count, expected * 0.65) << address;
      EXPECT_LT(count, expected * 1.35) << address;
      chi2 += (count - expected) * (count - expected) / expected;
    }
    EXPECT_LT(chi2, 50) << ::testing::PrintToString(counts);
  }
}

}  // namespace
}  // namespace aside::server
