// Who may report load, and how far one reporter can move what the server
// believes: reports need a `report` credential unless the operator opens
// them, one liar among honest reporters cannot steer least_time, and
// reports never eject every backend of a group.
#include "server/auth/report_auth.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "envoy/service/load_stats/v3/lrs.grpc.pb.h"
#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "server/load/load_aggregator.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

constexpr char kAdminToken[] = "report-test-admin-token-0";
constexpr char kReadToken[] = "report-test-read-token-00";
constexpr char kLiarToken[] = "report-test-liar-token-00";
const char* const kHonestTokens[] = {"report-test-honest-token-1",
                                     "report-test-honest-token-2",
                                     "report-test-honest-token-3"};

class ReportAuthTest : public ::testing::Test {
 protected:
  void Start(const std::string& load_reports, const std::string& groups) {
    const std::string tokens = dir_.WriteFile(
        "tokens",
        absl::StrCat(kAdminToken, " admin\n", kReadToken, " read\n", kLiarToken,
                     " report liar\n", kHonestTokens[0], " report honest-1\n",
                     kHonestTokens[1], " report honest-2\n", kHonestTokens[2],
                     " report honest-3\n"));
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("state_dir: ", dir_.path(), "\n",
                                 "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                                 "admin: {token_file: ", tokens, "}\n",
                                 load_reports, "groups:\n", groups),
                    "t.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(*config));
    ASSERT_OK(server_->Start());
    channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    stub_ = v1::LoadBalancer::NewStub(channel_);
  }
  // A report without a credential is taken and counts as `reporter`; one
  // with a report credential still counts under the credential's name.
  void ExpectReportsWithoutACredentialCountAs(const std::string& reporter);

  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
    }
  }

  static v1::BackendLoad Load(const std::string& group,
                              const std::string& address, uint64_t requests,
                              absl::Duration latency_sum, uint64_t failures = 0,
                              uint32_t run = 0) {
    v1::BackendLoad l;
    l.set_group(group);
    l.set_address(address);
    l.set_requests(requests);
    l.set_failures(failures);
    l.set_consecutive_failures(run);
    const int64_t nanos = absl::ToInt64Nanoseconds(latency_sum);
    l.mutable_latency_sum()->set_seconds(nanos / 1000000000);
    l.mutable_latency_sum()->set_nanos(
        static_cast<int32_t>(nanos % 1000000000));
    return l;
  }

  // One ReportLoad call with one report; returns its status.
  grpc::Status Report(const std::string& token, const std::string& reporter,
                      const std::vector<v1::BackendLoad>& loads,
                      v1::ReportLoadResponse* response = nullptr) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) {
      c.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    }
    v1::ReportLoadResponse ignored;
    auto writer =
        stub_->ReportLoad(&c, response != nullptr ? response : &ignored);
    v1::LoadReport r;
    r.set_reporter(reporter);
    for (const auto& l : loads) {
      *r.add_loads() = l;
    }
    writer->Write(r);
    writer->WritesDone();
    return writer->Finish();
  }

  std::map<std::string, int> Picks(const std::string& group, int n) {
    std::map<std::string, int> counts;
    for (int i = 0; i < n; ++i) {
      grpc::ClientContext c;
      v1::PickRequest r;
      r.set_group(group);
      v1::PickResponse resp;
      EXPECT_TRUE(stub_->Pick(&c, r, &resp).ok());
      if (resp.backends_size() > 0) {
        counts[resp.backends(0).address()]++;
      }
    }
    return counts;
  }

  bool MetricsContain(const std::string& series) {
    return server_->metrics().Render().find(series) != std::string::npos;
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
};

constexpr char kWeb[] = R"(  - name: web
    policy: {name: least_time, metric: last_byte}
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002, 127.0.0.1:9003, 127.0.0.1:9004]
)";
const char* const kWebBackends[] = {"127.0.0.1:9001", "127.0.0.1:9002",
                                    "127.0.0.1:9003", "127.0.0.1:9004"};

