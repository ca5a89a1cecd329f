// One load view across the fleet (docs/operations.md): two real
// aside-server processes on loopback, B subscribed to A through
// `fleet.peers` (no etcd: the peer list is static). Load reported only to
// A moves B's server-side least_time picks and the grpclb drops B serves,
// and once A is killed B stops counting it after the grace.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/client.h"
#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Context;
using ::aside::testing::Eventually;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kAdminToken[] = "load-admin-token";
constexpr char kReportToken[] = "load-report-token";
constexpr char kSlow[] = "127.0.0.1:9001";
constexpr char kFast[] = "127.0.0.1:9002";

v1::BackendLoad Load(const std::string& group, const std::string& address,
                     uint64_t requests, absl::Duration latency_sum,
                     uint64_t in_flight = 0) {
  v1::BackendLoad l;
  l.set_group(group);
  l.set_address(address);
  l.set_requests(requests);
  l.set_in_flight(in_flight);
  l.mutable_latency_sum()->set_seconds(absl::ToInt64Seconds(latency_sum));
  l.mutable_latency_sum()->set_nanos(static_cast<int32_t>(
      absl::ToInt64Nanoseconds(latency_sum) % 1'000'000'000));
  return l;
}

class FleetLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = dir_.WriteSecret(
        "tokens",
        absl::StrCat(kAdminToken, " admin\n", kReportToken, " report\n"));
    peer_token_ =
        dir_.WriteSecret("peer-token", absl::StrCat(kReportToken, "\n"));
    a_ = Start("a", "");
    b_ = Start("b", absl::StrCat("  peers: [", a_.target(), "]\n"));
    lb_b_ = v1::LoadBalancer::NewStub(
        grpc::CreateChannel(b_.target(), grpc::InsecureChannelCredentials()));
    admin_b_ = v1::Admin::NewStub(
        grpc::CreateChannel(b_.target(), grpc::InsecureChannelCredentials()));
    lb_a_ = v1::LoadBalancer::NewStub(
        grpc::CreateChannel(a_.target(), grpc::InsecureChannelCredentials()));
  }

  RunningServer Start(const std::string& name, const std::string& peers) {
    const std::string config = dir_.WriteFile(
        absl::StrCat(name, ".yaml"),
        absl::StrCat("admin: {token_file: ", tokens_, "}\n",
                     "fleet:\n  load_share_interval: 200ms\n",
                     "  peer_token_file: ", peer_token_, "\n", peers, R"(
groups:
  - name: lt
    policy: {name: least_time, metric: last_byte}
    health_check: {kind: none}
    backends: [127.0.0.1:9001, 127.0.0.1:9002]
  - name: busy
    health_check: {kind: none}
    grpclb: {max_requests_per_second: 5}
    backends: [127.0.0.1:9101, 127.0.0.1:9102]
)"));
    absl::StatusOr<RunningServer> s = aside::testing::StartServer(
        absl::StrCat(dir_.path(), "/state-", name), {"--config", config});
    EXPECT_OK(s.status());
    return s.ok() ? *std::move(s) : RunningServer{};
  }

  // One ReportLoad call to A as reporter `reporter`.
  void ReportToA(const std::vector<v1::BackendLoad>& loads,
                 const std::string& reporter = "pod-1") {
    std::unique_ptr<grpc::ClientContext> c = Context(kReportToken);
    v1::ReportLoadResponse response;
    auto writer = lb_a_->ReportLoad(c.get(), &response);
    v1::LoadReport r;
    r.set_reporter(reporter);
    for (const auto& l : loads) {
      *r.add_loads() = l;
    }
    ASSERT_TRUE(writer->Write(r));
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok());
    ASSERT_EQ(response.accepted(), static_cast<uint32_t>(loads.size()))
        << (response.rejected_size() > 0 ? response.rejected(0).reason() : "");
  }

  // Where B's server-side picks of `group` land, out of `n`.
  std::map<std::string, int> PicksOnB(const std::string& group, int n) {
    std::map<std::string, int> out;
    for (int i = 0; i < n; ++i) {
      v1::PickRequest req;
      req.set_group(group);
      v1::PickResponse resp;
      if (lb_b_->Pick(Context().get(), req, &resp).ok()) {
        ++out[resp.backends(0).address()];
      }
    }
    return out;
  }

  // B's view of one backend of "lt" (none when it has no load for it).
  std::optional<v1::LoadView> ViewOnB(const std::string& address) {
    v1::GetGroupRequest req;
    req.set_name("lt");
    v1::Group g;
    if (!admin_b_->GetGroup(Context(kAdminToken).get(), req, &g).ok()) {
      return std::nullopt;
    }
    for (const v1::TableBackend& tb : g.state()) {
      if (tb.backend().address() == address && tb.has_load()) {
        return tb.load();
      }
    }
    return std::nullopt;
  }

  std::string MetricsOf(const RunningServer& s) {
    absl::StatusOr<aside::testing::HttpResponse> r =
        aside::testing::HttpGet("127.0.0.1", s.metrics_port, "/metrics");
    return r.ok() ? r->body : "";
  }

  TempDir dir_;
  std::string tokens_;
  std::string peer_token_;
  RunningServer a_;
  RunningServer b_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_a_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_b_;
  std::unique_ptr<v1::Admin::Stub> admin_b_;
};

