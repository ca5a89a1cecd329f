// Every policy served over real gRPC by the in-process server: one group per
// policy, picked through aside.v1.LoadBalancer/Pick on loopback.
#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "server/api/load_balancer_service.h"
#include "server/server.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

const std::set<std::string> kBackends = {"127.0.0.1:9201", "127.0.0.1:9202",
                                         "127.0.0.1:9203", "127.0.0.1:9204",
                                         "127.0.0.1:9205"};

std::string Group(const std::string& name, const std::string& policy) {
  return absl::StrCat(R"(
  - name: )",
                      name, R"(
    policy: )",
                      policy, R"(
    health_check: {kind: none}
    backends:
      - {address: 127.0.0.1:9201, weight: 1, locality: {region: r, zone: a}}
      - {address: 127.0.0.1:9202, weight: 2, locality: {region: r, zone: a}}
      - {address: 127.0.0.1:9203, weight: 3, locality: {region: r, zone: a}}
      - {address: 127.0.0.1:9204, weight: 1, locality: {region: r, zone: b}}
      - {address: 127.0.0.1:9205, weight: 2, locality: {region: r, zone: b}}
)");
}

const std::map<std::string, std::string>& Policies() {
  static const auto* policies = new std::map<std::string, std::string>{
      {"rr", "round_robin"},
      {"wrr", "weighted_round_robin"},
      {"random", "random"},
      {"hash", "hash"},
      {"ketama", "{name: ketama, points_per_weight: 160}"},
      {"maglev", "{name: maglev, table_size: 65537}"},
      {"ring-hash",
       "{name: ring_hash, min_ring_size: 1024, max_ring_size: 4096}"},
      {"p2c", "{name: p2c, load: pending}"},
      {"p2c-ewma", "{name: p2c, load: peak_ewma, decay: 10s}"},
      {"least-time", "{name: least_time, metric: last_byte}"},
      {"sticky", "{name: sticky, ttl: 1h, fallback: round_robin}"},
      {"locality", "{name: locality, child: round_robin}"},
  };
  return *policies;
}

class PoliciesPickTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string yaml = "listen: 127.0.0.1:0\nmetrics: \"\"\ngroups:";
    for (const auto& [name, policy] : Policies()) {
      yaml += Group(name, policy);
    }
    absl::StatusOr<ServerConfig> config = ParseConfig(yaml, "policies.yaml");
    ASSERT_OK(config);
    auto server = AsideServer::Create(*config);
    ASSERT_OK(server);
    server_ = *std::move(server);
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

  v1::PickResponse Pick(const v1::PickRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::PickResponse response;
    grpc::Status s = stub_->Pick(&context, request, &response);
    EXPECT_TRUE(s.ok()) << request.group() << ": " << s.error_message();
    return response;
  }

  v1::PickRequest Request(const std::string& group, const std::string& key = "",
                          uint32_t count = 1) {
    v1::PickRequest r;
    r.set_group(group);
    r.set_key(key);
    r.set_count(count);
    return r;
  }

  std::unique_ptr<AsideServer> server_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

TEST_F(PoliciesPickTest, EveryPolicyAnswersWithDistinctGroupBackends) {
  for (const auto& [group, policy] : Policies()) {
    for (int i = 0; i < 5; ++i) {
      v1::PickResponse r = Pick(Request(group, absl::StrCat("k", i), 3));
      ASSERT_EQ(r.backends_size(), 3) << group;
      std::set<std::string> seen;
      for (const auto& b : r.backends()) {
        EXPECT_TRUE(kBackends.count(b.address()))
            << group << " " << b.address();
        seen.insert(b.address());
      }
      EXPECT_EQ(seen.size(), 3u) << group;
      EXPECT_GT(r.generation(), 0u);
    }
  }
}

TEST_F(PoliciesPickTest, HashPoliciesSendAKeyToOneBackend) {
  for (const char* group : {"hash", "ketama", "maglev", "ring-hash"}) {
    std::set<std::string> across_keys;
    for (int k = 0; k < 20; ++k) {
      const std::string key = absl::StrCat("user-", k);
      const std::string first = Pick(Request(group, key)).backends(0).address();
      for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(Pick(Request(group, key)).backends(0).address(), first)
            << group << " " << key;
      }
      across_keys.insert(first);
    }
    EXPECT_GT(across_keys.size(), 1u) << group;
  }
}

