// aside::Client against an in-process fake LoadBalancer: fallback lists,
// wait_for_table, rejected tables, load reports, picks on several threads
// while tables swap (run under TSan), and PickHandle semantics.
#include "client/client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "tests/client/fake_lookaside.h"
#include "tests/client/log_sink.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::FakeServer;
using ::aside::testing::LogSink;
using ::aside::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

v1::GroupUpdate Full(
    const std::string& group, uint64_t generation,
    const std::vector<std::pair<std::string, uint32_t>>& backends,
    bool weighted = false) {
  v1::GroupUpdate u;
  u.set_group(group);
  u.set_generation(generation);
  u.set_server_id("fake");
  if (weighted) {
    u.mutable_full()->mutable_policy()->mutable_weighted_round_robin();
  } else {
    u.mutable_full()->mutable_policy()->mutable_round_robin();
  }
  for (const auto& [address, weight] : backends) {
    v1::TableBackend* b = u.mutable_full()->add_backends();
    b->mutable_backend()->set_address(address);
    b->mutable_backend()->set_weight(weight);
    b->set_effective_weight(weight);
    b->set_ready(true);
    b->set_health(v1::HEALTH_STATE_HEALTHY);
  }
  return u;
}

// A GroupUpdate saying the server has no such group.
v1::GroupUpdate Absent(const std::string& group, uint64_t generation,
                       v1::GroupRemoved::Cause cause) {
  v1::GroupUpdate u;
  u.set_group(group);
  u.set_generation(generation);
  u.set_server_id("fake");
  u.mutable_removed()->set_cause(cause);
  u.mutable_removed()->set_code(static_cast<int>(absl::StatusCode::kNotFound));
  u.mutable_removed()->set_reason(absl::StrCat(
      "group '", group, "' ",
      cause == v1::GroupRemoved::CAUSE_DELETED ? "was deleted" : "not found"));
  return u;
}

ClientOptions FastOptions(const std::string& target) {
  ClientOptions o;
  o.targets = {target};
  o.backoff.initial = absl::Milliseconds(50);
  o.backoff.max = absl::Milliseconds(200);
  o.report_interval = absl::Milliseconds(100);
  o.reporter = "test-reporter";
  return o;
}

TEST(ClientTest, FallbackServesUntilTheFirstTableArrives) {
  FakeServer fake;
  fake.Start();
  ClientOptions options = FastOptions(fake.target());
  options.fallback["web"] = {"127.0.0.1:7001", "127.0.0.1:7002"};
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");

  std::map<std::string, int> counts;
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
    EXPECT_TRUE(pick.from_fallback());
    EXPECT_EQ(pick.generation(), 0u);
    counts[std::string(pick.address())]++;
    pick.Done(true);
  }
  EXPECT_EQ(counts["127.0.0.1:7001"], 5);
  EXPECT_EQ(counts["127.0.0.1:7002"], 5);

  fake.service.Push(Full("web", 42, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(42, absl::Seconds(10)));
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
    EXPECT_FALSE(pick.from_fallback());
    EXPECT_EQ(pick.address(), "127.0.0.1:8001");
    EXPECT_EQ(pick.generation(), 42u);
    pick.Done(true);
  }
}

// A per-call ORCA report carrying only the named metrics `rif` and
// `latency_ms` (xds.data.orca.v3.OrcaLoadReport field 8, map entries of a
// string key 1 and a double value 2), encoded by hand.
std::string NamedMetricsReport(double rif, double latency_ms) {
  std::string out;
  for (const auto& [key, value] : {std::pair<std::string, double>{"rif", rif},
                                   {"latency_ms", latency_ms}}) {
    std::string entry;
    entry.push_back(0x0a);  // key: field 1, length-delimited
    entry.push_back(static_cast<char>(key.size()));
    entry += key;
    entry.push_back(0x11);  // value: field 2, 64 bits
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    for (int i = 0; i < 8; ++i) {
      entry.push_back(static_cast<char>(bits >> (8 * i)));
    }
    out.push_back(0x42);  // named_metrics: field 8, length-delimited
    out.push_back(static_cast<char>(entry.size()));
    out += entry;
  }
  return out;
}

