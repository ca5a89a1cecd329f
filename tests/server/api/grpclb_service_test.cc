// grpclb server lists, name mapping, and BalanceLoad over real gRPC with a
// hand-driven grpclb client (the stock-client tests live in integration).
#include "server/api/grpclb_service.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;
namespace lb = grpc::lb::v1;

std::string Ip(const lb::Server& s) {
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(s.ip_address().size() == 4 ? AF_INET : AF_INET6,
            s.ip_address().data(), buf, sizeof(buf));
  return absl::StrCat(buf, ":", s.port());
}

TableConstPtr MakeTable(std::vector<uint32_t> weights,
                        std::vector<bool> ready = {},
                        double panic_threshold = 0) {
  PolicyConfig policy;
  policy.kind = PolicyKind::kWeightedRoundRobin;
  auto t = Table::Create(
      aside::testing::MakeTableSpec(policy, {.weights = std::move(weights),
                                             .ready = std::move(ready),
                                             .panic_threshold = panic_threshold,
                                             .group = "web"}),
      nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(ServerListTest, WeightsBecomeReducedInterleavedRepeats) {
  TableConstPtr t = MakeTable({300, 100, 0}, {true, true, true});
  lb::ServerList list = BuildServerList(*t, {}, 1000, 0);
  std::map<std::string, int> counts;
  for (const lb::Server& s : list.servers()) {
    counts[Ip(s)]++;
    EXPECT_EQ(s.load_balance_token(), absl::StrCat("web/", Ip(s)));
    EXPECT_FALSE(s.drop());
  }
  // 300:100 reduced by the gcd to 3:1; weight 0 left out.
  EXPECT_EQ(list.servers_size(), 4);
  EXPECT_EQ(counts[aside::testing::TestAddress(0)], 3);
  EXPECT_EQ(counts[aside::testing::TestAddress(1)], 1);
  // Interleaved, not a a a b.
  EXPECT_NE(Ip(list.servers(2)), Ip(list.servers(0)));
}

TEST(ServerListTest, LongListsAreCappedApproximatingTheRatio) {
  TableConstPtr t = MakeTable({997, 991, 2});
  lb::ServerList list = BuildServerList(*t, {}, 100, 0);
  std::map<std::string, int> counts;
  for (const lb::Server& s : list.servers()) {
    counts[Ip(s)]++;
  }
  EXPECT_LE(list.servers_size(), 102);
  EXPECT_NEAR(counts[aside::testing::TestAddress(0)], 50, 1);
  EXPECT_NEAR(counts[aside::testing::TestAddress(1)], 50, 1);
  EXPECT_EQ(counts[aside::testing::TestAddress(2)], 1);  // at least one
}

TEST(ServerListTest, UnreadyBackendsAreLeftOutAndPanicDrops) {
  TableConstPtr t = MakeTable({1, 1, 1, 1}, {true, false, true, true});
  lb::ServerList list = BuildServerList(*t, {}, 1000, 0);
  EXPECT_EQ(list.servers_size(), 3);
  // In panic every backend is listed and, if configured, calls dropped.
  TableConstPtr panic =
      MakeTable({1, 1, 1, 1}, {true, false, false, false}, 50);
  ASSERT_TRUE(panic->panic());
  GrpclbSpec options;
  options.drop_in_panic_percent = 20;
  list = BuildServerList(*panic, options, 1000, 0);
  int drops = 0;
  for (const lb::Server& s : list.servers()) {
    if (s.drop()) {
      ++drops;
      EXPECT_EQ(s.load_balance_token(), "drop/web/panic");
    }
  }
  EXPECT_EQ(list.servers_size(), 5);
  EXPECT_EQ(drops, 1);  // 1 of 5 = 20 %
  EXPECT_FALSE(list.servers(0).drop());
}

TEST(ServerListTest, OverloadDrops) {
  TableConstPtr t = MakeTable({1, 1, 1, 1, 1, 1, 1, 1, 1});
  lb::ServerList list = BuildServerList(*t, {}, 1000, 0.25);
  int drops = 0;
  for (const lb::Server& s : list.servers()) {
    drops += s.drop() ? 1 : 0;
  }
  EXPECT_EQ(drops, 3);  // 3 of 12
}

// A BalanceLoad stream that has sent its initial request for `name`.
struct Balancer {
  Balancer(lb::LoadBalancer::Stub& stub, const std::string& name) {
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    stream = stub.BalanceLoad(&context);
    lb::LoadBalanceRequest request;
    request.mutable_initial_request()->set_name(name);
    sent = stream->Write(request);
  }
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientReaderWriter<lb::LoadBalanceRequest, lb::LoadBalanceResponse>>
      stream;
  bool sent = false;
};

class GrpclbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("state_dir: ", dir_.path(), "\n", R"(
listen: 127.0.0.1:0
metrics: ""
grpclb: {client_stats_report_interval: 2s}
load_reports: {auth: open}
groups:
  - name: web
    policy: weighted_round_robin
    health_check: {kind: none}
    aliases: [frontend.example]
    backends:
      - {address: 127.0.0.1:9001, weight: 3}
      - {address: 127.0.0.1:9002, weight: 1}
)"),
                    "t.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(*config));
    ASSERT_OK(server_->Start());
    stub_ = lb::LoadBalancer::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
    }
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::unique_ptr<lb::LoadBalancer::Stub> stub_;
};

