// The reliability properties of DESIGN.md §9 for health checking, each
// against real loopback backends:
// - a target in 1, 5 or 50 groups receives exactly one probe per interval;
// - a flapping backend (1000 flips) matches a reference rise/fall model and
//   ends in the right state;
// - 1000 black-hole backends do not delay the probes of a healthy one, and
//   file descriptors return to their baseline once they are removed;
// - removing a target mid-probe (or destroying the registry) is harmless.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "lib/sync.h"
#include "server/health/health_registry.h"
#include "tests/health/health_test_util.h"
#include "tests/health/test_backends.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::CountOpenFds;
using ::aside::testing::FakeBackend;
using ::aside::testing::GrpcBackend;
using ::aside::testing::Loopback;
using ::aside::testing::ProbeRecorder;
using ::aside::testing::ProbeSpec;
using ::aside::testing::RaiseFdLimit;
using ::aside::testing::RegistryUnderTest;
using ::testing::HasSubstr;
using Kind = HealthCheckSpec::Kind;

constexpr absl::Duration kWait = absl::Seconds(20);

// ---- One probe per interval, however many groups ----

class SharedTargetTest
    : public ::testing::TestWithParam<std::tuple<int, Kind>> {};

TEST_P(SharedTargetTest, ExactlyOneProbePerInterval) {
  const auto [groups, kind] = GetParam();
  FakeBackend backend(kind == Kind::kTcp ? FakeBackend::Mode::kAcceptClose
                                         : FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  auto backend_count = [&, kind = kind] {
    return kind == Kind::kTcp ? backend.accepted() : backend.requests();
  };
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  const absl::Duration interval = absl::Milliseconds(100);
  const HealthCheckSpec spec = ProbeSpec(kind, interval);
  std::vector<HealthHandle> handles;
  for (int g = 0; g < groups; ++g) {
    ASSERT_OK_AND_ASSIGN(
        HealthHandle h,
        r.registry->Acquire(Loopback(port), spec, absl::StrCat("group-", g)));
    handles.push_back(std::move(h));
  }
  ASSERT_EQ(r.registry->size(), 1u);
  EXPECT_EQ(r.registry->List()[0].groups.size(), static_cast<size_t>(groups));
  const uint64_t id = handles[0].target_id();

  constexpr size_t kProbes = 10;
  ASSERT_OK(recorder.WaitForResult(id, kProbes, kWait).status());
  handles.clear();  // stop probing
  ASSERT_TRUE(r.registry->FlushForTest(kWait));
  const size_t probed = recorder.CountFor(id);
  // The backend saw every probe the registry recorded, and at most one more
  // (cancelled by the release after it reached the backend).
  ASSERT_TRUE(kind == Kind::kTcp ? backend.WaitForAccepted(probed, kWait)
                                 : backend.WaitForRequests(probed, kWait));
  EXPECT_GE(backend_count(), probed);
  EXPECT_LE(backend_count(), probed + 1);
  // And they started one interval apart: N probes took (N - 1) intervals.
  auto events = recorder.EventsFor(id);
  auto started = [&](size_t i) {
    return events[i].seen_nanos -
           absl::ToInt64Nanoseconds(events[i].event.result.latency);
  };
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_GE(started(i) - started(i - 1),
              absl::ToInt64Nanoseconds(interval * 0.95))
        << "probe " << i;
  }
  const absl::Duration total =
      absl::Nanoseconds(started(kProbes - 1) - started(0));
  EXPECT_GE(total, (kProbes - 1) * interval * 0.95);
  EXPECT_LE(total, (kProbes - 1) * interval * 1.5 + absl::Milliseconds(200));
}

INSTANTIATE_TEST_SUITE_P(GroupsAndKinds, SharedTargetTest,
                         ::testing::Combine(::testing::Values(1, 5, 50),
                                            ::testing::Values(Kind::kTcp,
                                                              Kind::kHttp)),
                         [](const auto& info) {
                           return absl::StrCat(
                               std::get<0>(info.param), "Groups",
                               std::get<1>(info.param) == Kind::kTcp ? "Tcp"
                                                                     : "Http");
                         });

// ---- Flapping against a reference model ----

// The rise/fall rules written out independently of the registry's code.
struct ReferenceModel {
  uint32_t rise;
  uint32_t fall;
  HealthState state = HealthState::kUnknown;
  uint32_t successes = 0;
  uint32_t failures = 0;