void ReportAuthTest::ExpectReportsWithoutACredentialCountAs(
    const std::string& reporter) {
  v1::ReportLoadResponse response;
  ASSERT_TRUE(Report("", "pod-1",
                     {Load("web", kWebBackends[0], 1, absl::Milliseconds(1))},
                     &response)
                  .ok());
  EXPECT_EQ(response.accepted(), 1u);
  EXPECT_TRUE(MetricsContain(absl::StrCat(
      R"(aside_load_reporter_observations_total{group="web",protocol="aside",reporter=")",
      reporter, R"("} 1)")));
  ASSERT_TRUE(Report(kLiarToken, "pod-2",
                     {Load("web", kWebBackends[0], 1, absl::Milliseconds(1))})
                  .ok());
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reporter_observations_total{group="web",protocol="aside",reporter="liar"} 1)"));
}

TEST_F(ReportAuthTest, ByDefaultReportsNeedAReportCredential) {
  Start("", kWeb);
  const std::vector<v1::BackendLoad> loads = {
      Load("web", kWebBackends[0], 1, absl::Milliseconds(1))};

  grpc::Status anonymous = Report("", "pod-1", loads);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(anonymous.error_message(), HasSubstr("Bearer"));
  EXPECT_EQ(Report("not-a-token-at-all-0000", "pod-1", loads).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status reader = Report(kReadToken, "pod-1", loads);
  EXPECT_EQ(reader.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(reader.error_message(), HasSubstr("'report' required"));

  v1::ReportLoadResponse response;
  ASSERT_TRUE(Report(kHonestTokens[0], "pod-1", loads, &response).ok());
  EXPECT_EQ(response.accepted(), 1u);
  ASSERT_TRUE(Report(kAdminToken, "pod-2", loads, &response).ok());
  EXPECT_EQ(response.accepted(), 1u);

  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reports_refused_total{protocol="aside",reason="unauthenticated"} 2)"));
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reports_refused_total{protocol="aside",reason="permission_denied"} 1)"));
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reporter_observations_total{group="web",protocol="aside",reporter="honest-1"} 1)"));
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reporter_observations_total{group="web",protocol="aside",reporter="token:1"} 1)"));
  // A report token is no Admin credential.
  EXPECT_EQ(RoleGrants(AdminRole::kReport, AdminRole::kRead) ||
                RoleGrants(AdminRole::kReport, AdminRole::kAdmin) ||
                RoleGrants(AdminRole::kRead, AdminRole::kReport),
            false);
}

TEST_F(ReportAuthTest, OpenModeTakesAnonymousReports) {
  Start("load_reports: {auth: open}\n", kWeb);
  ExpectReportsWithoutACredentialCountAs("anonymous");
}

TEST_F(ReportAuthTest, TrustedNetworksTakeReportsWithoutACredential) {
  // Loopback is trusted.
  Start(
      "load_reports: {auth: token, trusted_networks: [\"10.0.0.0/8\", "
      "127.0.0.0/8]}\n",
      kWeb);
  ExpectReportsWithoutACredentialCountAs("trusted_network");
}

TEST_F(ReportAuthTest, OutsideTheTrustedNetworksACredentialIsStillNeeded) {
  Start("load_reports: {trusted_networks: [\"10.0.0.0/8\", \"::1\"]}\n", kWeb);
  const grpc::Status s = Report(
      "", "pod-1", {Load("web", kWebBackends[0], 1, absl::Milliseconds(1))});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << s.error_message();
}

TEST(TrustedNetworksConfigTest, BadNetworksAreNamedWithTheirLine) {
  absl::StatusOr<ServerConfig> config = ParseConfig(
      "load_reports:\n  trusted_networks: [10.0.0.0/8, 10.0.0.1/8]\n",
      "t.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("t.yaml:2:34: load_reports.trusted_networks[1]: "
                        "'10.0.0.1/8' has host bits set past /8"));
  EXPECT_THAT(
      ParseConfig("load_reports: {trusted_networks: 10.0.0.0/8}\n", "t.yaml")
          .status()
          .message(),
      HasSubstr("expected a list of networks"));
}