TEST_F(FleetLoadTest, ReportsToAMoveLeastTimePicksOnB) {
  ASSERT_NE(a_.grpc_port, 0);
  ASSERT_NE(b_.grpc_port, 0);
  const std::string age =
      absl::StrCat("aside_fleet_load_view_age_seconds{peer=\"", a_.target());
  ReportToA({Load("lt", kSlow, 0, absl::ZeroDuration()),
             Load("lt", kFast, 0, absl::ZeroDuration())});
  // Rounds of 100 requests: first 9001 slow (50 ms) and 9002 fast (1 ms),
  // then the other way round; B's picks follow each time.
  uint64_t total = 0;
  absl::Duration slow_sum, fast_sum;
  auto round = [&](absl::Duration slow, absl::Duration fast) {
    total += 100;
    slow_sum += 100 * slow;
    fast_sum += 100 * fast;
    ReportToA({Load("lt", kSlow, total, slow_sum),
               Load("lt", kFast, total, fast_sum)});
  };
  auto only = [&](const char* address) {
    const auto picks = PicksOnB("lt", 20);
    return picks.size() == 1 && picks.begin()->first == address;
  };
  EXPECT_TRUE(Eventually([&] {
    round(absl::Milliseconds(50), absl::Milliseconds(1));
    return only(kFast);
  }));
  EXPECT_TRUE(Eventually([&] {
    round(absl::Milliseconds(1), absl::Milliseconds(50));
    return only(kSlow);
  }));
  const std::string metrics = MetricsOf(b_);
  EXPECT_THAT(metrics, HasSubstr(age));
  EXPECT_THAT(MetricsOf(a_), HasSubstr("aside_fleet_load_view_subscribers 1"));
}

TEST_F(FleetLoadTest, StubLoadOnADropsGrpclbCallsServedByB) {
  // A grpclb client of B: its lists have no drops while the group is idle.
  auto lb = grpc::lb::v1::LoadBalancer::NewStub(
      grpc::CreateChannel(b_.target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  auto stream = lb->BalanceLoad(&context);
  grpc::lb::v1::LoadBalanceRequest initial;
  initial.mutable_initial_request()->set_name("busy.example:443");
  ASSERT_TRUE(stream->Write(initial));
  auto drops = [](const grpc::lb::v1::LoadBalanceResponse& r) {
    int n = 0;
    for (const auto& s : r.server_list().servers()) {
      n += s.drop() ? 1 : 0;
    }
    return n;
  };
  grpc::lb::v1::LoadBalanceResponse response;
  ASSERT_TRUE(stream->Read(&response));  // the initial response
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_server_list());
  EXPECT_EQ(drops(response), 0);

  // An Aside stub connected only to A calls the group far above its cap
  // of 5 requests a second and reports to A.
  ClientOptions options;
  options.targets = {a_.target()};
  options.report_interval = absl::Milliseconds(100);
  options.report_token = kReportToken;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client, Client::Create(options));
  ClientGroup* busy = client->Group("busy");
  std::atomic<bool> done{false};
  std::thread caller([&] {
    while (!done.load()) {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<PickHandle> p = busy->Pick();
        if (p.ok()) {
          p->Done(true);
        }
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  // B's next lists carry overload drops (bounded by the stream deadline).
  bool dropped = false;
  while (!dropped && stream->Read(&response)) {
    dropped = response.has_server_list() && drops(response) > 0;
  }
  done = true;
  caller.join();
  EXPECT_TRUE(dropped);
  context.TryCancel();
  stream->Finish().IgnoreError();
  EXPECT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.reports_sent > 0; },
      absl::Seconds(1)));
}

