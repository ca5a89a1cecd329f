// The registry's contract: identity, reference counting, states, observers,
// List, metrics and the concurrency cap, against loopback backends.
#include "server/health/health_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "lib/clock.h"
#include "lib/sync.h"
#include "tests/health/health_test_util.h"
#include "tests/health/test_backends.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::FakeBackend;
using ::aside::testing::Loopback;
using ::aside::testing::ProbeRecorder;
using ::aside::testing::ProbeSpec;
using ::aside::testing::RegistryUnderTest;
using ::aside::testing::RenderMetrics;
using ::aside::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = HealthCheckSpec::Kind;

constexpr absl::Duration kWait = absl::Seconds(10);

TEST(HealthRegistryTest, KindNoneIsHealthyAndNeverProbed) {
  RegistryUnderTest r;
  ASSERT_NE(r.registry, nullptr);
  HealthCheckSpec spec = ProbeSpec(Kind::kNone);
  spec.require_first_probe = true;
  ASSERT_OK_AND_ASSIGN(HealthHandle h,
                       r.registry->Acquire("10.1.2.3:80", spec, "web"));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
  EXPECT_TRUE(h.ready());
  EXPECT_GT(h.ready_since_nanos(), 0);
  ASSERT_TRUE(r.registry->FlushForTest(kWait));
  auto targets = r.registry->List();
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].probes, 0u);
  EXPECT_FALSE(targets[0].last_result.has_value());
  // Host names are fine for a target that is never probed.
  ASSERT_OK_AND_ASSIGN(HealthHandle named,
                       r.registry->Acquire("Payments.svc:80", spec, "web"));
  EXPECT_EQ(named.address(), "payments.svc:80");
}

TEST(HealthRegistryTest, IdentityIsTheCanonicalAddressAndTheSpec) {
  RegistryUnderTest r;
  const HealthCheckSpec spec = ProbeSpec(Kind::kNone);
  ASSERT_OK_AND_ASSIGN(HealthHandle a,
                       r.registry->Acquire("[::1]:8080", spec, "a"));
  ASSERT_OK_AND_ASSIGN(HealthHandle b,
                       r.registry->Acquire("[0:0::0001]:8080", spec, "b"));
  EXPECT_EQ(a.target_id(), b.target_id());
  EXPECT_EQ(b.address(), "[::1]:8080");
  HealthCheckSpec other = spec;
  other.interval = absl::Seconds(7);
  ASSERT_OK_AND_ASSIGN(HealthHandle c,
                       r.registry->Acquire("[::1]:8080", other, "a"));
  EXPECT_NE(a.target_id(), c.target_id());
  EXPECT_EQ(r.registry->size(), 2u);
}

TEST(HealthRegistryTest, TargetsAreReferenceCountedByGroups) {
  RegistryUnderTest r;
  const HealthCheckSpec spec = ProbeSpec(Kind::kNone);
  ASSERT_OK_AND_ASSIGN(HealthHandle web,
                       r.registry->Acquire("10.0.0.1:80", spec, "web"));
  ASSERT_OK_AND_ASSIGN(HealthHandle api1,
                       r.registry->Acquire("10.0.0.1:80", spec, "api"));
  ASSERT_OK_AND_ASSIGN(HealthHandle api2,
                       r.registry->Acquire("10.0.0.1:80", spec, "api"));
  ASSERT_EQ(r.registry->size(), 1u);
  EXPECT_THAT(r.registry->List()[0].groups, ElementsAre("api", "web"));
  api1.Reset();
  EXPECT_THAT(r.registry->List()[0].groups, ElementsAre("api", "web"));
  {
    HealthHandle moved = std::move(api2);
    EXPECT_FALSE(api2.valid());  // NOLINT(bugprone-use-after-move)
  }
  EXPECT_THAT(r.registry->List()[0].groups, ElementsAre("web"));
  EXPECT_EQ(r.registry->List("api").size(), 0u);
  EXPECT_EQ(r.registry->List("web").size(), 1u);
  web = HealthHandle();
  EXPECT_EQ(r.registry->size(), 0u);
  EXPECT_TRUE(r.registry->List().empty());
}