TEST_F(ReportAuthTest, GrpclbStatsAndLrsNeedACredentialToo) {
  Start("grpclb: {client_stats_report_interval: 1s}\n", kWeb);
  // grpclb: the server list still comes; the stats are dropped and counted.
  {
    auto lb = grpc::lb::v1::LoadBalancer::NewStub(channel_);
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = lb->BalanceLoad(&c);
    grpc::lb::v1::LoadBalanceRequest request;
    request.mutable_initial_request()->set_name("web");
    ASSERT_TRUE(stream->Write(request));
    grpc::lb::v1::LoadBalanceResponse response;
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_TRUE(response.has_initial_response());
    ASSERT_TRUE(stream->Read(&response));
    ASSERT_TRUE(response.has_server_list());
    EXPECT_EQ(response.server_list().servers_size(), 4);
    request.Clear();
    request.mutable_client_stats()->set_num_calls_started(1000);
    request.mutable_client_stats()->set_num_calls_finished(1000);
    ASSERT_TRUE(stream->Write(request));
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  EXPECT_EQ(server_->loads().ClientStats("web").calls_started, 0u);
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reports_refused_total{protocol="grpclb",reason="unauthenticated"} 1)"));

  // LRS: the stream ends with the refusal.
  {
    auto lrs =
        envoy::service::load_stats::v3::LoadReportingService::NewStub(channel_);
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = lrs->StreamLoadStats(&c);
    envoy::service::load_stats::v3::LoadStatsRequest request;
    request.mutable_node()->set_id("node-1");
    stream->Write(request);
    stream->WritesDone();
    envoy::service::load_stats::v3::LoadStatsResponse response;
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reports_refused_total{protocol="lrs",reason="unauthenticated"} 1)"));
}

TEST_F(ReportAuthTest, OneLiarCannotSteerLeastTimeButHonestReportsDo) {
  Start("", kWeb);
  // Three honest reporters see every backend at 20 ms: a baseline, then
  // 100 requests each.
  auto honest = [&](uint64_t total, absl::Duration slow_9004_sum) {
    for (const char* token : kHonestTokens) {
      std::vector<v1::BackendLoad> loads;
      for (const char* address : kWebBackends) {
        const bool slow = std::string(address) == kWebBackends[3] &&
                          slow_9004_sum > absl::ZeroDuration();
        loads.push_back(
            Load("web", address, total,
                 slow ? slow_9004_sum
                      : absl::Milliseconds(20) * static_cast<int64_t>(total)));
      }
      v1::ReportLoadResponse response;
      ASSERT_TRUE(Report(token, "pod", loads, &response).ok());
      ASSERT_EQ(response.accepted(), 4u);
    }
  };
  honest(0, absl::ZeroDuration());
  honest(100, absl::ZeroDuration());

  // The liar claims a million requests a report: 9001 answers in a
  // microsecond, the others take ten seconds.
  for (uint64_t round = 0; round <= 20; ++round) {
    const uint64_t n = round * 1000000;
    std::vector<v1::BackendLoad> loads;
    for (const char* address : kWebBackends) {
      const bool fast = std::string(address) == kWebBackends[0];
      loads.push_back(Load("web", address, n,
                           (fast ? absl::Microseconds(1) : absl::Seconds(10)) *
                               static_cast<int64_t>(n)));
    }
    ASSERT_TRUE(Report(kLiarToken, "liar-pod", loads).ok());
  }
  // Picks stay spread over all four (equal estimates tie at random).
  std::map<std::string, int> picks = Picks("web", 300);
  for (const char* address : kWebBackends) {
    EXPECT_GE(picks[address], 30) << address;
  }
  EXPECT_TRUE(MetricsContain(
      R"(aside_load_reporter_observations_total{group="web",protocol="aside",reporter="liar"} 84)"));

  // The honest majority sees 9004 slow down to 200 ms: it stops being
  // picked, and the liar still cannot pull traffic to 9001.
  honest(200, absl::Milliseconds(20) * 100 + absl::Milliseconds(200) * 100);
  picks = Picks("web", 300);
  EXPECT_EQ(picks.count(kWebBackends[3]), 0u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(picks[kWebBackends[i]], 40) << kWebBackends[i];
  }
}