TEST_F(FleetLoadTest, AKilledPeerStopsCountingAfterTheGrace) {
  ReportToA({Load("lt", kSlow, 0, absl::ZeroDuration(), 4)});
  ASSERT_TRUE(Eventually([&] {
    std::optional<v1::LoadView> v = ViewOnB(kSlow);
    return v.has_value() && v->in_flight() == 4 && v->reporters() == 1;
  }));
  const std::string age =
      absl::StrCat("aside_fleet_load_view_age_seconds{peer=\"", a_.target());
  EXPECT_THAT(MetricsOf(b_), HasSubstr(age));
  a_.process->Signal(SIGKILL);
  // The grace is 5 share intervals (1 s); allow generously for the check.
  ASSERT_TRUE(Eventually(
      [&] {
        std::optional<v1::LoadView> v = ViewOnB(kSlow);
        return !v.has_value() || (v->in_flight() == 0 && v->reporters() == 0);
      },
      absl::Seconds(10)));
  // B's own reporters count as before.
  std::unique_ptr<grpc::ClientContext> c = Context(kReportToken);
  v1::ReportLoadResponse response;
  auto writer = lb_b_->ReportLoad(c.get(), &response);
  v1::LoadReport r;
  r.set_reporter("pod-b");
  *r.add_loads() = Load("lt", kSlow, 0, absl::ZeroDuration(), 2);
  ASSERT_TRUE(writer->Write(r));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  std::optional<v1::LoadView> v = ViewOnB(kSlow);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->in_flight(), 2u);
}

TEST_F(FleetLoadTest, EntriesForAGroupBLearnsLaterReachItUnchanged) {
  // "late" exists on A only: B refuses A's entries for it.
  auto admin_a = v1::Admin::NewStub(
      grpc::CreateChannel(a_.target(), grpc::InsecureChannelCredentials()));
  auto create = [](v1::Admin::Stub* admin) {
    v1::CreateGroupRequest req;
    req.mutable_group()->set_name("late");
    req.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    req.mutable_group()->add_backends()->set_address("127.0.0.1:9301");
    v1::Group out;
    return admin->CreateGroup(Context(kAdminToken).get(), req, &out);
  };
  ASSERT_TRUE(create(admin_a.get()).ok());
  ReportToA({Load("late", "127.0.0.1:9301", 0, absl::ZeroDuration(), 6)});
  auto in_flight_on_b = [&]() -> int64_t {
    v1::GetGroupRequest req;
    req.set_name("late");
    v1::Group g;
    if (!admin_b_->GetGroup(Context(kAdminToken).get(), req, &g).ok()) {
      return -1;
    }
    for (const v1::TableBackend& tb : g.state()) {
      if (tb.has_load()) {
        return tb.load().in_flight();
      }
    }
    return 0;
  };
  ASSERT_TRUE(Eventually([&] {
    return MetricsOf(b_).find("aside_fleet_load_view_rejected_total 0") ==
           std::string::npos;
  })) << "B never refused A's entries for the unknown group";
  // The group appears on B; A's gauge never changes, so only a fresh
  // snapshot (asked for after the refusal) brings it over.
  ASSERT_TRUE(create(admin_b_.get()).ok());
  EXPECT_TRUE(Eventually([&] { return in_flight_on_b() == 6; }))
      << "in flight on B: " << in_flight_on_b();
}

}  // namespace
}  // namespace aside