TEST(HealthRegistryTest, RejectsWhatCannotBeProbed) {
  RegistryUnderTest r;
  EXPECT_THAT(
      r.registry->Acquire("payments.svc:80", ProbeSpec(Kind::kTcp), "web"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("host name must be resolved")));
  EXPECT_THAT(r.registry->Acquire("10.0.0.1", ProbeSpec(Kind::kTcp), "web"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("health target 10.0.0.1")));
  EXPECT_THAT(r.registry->Acquire("10.0.0.1:80", ProbeSpec(Kind::kTcp), ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("group name is empty")));
  HealthCheckSpec zero = ProbeSpec(Kind::kTcp);
  zero.interval = absl::ZeroDuration();
  EXPECT_THAT(
      r.registry->Acquire("10.0.0.1:80", zero, "web"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("interval")));
  HealthCheckSpec crlf = ProbeSpec(Kind::kHttp);
  crlf.http_path = "/x\r\nInjected: 1";
  EXPECT_THAT(r.registry->Acquire("10.0.0.1:80", crlf, "web"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("control characters")));
  HealthCheckSpec::Kind bogus = static_cast<HealthCheckSpec::Kind>(42);
  HealthCheckSpec unknown = ProbeSpec(bogus);
  EXPECT_THAT(r.registry->Acquire("10.0.0.1:80", unknown, "web"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown health-check kind")));
  EXPECT_EQ(r.registry->size(), 0u);
  HealthRegistry::Options bad;
  bad.max_concurrent_probes = 0;
  prometheus::Registry metrics;
  EXPECT_THAT(HealthRegistry::Create(bad, metrics),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("max_concurrent_probes")));
}

TEST(HealthRegistryTest, NewTargetIsProbedImmediately) {
  FakeBackend backend(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  const int64_t start = MonotonicNanos();
  ASSERT_OK_AND_ASSIGN(
      HealthHandle h,
      r.registry->Acquire(Loopback(port), ProbeSpec(Kind::kTcp, absl::Hours(1)),
                          "web"));
  ASSERT_OK_AND_ASSIGN(ProbeEvent first,
                       recorder.WaitForResult(h.target_id(), 1, kWait));
  EXPECT_TRUE(first.result.success) << first.result.reason;
  // Not an interval (1 h) later: at once.
  EXPECT_LT(MonotonicNanos() - start, absl::ToInt64Nanoseconds(kWait));
  EXPECT_EQ(h.state(), HealthState::kHealthy);
}

TEST(HealthRegistryTest, TargetNotOwnedIsNotProbedAndIsProbedAtOnceWhenOwned) {
  FakeBackend other(FakeBackend::Mode::kAcceptClose);
  FakeBackend mine(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t other_port, other.Listen());
  ASSERT_OK_AND_ASSIGN(uint16_t mine_port, mine.Listen());
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  // Another replica owns `other` until told otherwise; this one owns
  // `mine`.
  std::atomic<bool> own_other{false};
  const std::string other_address = Loopback(other_port);
  r.registry->SetFleetHooks({.owned = [&](uint64_t, absl::Duration timeout) {
    // `other` is the target with a 3 s timeout.
    return timeout != absl::Seconds(3) || own_other.load();
  }});
  HealthCheckSpec other_spec = ProbeSpec(Kind::kTcp, absl::Hours(1));
  other_spec.timeout = absl::Seconds(3);
  ASSERT_OK_AND_ASSIGN(HealthHandle o,
                       r.registry->Acquire(other_address, other_spec, "web"));
  ASSERT_OK_AND_ASSIGN(
      HealthHandle m,
      r.registry->Acquire(Loopback(mine_port),
                          ProbeSpec(Kind::kTcp, absl::Hours(1)), "web"));
  // Probes start in the order targets were added: once `mine` was probed,
  // `other` would have been too.
  ASSERT_OK(recorder.WaitForResult(m.target_id(), 1, kWait).status());
  EXPECT_EQ(other.accepted(), 0u);
  EXPECT_EQ(o.state(), HealthState::kUnknown);
  // Taken over: probed at once, not an interval (1 h) later.
  own_other = true;
  r.registry->ReevaluateOwnership();
  ASSERT_OK_AND_ASSIGN(ProbeEvent first,
                       recorder.WaitForResult(o.target_id(), 1, kWait));
  EXPECT_TRUE(first.result.success) << first.result.reason;
  EXPECT_TRUE(other.WaitForAccepted(1, kWait));
}

TEST(HealthRegistryTest, UnknownCountsAsReadyUnlessAFirstProbeIsRequired) {
  FakeBackend hole(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t port, hole.Listen());
  RegistryUnderTest r;
  HealthCheckSpec spec =
      ProbeSpec(Kind::kHttp, absl::Seconds(60), absl::Seconds(30));
  ASSERT_OK_AND_ASSIGN(HealthHandle lenient,
                       r.registry->Acquire(Loopback(port), spec, "a"));
  spec.require_first_probe = true;
  ASSERT_OK_AND_ASSIGN(HealthHandle strict,
                       r.registry->Acquire(Loopback(port), spec, "b"));
  ASSERT_TRUE(hole.WaitForAccepted(2, kWait));  // both probes in flight
  EXPECT_EQ(lenient.state(), HealthState::kUnknown);
  EXPECT_TRUE(lenient.ready());
  EXPECT_GT(lenient.ready_since_nanos(), 0);
  EXPECT_EQ(strict.state(), HealthState::kUnknown);
  EXPECT_FALSE(strict.ready());
  EXPECT_EQ(strict.ready_since_nanos(), 0);
}

TEST(HealthRegistryTest, ReadySinceFollowsReadiness) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  FakeClock clock;
  HealthRegistry::Options options;
  options.clock = &clock;
  RegistryUnderTest r(options);
  ProbeRecorder recorder(*r.registry);
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp, absl::Milliseconds(20));
  spec.rise = 1;
  spec.fall = 1;
  spec.require_first_probe = true;
  backend.SetStatus(503);
  ASSERT_OK_AND_ASSIGN(HealthHandle h,
                       r.registry->Acquire(Loopback(port), spec, "web"));
  EXPECT_EQ(h.ready_since_nanos(), 0);
  ASSERT_TRUE(recorder.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kUnhealthy; },
      kWait));
  EXPECT_EQ(h.ready_since_nanos(), 0);
  clock.Advance(absl::Seconds(42));
  const int64_t when = clock.NowNanos();
  backend.SetStatus(200);
  ASSERT_TRUE(recorder.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kHealthy; }, kWait));
  EXPECT_EQ(h.ready_since_nanos(), when);
  // The injected clock also stamps the results.
  auto targets = r.registry->List();
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].last_transition, clock.WallNow());
}