TEST(ClientTest, NamedMetricsOnResponsesSteerPrequal) {
  FakeServer fake;
  fake.Start();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(FastOptions(fake.target())));
  ClientGroup* web = client->Group("web");
  v1::GroupUpdate u =
      Full("web", 7, {{"127.0.0.1:8001", 100}, {"127.0.0.1:8002", 100}});
  u.mutable_full()->mutable_policy()->mutable_prequal();
  fake.service.Push(u);
  ASSERT_TRUE(web->WaitForGeneration(7, absl::Seconds(10)));
  // Without reports it reads its own in-flight counts: a second pick while
  // the first is in flight goes to the other backend.
  ASSERT_OK_AND_ASSIGN(PickHandle first, web->Pick());
  ASSERT_OK_AND_ASSIGN(PickHandle second, web->Pick());
  ASSERT_NE(first.address(), second.address());
  PickHandle& fast = first.address() == "127.0.0.1:8001" ? first : second;
  PickHandle& busy = first.address() == "127.0.0.1:8001" ? second : first;
  EXPECT_TRUE(fast.RecordBackendMetrics(NamedMetricsReport(0, 2)));
  EXPECT_TRUE(busy.RecordBackendMetrics(NamedMetricsReport(50, 90)));
  fast.Done(true);
  busy.Done(true);
  const TableConstPtr table = web->table();
  const ReportedLoad reported =
      table->member(static_cast<uint32_t>(table->Find("127.0.0.1:8002")))
          .load->Reported();
  // 50: the backend counted after answering, so the call it answered,
  // done since, is not taken off again.
  EXPECT_EQ(reported.rif, 50);
  EXPECT_NEAR(reported.latency_nanos, 90e6, 1);
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
    EXPECT_EQ(pick.address(), "127.0.0.1:8001");
    pick.Done(true);
  }
}

TEST(ClientTest, WithoutTableOrFallbackPicksFailAfterWaitForTable) {
  const int port = aside::testing::PickUnusedPort();
  const std::string target = absl::StrCat("127.0.0.1:", port);
  FakeClock clock;
  ClientOptions options = FastOptions(target);
  options.clock = &clock;
  options.wait_for_table = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  const int64_t deadline = clock.NowNanos() + 300'000'000;

  // A pick waits for the table until wait_for_table has passed on the
  // client's clock, and no longer.
  absl::StatusOr<PickHandle> pick = absl::UnknownError("not returned");
  std::atomic<int64_t> returned_at{0};
  std::thread picker([&] {
    pick = web->Pick();
    returned_at = clock.NowNanos();
  });
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.table_waits == 1; },
      absl::Seconds(10)));
  clock.Advance(absl::Milliseconds(299));
  EXPECT_EQ(returned_at.load(), 0);
  clock.Advance(absl::Milliseconds(1));
  picker.join();
  EXPECT_GE(returned_at.load(), deadline);
  EXPECT_THAT(pick, StatusIs(absl::StatusCode::kUnavailable,
                             AllOf(HasSubstr("group 'web'"), HasSubstr(target),
                                   HasSubstr("300ms"))));
  // After the deadline, picks fail at once: without waiting (the clock
  // stands still, so a wait would never end).
  EXPECT_THAT(web->Pick(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr(target)));
  EXPECT_EQ(client->stats().table_waits, 1u);
  // The cause: the connection error once an attempt has failed.
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return !s.last_error.empty(); },
      absl::Seconds(10)));
  EXPECT_THAT(web->Pick().status().message(), HasSubstr("UNAVAILABLE"));
}

TEST(ClientTest, ReconnectsGoRoundRobinOverTheTargets) {
  FakeServer fake;
  fake.Start();
  const std::string dead =
      absl::StrCat("127.0.0.1:", aside::testing::PickUnusedPort());
  ClientOptions options = FastOptions(dead);
  options.targets.push_back(fake.target());
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 3, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(3, absl::Seconds(10)));
  EXPECT_GE(client->stats().watch_attempts, 2u);
  EXPECT_EQ(client->stats().watch_connected, 1u);
}