  // Returns the transition, if any.
  std::optional<std::pair<HealthState, HealthState>> Apply(bool ok) {
    const HealthState before = state;
    if (ok) {
      ++successes;
      failures = 0;
    } else {
      ++failures;
      successes = 0;
    }
    switch (state) {
      case HealthState::kUnknown:
        state = ok ? HealthState::kHealthy : HealthState::kUnhealthy;
        break;
      case HealthState::kHealthy:
        if (failures == fall) state = HealthState::kUnhealthy;
        break;
      case HealthState::kUnhealthy:
        if (successes == rise) state = HealthState::kHealthy;
        break;
    }
    if (state == before) {
      return std::nullopt;
    }
    return std::make_pair(before, state);
  }
};

TEST(FlappingTest, ThousandFlipsMatchTheReferenceModel) {
  FakeBackend backend(FakeBackend::Mode::kHttp);
  ASSERT_OK_AND_ASSIGN(uint16_t port, backend.Listen());
  RegistryUnderTest r;
  aside::Mutex mu;
  std::vector<std::pair<HealthState, HealthState>> transitions;
  const uint64_t observer =
      r.registry->AddObserver([&](const HealthTransition& t) {
        aside::MutexLock lock(&mu);
        transitions.emplace_back(t.from, t.to);
      });
  ProbeRecorder recorder(*r.registry);
  const absl::Duration interval = absl::Milliseconds(5);
  HealthCheckSpec spec = ProbeSpec(Kind::kHttp, interval, absl::Seconds(2));
  spec.jitter = 0.2;
  spec.rise = 2;
  spec.fall = 3;
  ASSERT_OK_AND_ASSIGN(HealthHandle h,
                       r.registry->Acquire(Loopback(port), spec, "web"));

  // 1000 flips at random offsets, uniform in 0..2 intervals: half of them
  // less than an interval apart.
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  std::thread flipper([&] {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> gap(
        0, absl::ToInt64Microseconds(2 * interval));
    int status = 200;
    for (int i = 0; i < 1000; ++i) {
      // The flip schedule itself, not a synchronisation.
      std::this_thread::sleep_for(std::chrono::microseconds(gap(rng)));
      status = status == 200 ? 503 : 200;
      backend.SetStatus(status);
    }
  });
  flipper.join();

  // It must settle: healthy once the backend stays up, unhealthy once it
  // stays down.
  backend.SetStatus(200);
  ASSERT_TRUE(recorder.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kHealthy; }, kWait));
  backend.SetStatus(503);
  ASSERT_TRUE(recorder.WaitUntil(
      [&](const auto&) { return h.state() == HealthState::kUnhealthy; },
      kWait));
  h.Reset();
  ASSERT_TRUE(r.registry->FlushForTest(kWait));
  r.registry->RemoveObserver(observer);

  // Replay what the prober observed into the model: every state, count and
  // transition must match.
  auto events = recorder.events();
  ASSERT_GT(events.size(), 500u);
  ReferenceModel model{spec.rise, spec.fall};
  std::vector<std::pair<HealthState, HealthState>> expected;
  for (size_t i = 0; i < events.size(); ++i) {
    const ProbeEvent& e = events[i].event;
    if (auto t = model.Apply(e.result.success)) {
      expected.push_back(*t);
    }
    ASSERT_EQ(e.after.state, model.state) << "result " << i;
    ASSERT_EQ(e.after.consecutive_successes, model.successes) << i;
    ASSERT_EQ(e.after.consecutive_failures, model.failures) << i;
  }
  aside::MutexLock lock(&mu);
  EXPECT_EQ(transitions, expected);
  EXPECT_GT(transitions.size(), 20u) << "the flips should cause flapping";
  EXPECT_EQ(model.state, HealthState::kUnhealthy);

  // And the prober observed what the backend answered, in order.
  auto answers = backend.requests_seen();
  ASSERT_GE(answers.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    ASSERT_EQ(events[i].event.result.success, answers[i].status == 200)
        << "result " << i << ": " << events[i].event.result.reason;
  }
}

// ---- Black holes ----