TEST(HealthRegistryTest, ObserversSeeEveryFlipInOrder) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  RegistryUnderTest r;
  aside::Mutex mu;
  std::vector<HealthTransition> seen;
  const uint64_t observer =
      r.registry->AddObserver([&](const HealthTransition& t) {
        aside::MutexLock lock(&mu);
        seen.push_back(t);
      });
  ProbeRecorder recorder(*r.registry);
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp, absl::Milliseconds(20));
  spec.rise = 1;
  spec.fall = 2;
  ASSERT_OK_AND_ASSIGN(HealthHandle h1,
                       r.registry->Acquire(Loopback(port), spec, "web"));
  ASSERT_OK_AND_ASSIGN(HealthHandle h2,
                       r.registry->Acquire(Loopback(port), spec, "api"));
  auto flips = [&] {
    aside::MutexLock lock(&mu);
    return seen.size();
  };
  ASSERT_TRUE(
      recorder.WaitUntil([&](const auto&) { return flips() >= 1; }, kWait));
  backend.SetStatus(500);
  ASSERT_TRUE(
      recorder.WaitUntil([&](const auto&) { return flips() >= 2; }, kWait));
  backend.SetStatus(204);
  ASSERT_TRUE(
      recorder.WaitUntil([&](const auto&) { return flips() >= 3; }, kWait));
  r.registry->RemoveObserver(observer);
  const size_t after_removal = flips();
  backend.SetStatus(500);
  ASSERT_TRUE(recorder.WaitUntil(
      [&](const auto&) { return h1.state() == HealthState::kUnhealthy; },
      kWait));
  EXPECT_EQ(flips(), after_removal);

  aside::MutexLock lock(&mu);
  ASSERT_GE(seen.size(), 3u);
  EXPECT_EQ(seen[0].from, HealthState::kUnknown);
  EXPECT_EQ(seen[0].to, HealthState::kHealthy);
  EXPECT_TRUE(seen[0].was_ready);
  EXPECT_TRUE(seen[0].ready);
  EXPECT_EQ(seen[1].from, HealthState::kHealthy);
  EXPECT_EQ(seen[1].to, HealthState::kUnhealthy);
  EXPECT_FALSE(seen[1].ready);
  EXPECT_EQ(seen[1].result.reason, "http status 500");
  EXPECT_EQ(seen[2].to, HealthState::kHealthy);
  EXPECT_TRUE(seen[2].ready);
  EXPECT_FALSE(seen[2].was_ready);
  for (const HealthTransition& t : seen) {
    EXPECT_EQ(t.target_id, h1.target_id());
    EXPECT_EQ(t.address, Loopback(port));
    EXPECT_THAT(t.groups, ElementsAre("api", "web"));
    EXPECT_EQ(t.spec, spec);
  }
}

