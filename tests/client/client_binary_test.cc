// The stub against the real aside-server binary on loopback: local picks
// follow the server's tables and policies, Admin changes reach every stub,
// unknown and deleted groups, and fail-static through SIGKILL and SIGSTOP.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "client/client.h"
#include "tests/client/client_helpers.h"
#include "tests/client/log_sink.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Admin;
using ::aside::testing::kClientTestConfig;
using ::aside::testing::kClientTestToken;
using ::aside::testing::LogSink;
using ::aside::testing::RunningServer;
using ::aside::testing::StartServer;
using ::aside::testing::StatusIs;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

ClientOptions StubOptions(const std::string& target) {
  ClientOptions o;
  o.targets = {target};
  o.report_interval = absl::Milliseconds(200);
  return o;
}

std::map<std::string, int> Count(ClientGroup* group, int picks) {
  std::map<std::string, int> counts;
  for (int i = 0; i < picks; ++i) {
    absl::StatusOr<PickHandle> pick = group->Pick();
    if (!pick.ok()) {
      counts[pick.status().ToString()]++;
      continue;
    }
    counts[std::string(pick->address())]++;
    pick->Done(true);
  }
  return counts;
}

TEST(ClientBinaryTest, LocalPicksFollowTheTableAndAdminChangesReachEveryStub) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kClientTestConfig),
                   "--admin-token-file",
                   dir.WriteSecret(
                       "tokens", absl::StrCat(kClientTestToken, " admin\n"))}));
  std::vector<std::unique_ptr<Client>> stubs;
  for (int i = 0; i < 3; ++i) {
    ClientOptions o = StubOptions(server.target());
    o.groups = {"rr", "wrr"};
    ASSERT_OK_AND_ASSIGN(auto stub, Client::Create(o));
    stubs.push_back(std::move(stub));
  }
  Admin admin(server.target());
  ASSERT_OK_AND_ASSIGN(v1::Group rr, admin.Get("rr"));
  ASSERT_OK_AND_ASSIGN(v1::Group wrr, admin.Get("wrr"));
  for (auto& stub : stubs) {
    ASSERT_TRUE(stub->Group("rr")->WaitForGeneration(rr.generation(),
                                                     absl::Seconds(10)));
    ASSERT_TRUE(stub->Group("wrr")->WaitForGeneration(wrr.generation(),
                                                      absl::Seconds(10)));
  }

  // Round robin: exact thirds. Weighted round robin 5:1:1: exact counts
  // over whole cycles.
  auto counts = Count(stubs[0]->Group("rr"), 300);
  EXPECT_EQ(counts["127.0.0.1:9001"], 100);
  EXPECT_EQ(counts["127.0.0.1:9002"], 100);
  EXPECT_EQ(counts["127.0.0.1:9003"], 100);
  counts = Count(stubs[1]->Group("wrr"), 700);
  EXPECT_EQ(counts["127.0.0.1:9101"], 500);
  EXPECT_EQ(counts["127.0.0.1:9102"], 100);
  EXPECT_EQ(counts["127.0.0.1:9103"], 100);
  // Metadata and locality pass through.
  bool saw = false;
  for (int i = 0; i < 7 && !saw; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle p, stubs[1]->Group("wrr")->Pick());
    if (p.address() == "127.0.0.1:9101") {
      saw = true;
      EXPECT_EQ(p.metadata().at("version"), "v2");
      EXPECT_EQ(p.locality().zone, "a");
    }
    p.Done(true);
  }
  EXPECT_TRUE(saw);

  // An Admin-created group, drained through Admin: the drain reaches every
  // stub, and they all converge to the same generation.
  ASSERT_OK(admin.Create("payments", {"127.0.0.1:9201", "127.0.0.1:9202"}));
  ASSERT_OK_AND_ASSIGN(v1::Group drained,
                       admin.Drain("payments", "127.0.0.1:9201", true));
  for (auto& stub : stubs) {
    ClientGroup* g = stub->Group("payments");
    ASSERT_TRUE(g->WaitForGeneration(drained.generation(), absl::Seconds(10)));
    counts = Count(g, 50);
    EXPECT_EQ(counts["127.0.0.1:9202"], 50) << "the drained backend was picked";
  }
  for (auto& stub : stubs) {
    EXPECT_EQ(stub->Group("payments")->generation(), drained.generation());
    EXPECT_EQ(stub->Group("payments")->server_id(),
              stubs[0]->Group("payments")->server_id());
  }
  ASSERT_OK_AND_ASSIGN(v1::Group undrained,
                       admin.Drain("payments", "127.0.0.1:9201", false));
  ASSERT_TRUE(
      stubs[2]
          ->Group("payments")
          ->WaitForGeneration(undrained.generation(), absl::Seconds(10)));
  counts = Count(stubs[2]->Group("payments"), 100);
  EXPECT_EQ(counts["127.0.0.1:9201"], 50);
  EXPECT_EQ(counts["127.0.0.1:9202"], 50);

  // Draining everything: a clear UNAVAILABLE, locally.
  ASSERT_OK(admin.Drain("payments", "127.0.0.1:9201", true));
  ASSERT_OK_AND_ASSIGN(v1::Group none,
                       admin.Drain("payments", "127.0.0.1:9202", true));
  ASSERT_TRUE(stubs[0]
                  ->Group("payments")
                  ->WaitForGeneration(none.generation(), absl::Seconds(10)));
  EXPECT_THAT(
      stubs[0]->Group("payments")->Pick(),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("group 'payments'")));
}