TEST(ClientTest, AnAbsentGroupIsReportedAloneAndTheOthersKeepTheirStream) {
  FakeServer fake;
  fake.Start();
  LogSink log;
  ClientOptions options = FastOptions(fake.target());
  options.groups = {"ghost", "web"};
  options.log = log.fn();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  ClientGroup* ghost = client->Group("ghost");
  fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
  fake.service.Push(Absent("ghost", 0, v1::GroupRemoved::CAUSE_NOT_FOUND));
  // Updates of one stream apply in order: web at 2 means the absence of
  // ghost was handled.
  fake.service.Push(Full("web", 2, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(2, absl::Seconds(10)));
  EXPECT_TRUE(ghost->removed());
  EXPECT_THAT(ghost->Pick(),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("group 'ghost' not found"),
                             HasSubstr(fake.target()))));
  EXPECT_EQ(log.Count("event=group.not_found group 'ghost'"), 1);

  // The other group keeps its stream: every update arrives, none is
  // missed, and the stream is never restarted.
  for (uint64_t g = 3; g <= 10; ++g) {
    fake.service.Push(Full("web", g, {{"127.0.0.1:8001", 100}}));
  }
  ASSERT_TRUE(web->WaitForGeneration(10, absl::Seconds(10)));
  EXPECT_EQ(client->stats().updates_applied, 10u);

  // Created on the server: its table arrives on the same stream.
  fake.service.Push(Full("ghost", 11, {{"127.0.0.1:8101", 100}}));
  ASSERT_TRUE(ghost->WaitForGeneration(11, absl::Seconds(10)));
  EXPECT_FALSE(ghost->removed());
  ASSERT_OK_AND_ASSIGN(PickHandle pick, ghost->Pick());
  EXPECT_EQ(pick.address(), "127.0.0.1:8101");
  pick.Done(true);

  // Deleted again: the table held keeps serving, and web goes on.
  fake.service.Push(Absent("ghost", 12, v1::GroupRemoved::CAUSE_DELETED));
  fake.service.Push(Full("web", 13, {{"127.0.0.1:8002", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(13, absl::Seconds(10)));
  EXPECT_TRUE(ghost->removed());
  ASSERT_OK_AND_ASSIGN(PickHandle still, ghost->Pick());
  EXPECT_EQ(still.address(), "127.0.0.1:8101");
  still.Done(true);
  EXPECT_EQ(log.Count("event=group.removed group 'ghost' was deleted"), 1);

  EXPECT_EQ(client->stats().watch_attempts, 1u);
  EXPECT_EQ(fake.service.watch_calls(), 1);
  EXPECT_EQ(client->stats().updates_applied, 12u);
}

TEST(ClientTest, APickWaitingForTheFirstTableGetsIt) {
  FakeServer fake;
  fake.Start();
  ClientOptions options = FastOptions(fake.target());
  options.wait_for_table = absl::Seconds(20);
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  absl::StatusOr<PickHandle> pick = absl::UnknownError("not returned");
  std::thread picker([&] { pick = web->Pick(); });
  // The pick is waiting before the table is sent.
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.table_waits == 1; },
      absl::Seconds(10)));
  fake.service.Push(Full("web", 5, {{"127.0.0.1:8001", 100}}));
  picker.join();
  ASSERT_OK(pick);
  EXPECT_EQ(pick->address(), "127.0.0.1:8001");
}

TEST(ClientTest, InvalidNamesAndOptionsAreRejected) {
  EXPECT_THAT(Client::Create({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("targets")));
  ClientOptions bad_fallback;
  bad_fallback.targets = {"127.0.0.1:1"};
  bad_fallback.fallback["web"] = {"10.0.0.1"};
  EXPECT_THAT(Client::Create(bad_fallback),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("fallback['web'][0]")));
  ClientOptions bad_tls;
  bad_tls.targets = {"127.0.0.1:1"};
  bad_tls.tls.enabled = true;
  bad_tls.tls.ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(Client::Create(bad_tls),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/nonexistent/ca.pem")));

  ClientOptions ok;
  ok.targets = {"127.0.0.1:1"};
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(ok));
  EXPECT_THAT(client->Group("Not A Name")->Pick(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("group 'Not A Name'")));
}

TEST(ClientTest, ARejectedTableLeavesThePreviousOneServing) {
  FakeServer fake;
  fake.Start();
  LogSink log;
  ClientOptions options = FastOptions(fake.target());
  options.log = log.fn();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));

  fake.service.Push(Full("web", 2, {{"127.0.0.1:8002", 100}, {"bad", 1}}));
  fake.service.Push(Full("web", 3, {{"127.0.0.1:8003", 20000}}));
  ASSERT_TRUE(client->AwaitStats(
      [](const Client::Stats& s) { return s.updates_rejected == 2; },
      absl::Seconds(10)));
  EXPECT_EQ(web->rejected_updates(), 2u);
  EXPECT_EQ(web->generation(), 1u);
  ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
  EXPECT_EQ(pick.address(), "127.0.0.1:8001");
  EXPECT_EQ(client->stats().updates_rejected, 2u);
  EXPECT_EQ(log.Count("event=table.rejected"), 2);
}