TEST_F(GrpclbTest, NamesMapByFirstLabelOrAlias) {
  EXPECT_NE(ResolveGrpclbName(server_->groups(), "web.default.svc:443"),
            nullptr);
  EXPECT_NE(ResolveGrpclbName(server_->groups(), "web"), nullptr);
  EXPECT_NE(ResolveGrpclbName(server_->groups(), "frontend.example:80"),
            nullptr);
  EXPECT_EQ(ResolveGrpclbName(server_->groups(), "api.default.svc"), nullptr);
  // DNS names: case and a trailing dot on the host do not matter.
  EXPECT_EQ(ResolveGrpclbName(server_->groups(), "WEB.Default.svc.:443"),
            ResolveGrpclbName(server_->groups(), "web.default.svc:443"));
  EXPECT_EQ(ResolveGrpclbName(server_->groups(), "WEB"),
            ResolveGrpclbName(server_->groups(), "web"));
  EXPECT_EQ(ResolveGrpclbName(server_->groups(), "Frontend.EXAMPLE.:80"),
            ResolveGrpclbName(server_->groups(), "frontend.example:80"));
  EXPECT_EQ(ResolveGrpclbName(server_->groups(), ""), nullptr);
}

TEST_F(GrpclbTest, InitialResponseServerListsAndClientStats) {
  Balancer balancer(*stub_, "web.lb.test:1234");
  ASSERT_TRUE(balancer.sent);
  auto& stream = balancer.stream;
  lb::LoadBalanceResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_initial_response());
  EXPECT_EQ(
      response.initial_response().client_stats_report_interval().seconds(), 2);
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_server_list());
  EXPECT_EQ(response.server_list().servers_size(), 4);

  // A change to the group produces a fresh list.
  GroupSpec spec = server_->groups().Find("web")->spec();
  spec.backends[1].drained = true;
  ASSERT_OK(server_->groups().Find("web")->Update(spec));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_server_list());
  ASSERT_EQ(response.server_list().servers_size(), 1);
  EXPECT_EQ(Ip(response.server_list().servers(0)), "127.0.0.1:9001");

  lb::LoadBalanceRequest stats;
  stats.mutable_client_stats()->set_num_calls_started(10);
  stats.mutable_client_stats()->set_num_calls_finished(9);
  stats.mutable_client_stats()->set_num_calls_finished_known_received(8);
  auto* dropped = stats.mutable_client_stats()->add_calls_finished_with_drop();
  dropped->set_load_balance_token("drop/web/panic");
  dropped->set_num_calls(1);
  ASSERT_TRUE(stream->Write(stats));
  ASSERT_TRUE(stream->Write(stats));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  const ClientStatsTotals totals = server_->loads().ClientStats("web");
  EXPECT_EQ(totals.calls_started, 20u);
  EXPECT_EQ(totals.calls_finished, 18u);
  EXPECT_EQ(totals.known_received, 16u);
  EXPECT_EQ(totals.dropped.at("drop/web/panic"), 2u);
}