constexpr char kTen[] = R"(  - name: ten
    policy: round_robin
    health_check: {kind: none}
    panic_threshold: 0
    outlier_detection: {consecutive_failures: 3, max_ejection_percent: 100}
    backends: [127.0.0.1:9101, 127.0.0.1:9102, 127.0.0.1:9103, 127.0.0.1:9104,
               127.0.0.1:9105, 127.0.0.1:9106, 127.0.0.1:9107, 127.0.0.1:9108,
               127.0.0.1:9109, 127.0.0.1:9110]
)";

std::vector<v1::BackendLoad> TenLoads(uint64_t requests, uint64_t failures,
                                      uint32_t run) {
  std::vector<v1::BackendLoad> loads;
  for (int i = 1; i <= 10; ++i) {
    v1::BackendLoad l;
    l.set_group("ten");
    l.set_address(absl::StrCat("127.0.0.1:91", i < 10 ? "0" : "", i));
    l.set_requests(requests);
    l.set_failures(failures);
    l.set_consecutive_failures(run);
    loads.push_back(l);
  }
  return loads;
}

TEST_F(ReportAuthTest, ReportsNeverEjectEveryBackend) {
  Start("load_reports: {auth: open}\n", kTen);
  // The only reporter says every backend fails: at most nine of ten go,
  // even at max_ejection_percent 100.
  ASSERT_TRUE(Report("", "pod-1", TenLoads(0, 0, 0)).ok());
  ASSERT_TRUE(Report("", "pod-1", TenLoads(50, 50, 50)).ok());
  GroupPtr ten = server_->groups().Find("ten");
  EXPECT_EQ(ten->Ejections().size(), 9u);
  // The ejections reach the table in a rebuild: wait for it, bounded.
  for (int i = 0; i < 50; ++i) {
    const uint64_t rebuilds = ten->rebuilds();
    if (ten->table()->ready_count() == 1) {
      break;
    }
    ASSERT_TRUE(ten->AwaitRebuilds(rebuilds + 1, absl::Seconds(10)));
  }
  EXPECT_EQ(ten->table()->ready_count(), 1u);
  const std::map<std::string, int> picks = Picks("ten", 20);
  ASSERT_EQ(picks.size(), 1u);
  EXPECT_EQ(picks.begin()->second, 20);
}

TEST_F(ReportAuthTest, OneReporterAloneDoesNotEjectWhenOthersSeeNoFailures) {
  Start("", kTen);
  for (const char* token : kHonestTokens) {
    ASSERT_TRUE(Report(token, "pod", TenLoads(0, 0, 0)).ok());
    ASSERT_TRUE(Report(token, "pod", TenLoads(100, 0, 0)).ok());
  }
  ASSERT_TRUE(Report(kLiarToken, "liar", TenLoads(0, 0, 0)).ok());
  for (uint64_t round = 1; round <= 5; ++round) {
    ASSERT_TRUE(
        Report(kLiarToken, "liar", TenLoads(round * 1000, round * 1000, 1000))
            .ok());
  }
  EXPECT_TRUE(server_->groups().Find("ten")->Ejections().empty());
  // When the honest reporters see the failures too, the backends go (as
  // many as the cap allows).
  for (const char* token : kHonestTokens) {
    ASSERT_TRUE(Report(token, "pod", TenLoads(110, 10, 10)).ok());
  }
  EXPECT_EQ(server_->groups().Find("ten")->Ejections().size(), 9u);
}

TEST(LoadAggregatorBoundsTest, CapWeightsWaterFills) {
  // One heavy weight among four is cut to a quarter of the total.
  std::vector<double> w = LoadAggregator::CapWeights({1e6, 100, 100, 100}, 0.3);
  EXPECT_NEAR(w[0] / (w[0] + 300), 0.3, 1e-9);
  EXPECT_DOUBLE_EQ(w[1], 100);
  // Too few for the cap: all weigh the same.
  w = LoadAggregator::CapWeights({1e6, 1}, 0.25);
  EXPECT_EQ(w, (std::vector<double>{1, 1}));
  // Within the cap: unchanged.
  w = LoadAggregator::CapWeights({10, 10, 10, 10, 10}, 0.25);
  EXPECT_EQ(w, (std::vector<double>{10, 10, 10, 10, 10}));
  w = LoadAggregator::CapWeights({5, 1}, 1.0);
  EXPECT_EQ(w, (std::vector<double>{5, 1}));
}