TEST(ClientTest, FirstByteFeedsTheFirstByteEstimateAndTheReport) {
  FakeServer fake;
  fake.Start();
  FakeClock clock;
  ClientOptions options = FastOptions(fake.target());
  options.clock = &clock;
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));
  const LoadModel model = web->table()->load_model();
  const BackendLoad* load = nullptr;
  {
    // Unmarked (a unary call): its completion is its first byte.
    ASSERT_OK_AND_ASSIGN(PickHandle unary, web->Pick());
    load = unary.member().load;
    clock.Advance(absl::Milliseconds(1));
    unary.Done(true);
  }
  EXPECT_EQ(load->FirstByteEwma(model), load->LastByteEwma(model));
  {
    // Marked after 2 ms, finished 5 ms later: the first byte comes first.
    ASSERT_OK_AND_ASSIGN(PickHandle stream, web->Pick());
    clock.Advance(absl::Milliseconds(2));
    stream.FirstByte();
    clock.Advance(absl::Milliseconds(5));  // the rest of the response
    stream.FirstByte();                    // a second mark changes nothing
    stream.Done(true);
  }
  EXPECT_LT(load->FirstByteEwma(model), load->LastByteEwma(model));
  clock.Advance(options.report_interval);
  const std::optional<v1::LoadReport> report =
      fake.service.AwaitReport([](const v1::LoadReport& r) {
        return r.loads_size() > 0 && r.loads(0).requests() == 2;
      });
  ASSERT_TRUE(report.has_value());
  const v1::BackendLoad& last = report->loads(0);
  const absl::Duration first =
      absl::Seconds(last.first_byte_latency_sum().seconds()) +
      absl::Nanoseconds(last.first_byte_latency_sum().nanos());
  const absl::Duration all = absl::Seconds(last.latency_sum().seconds()) +
                             absl::Nanoseconds(last.latency_sum().nanos());
  EXPECT_EQ(first, absl::Milliseconds(1 + 2));
  EXPECT_EQ(all, absl::Milliseconds(1 + 7));
}

// Picks from `web` until one lands on `address` (round robin over two
// backends: within two picks).
absl::StatusOr<PickHandle> PickAt(ClientGroup* web, absl::string_view address) {
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<PickHandle> p = web->Pick();
    if (!p.ok() || p->address() == address) {
      return p;
    }
    p->Done(true);
  }
  return absl::NotFoundError(absl::StrCat(address, " not picked"));
}

// How many of `n` picks (each finished with success) land on `address`.
int CountPicks(ClientGroup* web, absl::string_view address, int n) {
  int hits = 0;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<PickHandle> p = web->Pick();
    if (p.ok() && p->address() == address) {
      ++hits;
    }
    if (p.ok()) {
      p->Done(true);
    }
  }
  return hits;
}

class LocalEjectionTest : public ::testing::Test {
 protected:
  void Start(uint32_t failures) {
    fake_.Start();
    ClientOptions options = FastOptions(fake_.target());
    options.clock = &clock_;
    options.local_ejection_failures = failures;
    options.local_ejection_time = absl::Seconds(1);
    ASSERT_OK_AND_ASSIGN(client_, Client::Create(options));
    web_ = client_->Group("web");
    fake_.service.Push(Full("web", 1, {{kA, 1}, {kB, 1}}));
    ASSERT_TRUE(web_->WaitForGeneration(1, absl::Seconds(10)));
  }
  void Fail(absl::string_view address, int times) {
    for (int i = 0; i < times; ++i) {
      ASSERT_OK_AND_ASSIGN(PickHandle p, PickAt(web_, address));
      p.Done(false);
    }
  }

  static constexpr char kA[] = "127.0.0.1:8001";
  static constexpr char kB[] = "127.0.0.1:8002";
  FakeClock clock_;
  FakeServer fake_;
  std::unique_ptr<Client> client_;
  ClientGroup* web_ = nullptr;
};

TEST_F(LocalEjectionTest, ConsecutiveFailuresEjectUntilTheTimeIsUp) {
  Start(3);
  Fail(kA, 2);
  EXPECT_GT(CountPicks(web_, kA, 10), 0);  // two failures: still picked
  Fail(kA, 2);                             // the successes above reset it
  EXPECT_GT(CountPicks(web_, kA, 10), 0);
  Fail(kA, 3);
  EXPECT_EQ(CountPicks(web_, kA, 20), 0);
  clock_.Advance(absl::Milliseconds(900));
  EXPECT_EQ(CountPicks(web_, kA, 20), 0);
  clock_.Advance(absl::Milliseconds(200));
  // Back after a second; one more failure ejects it again at once.
  ASSERT_OK_AND_ASSIGN(PickHandle again, PickAt(web_, kA));
  again.Done(false);
  EXPECT_EQ(CountPicks(web_, kA, 20), 0);
}

TEST_F(LocalEjectionTest, ASuccessEndsTheEjection) {
  Start(3);
  ASSERT_OK_AND_ASSIGN(PickHandle early, PickAt(web_, kA));  // in flight
  Fail(kA, 3);
  EXPECT_EQ(CountPicks(web_, kA, 10), 0);
  early.Done(true);  // the backend answered after all
  EXPECT_EQ(CountPicks(web_, kA, 10), 5);
}