TEST(BlackHoleTest, ThousandBlackHolesDoNotDelayAHealthyTarget) {
  constexpr int kHoles = 1000;
  // Listeners, accepted sockets and the prober's sockets, with room.
  const uint64_t limit = RaiseFdLimit(4 * kHoles);
  if (limit < 3 * kHoles + 200) {
    GTEST_SKIP() << "RLIMIT_NOFILE is " << limit << " and the hard limit "
                 << "does not allow the " << 3 * kHoles + 200
                 << " descriptors this test needs";
  }
  RegistryUnderTest r;  // default cap: 1000 probes in flight
  ProbeRecorder recorder(*r.registry);
  const int baseline = CountOpenFds();
  ASSERT_GT(baseline, 0);

  auto healthy = std::make_unique<FakeBackend>(FakeBackend::Mode::kHttp);
  auto holes = std::make_unique<FakeBackend>(FakeBackend::Mode::kBlackHole);
  const absl::Duration interval =
      absl::Milliseconds(200) * testing::kSanitizerSlowdown;
  const absl::Duration timeout =
      absl::Milliseconds(100) * testing::kSanitizerSlowdown;
  const HealthCheckSpec spec = ProbeSpec(Kind::kHttp, interval, timeout);
  ASSERT_OK_AND_ASSIGN(uint16_t healthy_port, healthy->Listen());
  ASSERT_OK_AND_ASSIGN(HealthHandle good,
                       r.registry->Acquire(Loopback(healthy_port), spec, "g"));
  ASSERT_OK(recorder.WaitForResult(good.target_id(), 1, kWait).status());

  std::vector<HealthHandle> handles;
  const int64_t start = MonotonicNanos();
  for (int i = 0; i < kHoles; ++i) {
    const std::string ip =
        absl::StrCat("127.0.", 1 + i / 250, ".", 1 + i % 250);
    ASSERT_OK_AND_ASSIGN(uint16_t port, holes->Listen(ip));
    ASSERT_OK_AND_ASSIGN(
        HealthHandle h,
        r.registry->Acquire(absl::StrCat(ip, ":", port), spec, "holes"));
    handles.push_back(std::move(h));
  }
  // Five rounds of black-hole timeouts.
  ASSERT_TRUE(recorder.WaitUntil(
      [&](const auto& events) {
        size_t failures = 0;
        for (const auto& e : events) {
          failures += e.event.result.success ? 0 : 1;
        }
        return failures >= 5 * kHoles;
      },
      kWait));
  const int64_t end = MonotonicNanos();
  EXPECT_GE(holes->accepted(), static_cast<uint64_t>(kHoles));

  // The healthy target's results during that time: all successes, never
  // more than interval + timeout apart (plus scheduling slack).
  auto good_events = recorder.EventsFor(good.target_id());
  int64_t last = 0;
  int64_t max_gap = 0;
  size_t in_window = 0;
  for (const auto& e : good_events) {
    EXPECT_TRUE(e.event.result.success) << e.event.result.reason;
    if (e.seen_nanos >= start && last != 0) {
      max_gap = std::max(max_gap, e.seen_nanos - last);
      ++in_window;
    }
    last = e.seen_nanos;
  }
  max_gap = std::max(max_gap, end - last);
  EXPECT_GE(in_window, 3u);
  const absl::Duration bound =
      interval + timeout +
      absl::Milliseconds(100) * testing::kSanitizerSlowdown;
  EXPECT_LE(absl::Nanoseconds(max_gap), bound)
      << "largest gap between healthy probes: "
      << absl::FormatDuration(absl::Nanoseconds(max_gap));
  std::printf("largest gap between healthy probe results: %s (bound %s)\n",
              absl::FormatDuration(absl::Nanoseconds(max_gap)).c_str(),
              absl::FormatDuration(bound).c_str());
  EXPECT_EQ(good.state(), HealthState::kHealthy);

  // Remove everything: the prober's sockets close with the removal, the
  // backends' with their stop; nothing is left behind.
  handles.clear();
  good.Reset();
  ASSERT_TRUE(r.registry->FlushForTest(kWait));
  EXPECT_EQ(r.registry->size(), 0u);
  holes.reset();
  healthy.reset();
  EXPECT_EQ(CountOpenFds(), baseline);
}

// ---- Removal mid-probe ----