TEST(HealthRegistryTest, ListShowsTheLastResultAndCounts) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  backend.SetStatus(503);
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  const HealthCheckSpec spec = ProbeSpec(Kind::kHttp, absl::Milliseconds(20));
  ASSERT_OK_AND_ASSIGN(HealthHandle h,
                       r.registry->Acquire(Loopback(port), spec, "web"));
  ASSERT_OK(recorder.WaitForResult(h.target_id(), 4, kWait).status());
  ASSERT_OK_AND_ASSIGN(
      HealthHandle other,
      r.registry->Acquire("10.0.0.9:1", ProbeSpec(Kind::kNone), "other"));
  const absl::Time now = absl::Now();
  auto targets = r.registry->List("web");
  ASSERT_EQ(targets.size(), 1u);
  const TargetInfo& t = targets[0];
  EXPECT_EQ(t.id, h.target_id());
  EXPECT_EQ(t.address, Loopback(port));
  EXPECT_EQ(t.spec, spec);
  EXPECT_EQ(t.state, HealthState::kUnhealthy);
  EXPECT_GE(t.probes, 4u);
  EXPECT_EQ(t.consecutive_successes, 0u);
  EXPECT_EQ(t.consecutive_failures, t.probes);
  ASSERT_TRUE(t.last_result.has_value());
  EXPECT_FALSE(t.last_result->success);
  EXPECT_EQ(t.last_result->reason, "http status 503");
  EXPECT_GT(t.last_result->latency, absl::ZeroDuration());
  EXPECT_LT(t.last_result->latency, absl::Seconds(5));
  EXPECT_LE(t.last_result->finished_at, now);
  EXPECT_GT(t.last_result->finished_at, now - absl::Seconds(30));
  EXPECT_LE(t.last_transition, t.last_result->finished_at);
  EXPECT_THAT(t.groups, ElementsAre("web"));
  EXPECT_EQ(r.registry->List().size(), 2u);
  EXPECT_EQ(r.registry->List("nobody").size(), 0u);
}