TEST_F(LocalEjectionTest, EveryBackendEjectedStillPicks) {
  Start(3);
  Fail(kA, 3);
  Fail(kB, 3);
  // Both ejected: picks ignore ejections rather than fail.
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(PickHandle p, web_->Pick());
    p.Done(false);
  }
}

TEST_F(LocalEjectionTest, ZeroTurnsItOff) {
  Start(0);
  Fail(kA, 10);
  EXPECT_GT(CountPicks(web_, kA, 10), 0);
}

TEST(ClientTest, NegativeLocalEjectionTimeIsRejected) {
  ClientOptions options = FastOptions("127.0.0.1:1");
  options.local_ejection_time = absl::Seconds(-1);
  EXPECT_THAT(Client::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("local_ejection_time")));
}

// A full table of p2c (pending), a policy that reads in-flight counts: its
// picks count in the members' BackendLoad (pick_handle.h).
v1::GroupUpdate FullP2c(
    const std::string& group, uint64_t generation,
    const std::vector<std::pair<std::string, uint32_t>>& backends) {
  v1::GroupUpdate u = Full(group, generation, backends);
  u.mutable_full()->mutable_policy()->mutable_p2c();
  return u;
}

TEST(ClientTest, DoneFeedsTheLoadModelAndTheNextReport) {
  FakeServer fake;
  fake.Start();
  FakeClock clock;
  ClientOptions options = FastOptions(fake.target());
  options.clock = &clock;
  options.locality.zone = "z1";
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(FullP2c("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));

  {
    ASSERT_OK_AND_ASSIGN(PickHandle a, web->Pick());
    ASSERT_OK_AND_ASSIGN(PickHandle b, web->Pick());
    const BackendLoad* load = a.member().load;
    EXPECT_EQ(load->in_flight(), 2);
    a.Done(absl::OkStatus());
    b.Done(grpc::Status(grpc::StatusCode::INTERNAL, "boom"));
    EXPECT_EQ(load->in_flight(), 0);
    // Still valid after Done; a second Done records nothing.
    EXPECT_EQ(a.address(), "127.0.0.1:8001");
    a.Done(false);
    EXPECT_EQ(load->in_flight(), 0);
    ASSERT_OK_AND_ASSIGN(PickHandle abandoned, web->Pick());
    // Destroyed without Done: recorded as a failure.
  }
  clock.Advance(options.report_interval);
  const std::optional<v1::LoadReport> first =
      fake.service.AwaitReport([](const v1::LoadReport& r) {
        return r.loads_size() > 0 && r.loads(0).requests() == 3;
      });
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->reporter(), "test-reporter");
  EXPECT_EQ(first->reporter_locality().zone(), "z1");
  const v1::BackendLoad& last = first->loads(0);
  EXPECT_EQ(last.group(), "web");
  EXPECT_EQ(last.address(), "127.0.0.1:8001");
  EXPECT_EQ(last.requests(), 3u);
  EXPECT_EQ(last.failures(), 2u);
  EXPECT_EQ(last.consecutive_failures(), 2u);
  EXPECT_EQ(last.in_flight(), 0u);
  // The first report of a counter sets `reset` (a new baseline); later
  // ones do not.
  EXPECT_TRUE(last.reset());
  {
    ASSERT_OK_AND_ASSIGN(PickHandle more, web->Pick());
    more.Done(true);
  }
  clock.Advance(options.report_interval);
  const std::optional<v1::LoadReport> second =
      fake.service.AwaitReport([](const v1::LoadReport& r) {
        return r.loads_size() > 0 && r.loads(0).requests() == 4;
      });
  ASSERT_TRUE(second.has_value());
  const v1::BackendLoad& next = second->loads(0);
  EXPECT_EQ(next.requests(), 4u);
  EXPECT_EQ(next.consecutive_failures(), 0u);
  EXPECT_FALSE(next.reset());
  // Idle backends are left out of later reports, and a report with
  // nothing in it is not sent: four report intervals pass without one.
  const size_t count = fake.service.reports().size();
  for (uint64_t i = 1; i <= 4; ++i) {
    const uint64_t skipped = client->stats().reports_skipped;
    clock.Advance(options.report_interval);
    ASSERT_TRUE(client->AwaitStats(
        [&](const Client::Stats& s) { return s.reports_skipped > skipped; },
        absl::Seconds(10)));
  }
  EXPECT_EQ(fake.service.reports().size(), count);
  EXPECT_EQ(client->stats().reports_sent, 2u);
}

TEST(ClientTest, UnimplementedReportingIsRetriedQuietly) {
  FakeServer fake;
  fake.service.set_report_status(
      grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "not yet"));
  fake.Start();
  LogSink log;
  FakeClock clock;
  ClientOptions options = FastOptions(fake.target());
  options.clock = &clock;
  options.log = log.fn();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));
  // Each step: traffic, then one report interval that is also past the
  // longest reconnect delay (200 ms + 20 % jitter), so every step makes
  // one attempt: a write (which gRPC may accept before the server's status
  // arrives) or a failed stream.
  auto attempts = [](const Client::Stats& s) {
    return s.reports_sent + s.report_stream_failures;
  };
  // Bounded by time, not by steps: on a loaded machine many steps' writes
  // are accepted before the server's status ends the stream.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (int step = 0;
       absl::Now() < deadline && client->stats().report_stream_failures < 3;
       ++step) {
    ASSERT_OK_AND_ASSIGN(PickHandle pick, web->Pick());
    pick.Done(true);
    const uint64_t before = attempts(client->stats());
    clock.Advance(absl::Milliseconds(250));
    ASSERT_TRUE(client->AwaitStats(
        [&](const Client::Stats& s) { return attempts(s) > before; },
        absl::Seconds(10)))
        << "step " << step << ": sent " << client->stats().reports_sent
        << ", failures " << client->stats().report_stream_failures
        << ", skipped " << client->stats().reports_skipped;
  }
  EXPECT_GE(client->stats().report_stream_failures, 3u);
  EXPECT_TRUE(client->stats().reporting_unavailable);
  EXPECT_EQ(log.Count("event=report.unavailable"), 1);
  EXPECT_EQ(log.Count("event=report.failed"), 0);
}