TEST_F(GrpclbTest, EachGenerationsListIsBuiltOnceForEveryStream) {
  constexpr int kStreams = 5;
  std::vector<std::unique_ptr<Balancer>> streams;
  lb::LoadBalanceResponse response;
  for (int i = 0; i < kStreams; ++i) {
    auto o = std::make_unique<Balancer>(*stub_, "web.lb.test");
    ASSERT_TRUE(o->sent);
    ASSERT_TRUE(o->stream->Read(&response));  // initial response
    ASSERT_TRUE(o->stream->Read(&response));
    ASSERT_EQ(response.server_list().servers_size(), 4);
    streams.push_back(std::move(o));
  }
  EXPECT_EQ(server_->grpclb().lists_built(), 1u);

  GroupSpec spec = server_->groups().Find("web")->spec();
  spec.backends[1].drained = true;
  ASSERT_OK(server_->groups().Find("web")->Update(spec));
  for (auto& o : streams) {
    ASSERT_TRUE(o->stream->Read(&response));
    ASSERT_EQ(response.server_list().servers_size(), 1);
  }
  EXPECT_EQ(server_->grpclb().lists_built(), 2u);
  for (auto& o : streams) {
    o->context.TryCancel();
  }
}

TEST_F(GrpclbTest, UnknownNameIsNotFound) {
  Balancer balancer(*stub_, "nothing.lb.test");
  ASSERT_TRUE(balancer.sent);
  auto& stream = balancer.stream;
  lb::LoadBalanceResponse response;
  EXPECT_FALSE(stream->Read(&response));
  grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("nothing.lb.test"));
}

TEST_F(GrpclbTest, FirstMessageMustBeTheInitialRequest) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  auto stream = stub_->BalanceLoad(&context);
  lb::LoadBalanceRequest request;
  request.mutable_client_stats();
  ASSERT_TRUE(stream->Write(request));
  lb::LoadBalanceResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// At shutdown a stream whose server list is still being written (the
// client has not read it: it does not fit the flow-control window) ends
// UNAVAILABLE after that list, not cancelled under it.
TEST(GrpclbShutdownTest, AListInFlightIsSentBeforeTheStreamEnds) {
  aside::testing::TempDir dir;
  std::string yaml = absl::StrCat("state_dir: ", dir.path(), "\n", R"(
listen: 127.0.0.1:0
metrics: ""
grpclb: {max_servers: 100000}
groups:
  - name: big
    health_check: {kind: none}
    backends:
)");
  constexpr int kBackends = 4000;  // a list of about 140 KB
  for (int i = 0; i < kBackends; ++i) {
    absl::StrAppend(&yaml, "      - {address: \"10.", i / 250, ".", i % 250 + 1,
                    ".1:8080\"}\n");
  }
  absl::StatusOr<ServerConfig> config = ParseConfig(yaml, "t.yaml");
  ASSERT_OK(config);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AsideServer> server,
                       AsideServer::Create(*config));
  ASSERT_OK(server->Start());
  grpc::ChannelArguments args;
  // Keep the flow-control window at its initial size while nothing reads.
  args.SetInt("grpc.http2.bdp_probe", 0);
  auto stub = lb::LoadBalancer::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(server->grpc_port()),
      grpc::InsecureChannelCredentials(), args));
  Balancer balancer(*stub, "big");
  ASSERT_TRUE(balancer.sent);
  auto& stream = balancer.stream;
  // The list is built under the stream's lock right before its write
  // starts; the service offers no event for it, so poll (bounded).
  for (const absl::Time until = absl::Now() + absl::Seconds(10);
       server->grpclb().lists_built() == 0 && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(server->grpclb().lists_built(), 1u);

  server->grpclb().Shutdown();
  lb::LoadBalanceResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_initial_response());
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.server_list().servers_size(), kBackends);
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  server->Shutdown(absl::Seconds(1));
  server->Wait();
}

}  // namespace
}  // namespace aside::server