TEST(RemovalTest, RemovingTargetsMidProbeIsHarmless) {
  FakeBackend hole(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t hole_port, hole.Listen());
  // A body that stalls short of the body limit: a probe of it cannot end
  // before its target is released (an endless body reaches the 1 MiB limit
  // on loopback within milliseconds, and that result of a target still
  // registered would be reported, rightly).
  FakeBackend endless(FakeBackend::Mode::kHttp);
  endless.SetReply({FakeBackend::HttpKind::kStalledBody, 200, ""});
  ASSERT_OK_AND_ASSIGN(uint16_t endless_port, endless.Listen());
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  HealthCheckSpec spec =
      ProbeSpec(Kind::kHttp, absl::Seconds(30), absl::Seconds(10));
  // Waiting for the response: removed once the backend has the connection.
  for (int i = 0; i < 30; ++i) {
    ASSERT_OK_AND_ASSIGN(HealthHandle h,
                         r.registry->Acquire(Loopback(hole_port), spec, "a"));
    ASSERT_TRUE(hole.WaitForAccepted(i + 1, kWait));
    h.Reset();
  }
  // Every phase: released at once, after a flush, while the body streams.
  spec.http_body_limit = 1 << 20;
  for (int i = 0; i < 60; ++i) {
    ASSERT_OK_AND_ASSIGN(
        HealthHandle h, r.registry->Acquire(Loopback(endless_port), spec, "a"));
    if (i % 3 == 1) {
      ASSERT_TRUE(r.registry->FlushForTest(kWait));
    } else if (i % 3 == 2) {
      ASSERT_TRUE(endless.WaitForRequests(1, kWait));
    }
  }
  ASSERT_TRUE(r.registry->FlushForTest(kWait));
  EXPECT_EQ(r.registry->size(), 0u);
  // Removed targets report nothing.
  EXPECT_TRUE(recorder.events().empty());
}

TEST(RemovalTest, RemovingAGrpcTargetMidCallCancelsIt) {
  ASSERT_OK_AND_ASSIGN(auto backend, GrpcBackend::Start(true));
  backend->health().SetHang(true);
  RegistryUnderTest r;
  ProbeRecorder recorder(*r.registry);
  HealthCheckSpec spec =
      ProbeSpec(Kind::kGrpc, absl::Seconds(30), absl::Seconds(20));
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK_AND_ASSIGN(HealthHandle h,
                         r.registry->Acquire(backend->address(), spec, "a"));
    ASSERT_TRUE(backend->health().WaitForChecks(i + 1, kWait));
    const int64_t start = MonotonicNanos();
    h.Reset();
    ASSERT_TRUE(r.registry->FlushForTest(kWait));
    // The cancelled call does not hold up the prober.
    EXPECT_LT(MonotonicNanos() - start, 5'000'000'000);
  }
  EXPECT_TRUE(recorder.events().empty());
}

TEST(RemovalTest, DestroyingTheRegistryMidProbeIsHarmless) {
  FakeBackend hole(FakeBackend::Mode::kBlackHole);
  ASSERT_OK_AND_ASSIGN(uint16_t hole_port, hole.Listen());
  ASSERT_OK_AND_ASSIGN(auto grpc_backend, GrpcBackend::Start(true));
  grpc_backend->health().SetHang(true);
  std::vector<HealthHandle> survivors;
  RegistryUnderTest r;
  {
    for (int i = 0; i < 50; ++i) {
      HealthCheckSpec spec =
          ProbeSpec(Kind::kHttp, absl::Seconds(30), absl::Seconds(20));
      spec.http_path = absl::StrCat("/", i);
      ASSERT_OK_AND_ASSIGN(HealthHandle h,
                           r.registry->Acquire(Loopback(hole_port), spec, "a"));
      survivors.push_back(std::move(h));
    }
    ASSERT_OK_AND_ASSIGN(
        HealthHandle g,
        r.registry->Acquire(
            grpc_backend->address(),
            ProbeSpec(Kind::kGrpc, absl::Seconds(30), absl::Seconds(20)), "a"));
    survivors.push_back(std::move(g));
    ASSERT_TRUE(hole.WaitForAccepted(50, kWait));
    ASSERT_TRUE(grpc_backend->health().WaitForChecks(1, kWait));
    const int64_t start = MonotonicNanos();
    r.registry.reset();
    EXPECT_LT(MonotonicNanos() - start, 5'000'000'000);
    // Handles still answer, and their release is harmless.
    for (const HealthHandle& h : survivors) {
      EXPECT_EQ(h.state(), HealthState::kUnknown);
    }
    survivors.resize(10);
  }
  survivors.clear();
}

}  // namespace
}  // namespace aside::server