TEST(ClientTest, PicksOnSeveralThreadsWhileTablesSwap) {
  FakeServer fake;
  fake.Start();
  ClientOptions options = FastOptions(fake.target());
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));

  std::atomic<bool> stop{false};
  std::atomic<int64_t> picks{0};
  std::atomic<int64_t> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<PickHandle> held;
      while (!stop.load()) {
        absl::StatusOr<PickHandle> pick = web->Pick(absl::StrCat("key", t));
        if (!pick.ok()) {
          failures.fetch_add(1);
          continue;
        }
        picks.fetch_add(1);
        // Keep a few handles across swaps; finish some on another turn.
        held.push_back(*std::move(pick));
        if (held.size() > 8) {
          held.front().Done(true);
          held.erase(held.begin());
        }
      }
    });
  }
  constexpr uint64_t kSwaps = 100;
  for (uint64_t g = 2; g <= kSwaps; ++g) {
    std::vector<std::pair<std::string, uint32_t>> backends;
    for (uint64_t i = 0; i < 1 + g % 5; ++i) {
      backends.emplace_back(absl::StrCat("127.0.0.1:", 8000 + (g + i) % 7),
                            static_cast<uint32_t>(1 + i));
    }
    fake.service.Push(Full("web", g, backends, /*weighted=*/g % 2 == 0));
    if (g % 10 == 0) {
      ASSERT_TRUE(web->WaitForGeneration(g, absl::Seconds(10)));
    }
  }
  ASSERT_TRUE(web->WaitForGeneration(kSwaps, absl::Seconds(10)));
  // Some picks from the last table too, then stop.
  const int64_t at_last = picks.load();
  for (const absl::Time until = absl::Now() + absl::Seconds(10);
       picks.load() < at_last + 100 && absl::Now() < until;) {
    std::this_thread::yield();
  }
  EXPECT_GE(picks.load(), at_last + 100);
  stop.store(true);
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(picks.load(), 0);
  EXPECT_EQ(client->stats().updates_applied, kSwaps);
}