TEST(LoadAggregatorBoundsTest, WeightedMedianIgnoresAMinorityLiar) {
  EXPECT_DOUBLE_EQ(
      LoadAggregator::WeightedMedian({{20, 1}, {20, 1}, {20, 1}, {0.001, 1}}),
      20);
  EXPECT_DOUBLE_EQ(LoadAggregator::WeightedMedian({{10, 1}, {30, 1}}), 20);
  EXPECT_DOUBLE_EQ(LoadAggregator::WeightedMedian({{10, 3}, {30, 1}}), 10);
  EXPECT_DOUBLE_EQ(LoadAggregator::WeightedMedian({{7, 1}}), 7);
  EXPECT_TRUE(std::isnan(LoadAggregator::WeightedMedian({})));
  EXPECT_TRUE(std::isnan(LoadAggregator::WeightedMedian({{1, 0}})));
}

TEST(ReportAuthPeerTest, PeerHostDropsThePort) {
  EXPECT_EQ(ReportAuth::PeerHost("ipv4:10.0.0.1:5000"), "10.0.0.1");
  EXPECT_EQ(ReportAuth::PeerHost("ipv6:[::1]:5000"), "::1");
  EXPECT_EQ(ReportAuth::PeerHost("unix:/tmp/s"), "unix");
}

TEST(ReportAuthConfigTest, SettingsAreCheckedWithTheirLine) {
  ASSERT_OK_AND_ASSIGN(
      ServerConfig c,
      ParseConfig("load_reports: {auth: open, max_reporter_share: 0.5}\n"
                  "limits: {handshake_timeout: 2s}\n",
                  "a.yaml"));
  EXPECT_TRUE(c.load_reports_open);
  EXPECT_DOUBLE_EQ(c.load_reports_max_reporter_share, 0.5);
  EXPECT_EQ(c.handshake_timeout, absl::Seconds(2));
  ASSERT_OK_AND_ASSIGN(ServerConfig d, ParseConfig("{}\n", "d.yaml"));
  EXPECT_FALSE(d.load_reports_open);

  auto bad = ParseConfig("load_reports:\n  auth: anyone\n", "b.yaml");
  EXPECT_THAT(bad.status().message(),
              HasSubstr("b.yaml:2:9: load_reports.auth: unknown mode"));
  bad = ParseConfig("load_reports: {max_reporter_share: 0}\n", "b.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("out of range 0.01..1"));
  bad = ParseConfig("limits: {handshake_timeout: 1ms}\n", "b.yaml");
  EXPECT_THAT(bad.status().message(),
              HasSubstr("limits.handshake_timeout: out of range"));
  bad = ParseConfig(
      "admin:\n  allowed_identities: [{identity: a, role: reporter}]\n",
      "b.yaml");
  EXPECT_THAT(bad.status().message(), HasSubstr("admin, read, report"));
}

TEST(ReportAuthTokenFileTest, TokensMayBeNamed) {
  aside::testing::TempDir dir;
  const std::string path =
      dir.WriteSecret("tokens",
                      "a-token-0123456789abc report stubs-eu\n"
                      "b-token-0123456789abc admin\n");
  ASSERT_OK_AND_ASSIGN(auto auth, AdminAuth::Create(path, {}));
  EXPECT_EQ(auth->RoleOfToken("a-token-0123456789abc"), AdminRole::kReport);
  auto bad = AdminAuth::Create(
      dir.WriteFile("bad", "a-token-0123456789abc report bad\"name\n"), {});
  EXPECT_THAT(bad.status().message(), HasSubstr(":1: name"));
}

}  // namespace
}  // namespace aside::server