TEST(HealthRegistryTest, MetricsCountProbesStatesAndTransitions) {
  FakeBackend backend(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  ASSERT_OK_AND_ASSIGN(
      HealthHandle up,
      r.registry->Acquire(Loopback(port),
                          ProbeSpec(Kind::kTcp, absl::Milliseconds(20)),
                          "web"));
  ASSERT_OK_AND_ASSIGN(
      HealthHandle none,
      r.registry->Acquire("10.0.0.1:80", ProbeSpec(Kind::kNone), "web"));
  ASSERT_OK(recorder.WaitForResult(up.target_id(), 3, kWait).status());
  const std::string text = RenderMetrics(*r.metrics);
  EXPECT_THAT(text,
              HasSubstr("aside_probes_total{kind=\"tcp\",result=\"success\"}"));
  EXPECT_THAT(
      text,
      HasSubstr("aside_probes_total{kind=\"http\",result=\"failure\"} 0"));
  EXPECT_THAT(text,
              HasSubstr("aside_probe_duration_seconds_count{kind=\"tcp\"}"));
  EXPECT_THAT(text, HasSubstr("aside_health_targets{state=\"healthy\"} 2"));
  EXPECT_THAT(text, HasSubstr("aside_health_targets{state=\"unknown\"} 0"));
  EXPECT_THAT(text,
              HasSubstr("aside_health_transitions_total{to=\"healthy\"} 1"));
  up.Reset();
  none.Reset();
  EXPECT_THAT(RenderMetrics(*r.metrics),
              HasSubstr("aside_health_targets{state=\"healthy\"} 0"));
}

TEST(HealthRegistryTest, HandlesOutliveTheRegistry) {
  FakeBackend backend(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  auto metrics = std::make_shared<prometheus::Registry>();
  HealthHandle handle;
  {
    ASSERT_OK_AND_ASSIGN(auto registry, HealthRegistry::Create({}, *metrics));
    ASSERT_OK_AND_ASSIGN(
        handle,
        registry->Acquire(Loopback(port), ProbeSpec(Kind::kHttp), "web"));
    ASSERT_TRUE(backend.WaitForAccepted(1, kWait));  // a probe in flight
  }
  EXPECT_EQ(handle.state(), HealthState::kUnknown);
  handle.Reset();
}

TEST(HealthRegistryTest, ConcurrencyCapQueuesProbesFairly) {
  FakeBackend hole(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t port, hole.Listen());
  HealthRegistry::Options options;
  options.max_concurrent_probes = 2;
  RegistryUnderTest r(options);
  ProbeRecorder recorder(*r.registry);
  std::vector<HealthHandle> handles;
  for (int i = 0; i < 6; ++i) {
    HealthCheckSpec spec =
        ProbeSpec(Kind::kHttp, absl::Seconds(60), absl::Milliseconds(100));
    spec.http_path = absl::StrCat("/", i);  // six distinct targets
    ASSERT_OK_AND_ASSIGN(HealthHandle h,
                         r.registry->Acquire(Loopback(port), spec, "web"));
    handles.push_back(std::move(h));
  }
  ASSERT_TRUE(recorder.WaitUntil(
      [](const auto& events) { return events.size() >= 6; }, kWait));
  auto events = recorder.events();
  // At most two probes overlapped: [finish - latency, finish] intervals.
  std::vector<std::pair<int64_t, int>> edges;
  for (const auto& e : events) {
    const int64_t end = e.seen_nanos;
    edges.emplace_back(end - absl::ToInt64Nanoseconds(e.event.result.latency),
                       +1);
    edges.emplace_back(end, -1);
  }
  std::sort(edges.begin(), edges.end());
  int open = 0;
  int max_open = 0;
  for (const auto& [when, delta] : edges) {
    open += delta;
    max_open = std::max(max_open, open);
  }
  EXPECT_EQ(max_open, 2);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_FALSE(events[i].event.result.success);
    EXPECT_THAT(events[i].event.result.reason, HasSubstr("timeout after"));
    // First come, first served: the order they were added in.
    EXPECT_EQ(events[i].event.target_id, handles[i].target_id());
  }
}

TEST(HealthRegistryTest, ConcurrentAcquireAndReleaseKeepCountsExact) {
  FakeBackend backend(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  RegistryUnderTest r;
  const HealthCheckSpec spec = ProbeSpec(Kind::kTcp, absl::Milliseconds(5));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto h = r.registry->Acquire(Loopback(port), spec,
                                     absl::StrCat("g", (t + i) % 3));
        ASSERT_TRUE(h.ok());
        (void)h->ready();
        if (i % 7 == 0) {
          auto list = r.registry->List();
          (void)list;
        }
      }
    });
  }
  ASSERT_OK_AND_ASSIGN(HealthHandle keep,
                       r.registry->Acquire(Loopback(port), spec, "keep"));
  for (auto& thread : threads) {
    thread.join();
  }
  auto targets = r.registry->List();
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_THAT(targets[0].groups, ElementsAre("keep"));
  keep.Reset();
  EXPECT_EQ(r.registry->size(), 0u);
  ASSERT_TRUE(r.registry->FlushForTest(kWait));
}

}  // namespace
}  // namespace aside::server