// Handles picked on threads that then exit, finished on another thread
// after their tables were replaced: each keeps its table alive until it is
// released, and everything is released once (ASan and TSan check both).
TEST(ClientTest, HandlesOutliveTheirTableAndTheThreadThatPicked) {
  FakeServer fake;
  fake.Start();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(FastOptions(fake.target())));
  ClientGroup* web = client->Group("web");
  fake.service.Push(FullP2c("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));

  aside::Mutex mu;
  std::vector<PickHandle> handed_over;  // guarded by mu
  const BackendLoad* first_load = nullptr;
  for (uint64_t g = 2; g <= 6; ++g) {
    std::thread picker([&] {
      for (int i = 0; i < 20; ++i) {
        absl::StatusOr<PickHandle> pick = web->Pick();
        ASSERT_TRUE(pick.ok()) << pick.status();
        if (i % 2 == 0) {
          pick->Done(true);  // released on the picking thread
          continue;
        }
        aside::MutexLock lock(&mu);
        if (first_load == nullptr) {
          first_load = pick->member().load;
        }
        handed_over.push_back(*std::move(pick));
      }
    });
    picker.join();
    // A new table (the same backend, so its load carries over): the
    // picker's hold on the previous one is retired with handles still out.
    fake.service.Push(FullP2c("web", g, {{"127.0.0.1:8001", 100 + g}}));
    ASSERT_TRUE(web->WaitForGeneration(g, absl::Seconds(10)));
  }
  ASSERT_NE(first_load, nullptr);
  EXPECT_EQ(first_load->in_flight(), 50);
  std::thread finisher([&] {
    aside::MutexLock lock(&mu);
    std::map<uint64_t, int> per_generation;
    for (PickHandle& h : handed_over) {
      EXPECT_EQ(h.address(), "127.0.0.1:8001");  // its table is still alive
      ++per_generation[h.generation()];
      h.Done(true);
    }
    EXPECT_EQ(
        per_generation,
        (std::map<uint64_t, int>{{1, 10}, {2, 10}, {3, 10}, {4, 10}, {5, 10}}));
    handed_over.clear();  // each hold deleted by its last handle
  });
  finisher.join();
  EXPECT_EQ(first_load->in_flight(), 0);
}

// A policy that reads no in-flight counts (round robin) counts its calls in
// per-thread counters: the report sums every thread's, including those of
// a thread that exited and of handles finished on another thread.
TEST(ClientTest, RoundRobinCallsAreReportedFromEveryThread) {
  FakeServer fake;
  fake.Start();
  FakeClock clock;
  ClientOptions options = FastOptions(fake.target());
  options.clock = &clock;
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  ClientGroup* web = client->Group("web");
  fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));

  std::vector<PickHandle> handed_over;
  std::thread picker([&] {
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<PickHandle> pick = web->Pick();
      ASSERT_TRUE(pick.ok()) << pick.status();
      if (i < 2) {
        pick->Done(i == 0);  // one success, one failure, on this thread
      } else {
        handed_over.push_back(*std::move(pick));
      }
    }
  });
  picker.join();  // its counters are folded into the process's at exit
  ASSERT_EQ(handed_over.size(), 3u);
  handed_over[0].Done(true);  // finished on another thread
  clock.Advance(options.report_interval);
  const std::optional<v1::LoadReport> report =
      fake.service.AwaitReport([](const v1::LoadReport& r) {
        return r.loads_size() > 0 && r.loads(0).requests() == 3;
      });
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->loads(0).requests(), 3u);
  EXPECT_EQ(report->loads(0).failures(), 1u);
  EXPECT_EQ(report->loads(0).in_flight(), 2u);
  handed_over.clear();  // abandoned: recorded as failures
  clock.Advance(options.report_interval);
  const std::optional<v1::LoadReport> next =
      fake.service.AwaitReport([](const v1::LoadReport& r) {
        return r.loads_size() > 0 && r.loads(0).requests() == 5;
      });
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->loads(0).failures(), 3u);
  EXPECT_EQ(next->loads(0).in_flight(), 0u);
}

// The Watch streams of several Clients in one process with the same target
// ride one connection, up to streams_per_connection streams each.
TEST(ClientTest, ClientsOfOneProcessShareConnections) {
  for (size_t per_connection : {size_t{100}, size_t{1}}) {
    FakeServer fake;
    fake.Start();
    fake.service.Push(Full("web", 1, {{"127.0.0.1:8001", 100}}));
    std::vector<std::unique_ptr<Client>> clients;
    for (int i = 0; i < 3; ++i) {
      ClientOptions options = FastOptions(fake.target());
      options.streams_per_connection = per_connection;
      ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
      ASSERT_TRUE(
          client->Group("web")->WaitForGeneration(1, absl::Seconds(10)));
      clients.push_back(std::move(client));
    }
    EXPECT_EQ(fake.service.watch_peers().size(), per_connection == 1 ? 3u : 1u)
        << "streams_per_connection " << per_connection;
    // Every client picks from its own table.
    for (auto& client : clients) {
      ASSERT_OK_AND_ASSIGN(PickHandle pick, client->Group("web")->Pick());
      EXPECT_EQ(pick.address(), "127.0.0.1:8001");
    }
  }
}