TEST(ClientBinaryTest, UnknownGroupsFailWithNotFoundUntilCreated) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kClientTestConfig),
                   "--admin-token-file",
                   dir.WriteSecret(
                       "tokens", absl::StrCat(kClientTestToken, " admin\n"))}));
  Admin admin(server.target());
  ASSERT_OK(admin.Create("extra", {"127.0.0.1:9311", "127.0.0.1:9312"}));
  LogSink log;
  ClientOptions o = StubOptions(server.target());
  o.groups = {"rr", "later", "extra"};
  o.log = log.fn();
  ASSERT_OK_AND_ASSIGN(auto stub, Client::Create(o));
  ClientGroup* later = stub->Group("later");
  ClientGroup* rr = stub->Group("rr");
  const absl::Time start = absl::Now();
  EXPECT_THAT(later->Pick(), StatusIs(absl::StatusCode::kNotFound,
                                      HasSubstr("group 'later'")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  // The other group is served meanwhile, on the same stream.
  ASSERT_OK(rr->Pick());
  const uint64_t attempts = stub->stats().watch_attempts;

  ASSERT_OK(admin.Create("later", {"127.0.0.1:9301"}));
  ASSERT_OK_AND_ASSIGN(v1::Group created, admin.Get("later"));
  ASSERT_TRUE(
      later->WaitForGeneration(created.generation(), absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(PickHandle pick, later->Pick());
  EXPECT_EQ(pick.address(), "127.0.0.1:9301");
  pick.Done(true);

  // Deleted on the server: the last table keeps serving, and the stub says
  // the group was removed.
  ASSERT_OK(admin.Delete("later"));
  ASSERT_TRUE(log.Await("event=group.removed group 'later'"));
  EXPECT_TRUE(later->removed());
  ASSERT_OK_AND_ASSIGN(PickHandle still, later->Pick());
  EXPECT_EQ(still.address(), "127.0.0.1:9301");
  still.Done(true);
  ASSERT_OK(rr->Pick());

  // Other groups' changes keep arriving, and nothing above restarted the
  // stream.
  ASSERT_OK_AND_ASSIGN(v1::Group drained,
                       admin.Drain("extra", "127.0.0.1:9311", true));
  ASSERT_TRUE(stub->Group("extra")->WaitForGeneration(drained.generation(),
                                                      absl::Seconds(10)));
  EXPECT_EQ(stub->stats().watch_attempts, attempts);
}

// The value of a metric sample line `name{labels} value` (-1 if absent).
double MetricValue(const std::string& body, const std::string& series) {
  size_t at = body.find(series + " ");
  if (at == std::string::npos) {
    return -1;
  }
  return std::stod(body.substr(at + series.size() + 1));
}

constexpr char kReportToken[] = "client-test-report-token-0123";

TEST(ClientBinaryTest, LoadReportsReachTheServer) {
  TempDir dir;
  // The server's default takes reports only from a `report` credential.
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(
          dir.path() + "/state",
          {"--config", dir.WriteFile("aside.yaml", kClientTestConfig),
           "--admin-token-file",
           dir.WriteSecret("tokens",
                           absl::StrCat(kClientTestToken, " admin\n",
                                        kReportToken, " report stubs\n"))}));
  ClientOptions o = StubOptions(server.target());
  o.reporter = "stub-1";
  o.report_token = kReportToken;
  o.groups = {"rr"};
  ASSERT_OK_AND_ASSIGN(auto stub, Client::Create(o));
  ClientGroup* rr = stub->Group("rr");
  Admin admin(server.target());
  ASSERT_OK_AND_ASSIGN(v1::Group before, admin.Get("rr"));
  ASSERT_TRUE(rr->WaitForGeneration(before.generation(), absl::Seconds(10)));
  for (int i = 0; i < 30; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, rr->Pick());
    pick.Done(i % 10 != 0);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  double accepted = 0;
  double rejected = -1;
  uint32_t reporters = 0;
  double rps = 0;
  while (absl::Now() < deadline) {
    // Keep traffic going: the server takes a reporter's first cumulative
    // report as its baseline and counts what comes after it.
    for (int i = 0; i < 5; ++i) {
      ASSERT_OK_AND_ASSIGN(PickHandle pick, rr->Pick());
      pick.Done(true);
    }
    auto metrics =
        aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
    ASSERT_OK(metrics);
    accepted = MetricValue(metrics->body,
                           R"(aside_load_reports_total{result="accepted"})");
    rejected = MetricValue(metrics->body,
                           R"(aside_load_reports_total{result="rejected"})");
    ASSERT_OK_AND_ASSIGN(v1::Group g, admin.Get("rr"));
    reporters = 0;
    rps = 0;
    for (const v1::TableBackend& b : g.state()) {
      reporters = std::max(reporters, b.load().reporters());
      rps += b.load().requests_per_second();
    }
    if (accepted >= 3 && reporters >= 1 && rps > 0) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GE(accepted, 3) << "one observation per backend with traffic";
  EXPECT_LE(rejected, 0);
  EXPECT_EQ(reporters, 1u);
  EXPECT_GT(rps, 0);
  EXPECT_FALSE(stub->stats().reporting_unavailable);
  EXPECT_GE(stub->stats().reports_sent, 1u);
  // Counted under the token's name.
  auto metrics =
      aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
  ASSERT_OK(metrics);
  EXPECT_GE(
      MetricValue(
          metrics->body,
          R"(aside_load_reporter_observations_total{group="rr",protocol="aside",reporter="stubs"})"),
      3);
}

TEST(ClientBinaryTest, LoadReportsWithoutATokenAreRefused) {
  TempDir dir;
  ASSERT_OK_AND_ASSIGN(
      RunningServer server,
      StartServer(dir.path() + "/state",
                  {"--config", dir.WriteFile("aside.yaml", kClientTestConfig),
                   "--admin-token-file",
                   dir.WriteSecret(
                       "tokens", absl::StrCat(kClientTestToken, " admin\n"))}));
  ClientOptions o = StubOptions(server.target());
  o.reporter = "stub-1";
  o.groups = {"rr"};
  aside::testing::LogSink log;
  o.log = log.fn();
  ASSERT_OK_AND_ASSIGN(auto stub, Client::Create(o));
  ClientGroup* rr = stub->Group("rr");
  Admin admin(server.target());
  ASSERT_OK_AND_ASSIGN(v1::Group before, admin.Get("rr"));
  ASSERT_TRUE(rr->WaitForGeneration(before.generation(), absl::Seconds(10)));
  // Keep traffic going: a refused stream shows on the stub's next write,
  // and the stub writes only when there is something new to report.
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (log.Count("UNAUTHENTICATED") == 0 && absl::Now() < deadline) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, rr->Pick());
    pick.Done(true);
    log.Await("UNAUTHENTICATED", 1, absl::Milliseconds(100));
  }
  // The stub says why its reports fail; picking is unaffected.
  ASSERT_GE(log.Count("UNAUTHENTICATED"), 1);
  EXPECT_GE(stub->stats().report_stream_failures, 1u);
  EXPECT_OK(rr->Pick());
  auto metrics =
      aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
  ASSERT_OK(metrics);
  EXPECT_GE(
      MetricValue(
          metrics->body,
          R"(aside_load_reports_refused_total{protocol="aside",reason="unauthenticated"})"),
      1);
  EXPECT_LE(MetricValue(metrics->body,
                        R"(aside_load_reports_total{result="accepted"})"),
            0);
}

// Several stubs pick steadily from several groups on threads while the
// server is away; every pick must succeed. Returns the failures.
class SteadyPickers {
 public:
  SteadyPickers(const std::vector<Client*>& stubs,
                const std::vector<std::string>& groups) {
    for (Client* stub : stubs) {
      for (const std::string& g : groups) {
        ClientGroup* group = stub->Group(g);
        threads_.emplace_back([this, group] {
          while (!stop_.load()) {
            absl::StatusOr<PickHandle> pick = group->Pick();
            if (pick.ok()) {
              picks_.fetch_add(1);
              pick->Done(true);
            } else {
              failures_.fetch_add(1);
              aside::MutexLock lock(&mu_);
              last_error_ = pick.status().ToString();
            }
            absl::SleepFor(absl::Milliseconds(1));
          }
        });
      }
    }
  }
  ~SteadyPickers() { Stop(); }
  void Stop() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) {
        t.join();
      }
    }
  }
  int64_t picks() const { return picks_.load(); }
  // Waits (bounded) until at least `n` picks succeeded.
  bool AwaitPicks(int64_t n, absl::Duration timeout = absl::Seconds(10)) const {
    for (const absl::Time until = absl::Now() + timeout;
         picks_.load() < n && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    return picks_.load() >= n;
  }
  int64_t failures() const { return failures_.load(); }
  std::string last_error() {
    aside::MutexLock lock(&mu_);
    return last_error_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> picks_{0};
  std::atomic<int64_t> failures_{0};
  aside::Mutex mu_;
  std::string last_error_;
  std::vector<std::thread> threads_;
};

enum class Outage { kSigkill, kSigstop };

void RunOutage(Outage outage) {
  TempDir dir;
  const std::string config = dir.WriteFile("aside.yaml", kClientTestConfig);
  const std::string tokens =
      dir.WriteSecret("tokens", absl::StrCat(kClientTestToken, " admin\n"));
  const std::string listen =
      absl::StrCat("127.0.0.1:", aside::testing::PickUnusedPort());
  const std::vector<std::string> flags = {
      "--config", config, "--admin-token-file", tokens, "--listen", listen};
  ASSERT_OK_AND_ASSIGN(RunningServer server,
                       StartServer(dir.path() + "/state", flags));
  Admin admin(server.target());
  ASSERT_OK(admin.Create("payments", {"127.0.0.1:9201", "127.0.0.1:9202"}));
  ASSERT_OK_AND_ASSIGN(v1::Group drained,
                       admin.Drain("payments", "127.0.0.1:9202", true));

  std::vector<std::unique_ptr<Client>> stubs;
  std::vector<Client*> raw;
  for (int i = 0; i < 3; ++i) {
    ClientOptions o = StubOptions(server.target());
    // The default backoff grows to tens of seconds over a 30 s outage; a
    // short cap keeps the reconvergence part of the test quick.
    o.backoff.max = absl::Seconds(2);
    o.groups = {"rr", "wrr", "payments"};
    ASSERT_OK_AND_ASSIGN(auto stub, Client::Create(o));
    ASSERT_TRUE(
        stub->Group("payments")
            ->WaitForGeneration(drained.generation(), absl::Seconds(10)));
    raw.push_back(stub.get());
    stubs.push_back(std::move(stub));
  }
  SteadyPickers pickers(raw, {"rr", "wrr", "payments"});
  ASSERT_TRUE(pickers.AwaitPicks(100));
  const int64_t before = pickers.picks();

  if (outage == Outage::kSigkill) {
    server.process->Signal(SIGKILL);
    ASSERT_TRUE(server.process->Wait(absl::Seconds(10)).has_value());
  } else {
    server.process->Signal(SIGSTOP);
  }
  absl::SleepFor(absl::Seconds(30));  // the outage itself, not a sync point
  EXPECT_EQ(pickers.failures(), 0) << pickers.last_error();
  EXPECT_GT(pickers.picks(), before + 1000);
  // Picks never left the drained backend alone... and never picked it.
  for (auto& stub : stubs) {
    auto counts = Count(stub->Group("payments"), 20);
    EXPECT_EQ(counts["127.0.0.1:9201"], 20);
  }

  if (outage == Outage::kSigkill) {
    // Same port, same state directory: Admin-created groups and drains come
    // back, config-file groups too, with new generations from a new server.
    ASSERT_OK_AND_ASSIGN(RunningServer restarted,
                         StartServer(dir.path() + "/state", flags));
    server = std::move(restarted);
  } else {
    server.process->Signal(SIGCONT);
  }
  Admin again(server.target());
  // A change after the outage: every stub must converge to it.
  ASSERT_OK_AND_ASSIGN(v1::Group undrained,
                       again.Drain("payments", "127.0.0.1:9202", false));
  ASSERT_OK_AND_ASSIGN(v1::Group rr, again.Get("rr"));
  for (auto& stub : stubs) {
    EXPECT_TRUE(
        stub->Group("payments")
            ->WaitForGeneration(undrained.generation(), absl::Seconds(20)))
        << "stub at " << stub->Group("payments")->generation();
    EXPECT_TRUE(stub->Group("rr")->WaitForGeneration(rr.generation(),
                                                     absl::Seconds(20)));
    EXPECT_EQ(stub->Group("payments")->generation(), undrained.generation());
  }
  if (outage == Outage::kSigkill) {
    EXPECT_NE(stubs[0]->Group("rr")->server_id(), "");
  }
  pickers.Stop();
  EXPECT_EQ(pickers.failures(), 0) << pickers.last_error();
  auto counts = Count(stubs[0]->Group("payments"), 100);
  EXPECT_EQ(counts["127.0.0.1:9201"], 50);
  EXPECT_EQ(counts["127.0.0.1:9202"], 50);
}

TEST(ClientFailStaticTest, ServerSigkilledForThirtySeconds) {
  RunOutage(Outage::kSigkill);
}

TEST(ClientFailStaticTest, ServerSigstoppedForThirtySeconds) {
  RunOutage(Outage::kSigstop);
}

}  // namespace
}  // namespace aside