// A text key (what grpcurl users type) picks what the same bytes as
// key_bytes pick, and what the client stub picks locally for that key.
TEST_F(PoliciesPickTest, TextKeyPicksWhatKeyBytesAndTheStubPick) {
  ClientOptions options;
  options.targets = {absl::StrCat("127.0.0.1:", server_->grpc_port())};
  options.groups = {"hash", "ketama", "maglev", "ring-hash"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                       Client::Create(std::move(options)));
  for (const char* group : {"hash", "ketama", "maglev", "ring-hash"}) {
    ClientGroup* stub = client->Group(group);
    std::set<std::string> across_keys;
    for (int k = 0; k < 20; ++k) {
      const std::string key = absl::StrCat("user-", k);
      v1::PickRequest text;
      const std::string json =
          absl::StrCat(R"({"group":")", group, R"(","key":")", key, R"("})");
      ASSERT_TRUE(
          google::protobuf::util::JsonStringToMessage(json, &text).ok());
      ASSERT_EQ(text.key(), key);
      v1::PickRequest binary = Request(group);
      binary.set_key_bytes(key);
      const std::string by_text = Pick(text).backends(0).address();
      EXPECT_EQ(Pick(binary).backends(0).address(), by_text) << group << key;
      absl::StatusOr<PickHandle> local = stub->Pick(key);
      ASSERT_OK(local);
      EXPECT_EQ(local->address(), by_text) << group << " " << key;
      // A successful call: an abandoned pick counts as a failure, and
      // failures would move the stub's picks away from the backend.
      local->Done(true);
      across_keys.insert(by_text);
    }
    EXPECT_GT(across_keys.size(), 1u) << group;
  }
}

TEST_F(PoliciesPickTest, StickyIssuesATokenAndHonoursIt) {
  v1::PickResponse first = Pick(Request("sticky"));
  ASSERT_EQ(first.backends_size(), 1);
  ASSERT_FALSE(first.session_token().empty());
  for (int i = 0; i < 10; ++i) {
    v1::PickRequest r = Request("sticky");
    r.set_session_token(first.session_token());
    v1::PickResponse again = Pick(r);
    EXPECT_EQ(again.backends(0).address(), first.backends(0).address());
  }
  // A forged token is replaced.
  v1::PickRequest forged = Request("sticky");
  std::string token = first.session_token();
  token[10] = token[10] == 'A' ? 'B' : 'A';
  forged.set_session_token(token);
  EXPECT_FALSE(Pick(forged).session_token().empty());
  // Without a token, round robin moves on: several backends over 5 picks.
  std::set<std::string> seen;
  for (int i = 0; i < 5; ++i) {
    seen.insert(Pick(Request("sticky")).backends(0).address());
  }
  EXPECT_EQ(seen.size(), 5u);
}

TEST_F(PoliciesPickTest, LocalityKeepsCallersInTheirZone) {
  int in_b = 0;
  for (int i = 0; i < 200; ++i) {
    v1::PickRequest r = Request("locality");
    r.mutable_caller_locality()->set_region("r");
    r.mutable_caller_locality()->set_zone("b");
    const std::string a = Pick(r).backends(0).address();
    in_b += (a == "127.0.0.1:9204" || a == "127.0.0.1:9205") ? 1 : 0;
  }
  // 97% local (3% probes the other zone).
  EXPECT_GE(in_b, 180);
}

TEST_F(PoliciesPickTest, WeightedPoliciesFollowWeights) {
  std::map<std::string, int> counts;
  for (int i = 0; i < 90; ++i) {
    counts[Pick(Request("wrr")).backends(0).address()]++;
  }
  // Weights 1,2,3,1,2: exact over whole cycles of 9.
  EXPECT_EQ(counts["127.0.0.1:9201"], 10);
  EXPECT_EQ(counts["127.0.0.1:9203"], 30);
  EXPECT_EQ(counts["127.0.0.1:9205"], 20);
}

}  // namespace
}  // namespace aside::server