// On the system clock a latency is never measured short; a policy that
// reads latency gets it exactly and feeds its estimates, the others count
// the call and report its latency without touching the estimates.
TEST(ClientTest, SystemClockTimingFollowsThePolicy) {
  FakeServer fake;
  fake.Start();
  ClientOptions options = FastOptions(fake.target());
  options.groups = {"rr", "peak"};
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(options));
  fake.service.Push(Full("rr", 1, {{"127.0.0.1:8001", 100}}));
  v1::GroupUpdate peak = Full("peak", 1, {{"127.0.0.1:8002", 100}});
  peak.mutable_full()->mutable_policy()->mutable_p2c()->set_load(
      v1::P2c::PEAK_EWMA);
  fake.service.Push(peak);
  ASSERT_TRUE(client->Group("rr")->WaitForGeneration(1, absl::Seconds(10)));
  ASSERT_TRUE(client->Group("peak")->WaitForGeneration(1, absl::Seconds(10)));

  constexpr absl::Duration kCall = absl::Milliseconds(3);
  auto call = [&](const char* group) -> const BackendLoad* {
    absl::StatusOr<PickHandle> pick = client->Group(group)->Pick();
    EXPECT_TRUE(pick.ok()) << pick.status();
    if (!pick.ok()) {
      return nullptr;
    }
    // A call of at least kCall (busy: the test measures elapsed time).
    const absl::Time until = absl::Now() + kCall;
    while (absl::Now() < until) {
    }
    pick->Done(true);
    return pick->member().load;
  };
  const BackendLoad* rr = call("rr");
  const BackendLoad* p2c = call("peak");
  ASSERT_NE(rr, nullptr);
  ASSERT_NE(p2c, nullptr);
  EXPECT_FALSE(rr->has_rtt_sample());
  // Round robin reads no in-flight counts: the call is counted in the
  // stub's own counters (the report below), not in the shared load.
  EXPECT_EQ(rr->requests(), 0u);
  EXPECT_EQ(rr->in_flight(), 0);
  EXPECT_TRUE(p2c->has_rtt_sample());
  const LoadModel model = client->Group("peak")->table()->load_model();
  EXPECT_GE(p2c->PeakEwmaRtt(MonotonicNanos(), model),
            0.99 * absl::ToDoubleNanoseconds(kCall));

  const std::optional<v1::LoadReport> report =
      fake.service.AwaitReport([](const v1::LoadReport& r) {
        for (const v1::BackendLoad& l : r.loads()) {
          if (l.group() == "rr" && l.requests() == 1) {
            return true;
          }
        }
        return false;
      });
  ASSERT_TRUE(report.has_value());
  for (const v1::BackendLoad& l : report->loads()) {
    if (l.group() != "rr") {
      continue;
    }
    const absl::Duration all = absl::Seconds(l.latency_sum().seconds()) +
                               absl::Nanoseconds(l.latency_sum().nanos());
    const absl::Duration first =
        absl::Seconds(l.first_byte_latency_sum().seconds()) +
        absl::Nanoseconds(l.first_byte_latency_sum().nanos());
    EXPECT_GE(all, kCall);
    EXPECT_EQ(first, all);  // a unary call: its completion is its first byte
  }
}

TEST(ClientTest, ChannelsOfDepartedBackendsAreEvicted) {
  FakeServer fake;
  fake.Start();
  ASSERT_OK_AND_ASSIGN(auto client, Client::Create(FastOptions(fake.target())));
  ClientGroup* web = client->Group("web");
  fake.service.Push(
      Full("web", 1, {{"127.0.0.1:8001", 100}, {"127.0.0.1:8002", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(1, absl::Seconds(10)));
  auto a = client->channels().Get("127.0.0.1:8001");
  EXPECT_EQ(client->channels().Get("127.0.0.1:8001"), a);
  client->channels().Get("127.0.0.1:8002");
  EXPECT_EQ(client->channels().size(), 2u);
  fake.service.Push(Full("web", 2, {{"127.0.0.1:8002", 100}}));
  ASSERT_TRUE(web->WaitForGeneration(2, absl::Seconds(10)));
  // Channels are pruned before the generation becomes visible.
  EXPECT_EQ(client->channels().size(), 1u);
  EXPECT_NE(client->channels().Get("127.0.0.1:8001"), a);
}

TEST(ChannelPoolTest, IsBoundedAndPrefersEvictingDepartedBackends) {
  ChannelPoolOptions options;
  options.max_channels = 2;
  ChannelPool pool(options);
  auto a = pool.Get("127.0.0.1:1");
  auto b = pool.Get("127.0.0.1:2");
  pool.Retain({"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"});
  EXPECT_EQ(pool.size(), 2u);
  pool.Get("127.0.0.1:3");  // evicts the oldest: :1
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.Get("127.0.0.1:2"), b);
  EXPECT_NE(pool.Get("127.0.0.1:1"), a);
}

}  // namespace
}  // namespace aside
