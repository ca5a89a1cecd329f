// The probe scheduler on explicit time: no sockets, no sleeps.
#include "server/health/probe_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace aside::server::health_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kT0 = 1'000 * kMs;  // an arbitrary start, on every tick

ProbeScheduler::Timing Every(int64_t interval_ms, int64_t timeout_ms,
                             double jitter = 0, bool track_timeout = true) {
  ProbeScheduler::Timing t;
  t.interval = interval_ms * kMs;
  t.timeout = timeout_ms * kMs;
  t.jitter = jitter;
  t.track_timeout = track_timeout;
  return t;
}

TEST(ProbeSchedulerTest, TicksAreAHundredthOfTheIntervalWithinBounds) {
  EXPECT_EQ(ProbeScheduler::TickFor(1'000 * kMs), 10 * kMs);
  EXPECT_EQ(ProbeScheduler::TickFor(500 * kMs), 5 * kMs);
  EXPECT_EQ(ProbeScheduler::TickFor(10 * kMs), 1 * kMs);       // floor
  EXPECT_EQ(ProbeScheduler::TickFor(60'000 * kMs), 10 * kMs);  // ceiling
  EXPECT_EQ(ProbeScheduler::RoundUpToTick(11, 10), 20);
  EXPECT_EQ(ProbeScheduler::RoundUpToTick(20, 10), 20);
}

TEST(ProbeSchedulerTest, NewTargetStartsAtOnceAndNextProbeFollowsTheInterval) {
  ProbeScheduler s(/*max_in_flight=*/8, /*seed=*/1);
  ProbeScheduler::Actions a;
  s.Add(7, Every(100, 50), kT0, a);
  EXPECT_THAT(a.start, ElementsAre(7u));
  EXPECT_EQ(s.in_flight(), 1u);
  EXPECT_EQ(s.started(7), kT0);
  // Only the timeout is pending while the probe runs.
  EXPECT_EQ(s.NextWake(), kT0 + 50 * kMs);

  a.clear();
  s.Finished(7, kT0 + 3 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  EXPECT_EQ(s.in_flight(), 0u);
  // Due one interval after the previous start, not after its end.
  EXPECT_EQ(s.NextWake(), kT0 + 100 * kMs);

  a.clear();
  s.Poll(kT0 + 99 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  s.Poll(kT0 + 100 * kMs, a);
  EXPECT_THAT(a.start, ElementsAre(7u));
  EXPECT_EQ(s.started(7), kT0 + 100 * kMs);
}

TEST(ProbeSchedulerTest, AtMostOneProbePerTargetInFlight) {
  ProbeScheduler s(8, 1);
  ProbeScheduler::Actions a;
  // gRPC-like: no tracked timeout, so the probe may outlive its interval.
  s.Add(1, Every(100, 1'000, 0, /*track_timeout=*/false), kT0, a);
  ASSERT_THAT(a.start, ElementsAre(1u));
  a.clear();
  // Long past the interval, the first probe still runs: nothing starts.
  s.Poll(kT0 + 500 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  EXPECT_EQ(s.NextWake(), ProbeScheduler::kNever);
  // It ends late: the next one is due at once (its due time has passed).
  s.Finished(1, kT0 + 500 * kMs, a);
  EXPECT_EQ(s.NextWake(), kT0 + 100 * kMs);
  s.Poll(kT0 + 500 * kMs, a);
  EXPECT_THAT(a.start, ElementsAre(1u));
  EXPECT_EQ(s.in_flight(), 1u);
}

TEST(ProbeSchedulerTest, ConcurrencyCapQueuesProbesInTheOrderTheyBecameDue) {
  ProbeScheduler s(/*max_in_flight=*/2, 1);
  ProbeScheduler::Actions a;
  for (uint64_t id = 1; id <= 5; ++id) {
    s.Add(id, Every(100, 50), kT0, a);
  }
  EXPECT_THAT(a.start, ElementsAre(1u, 2u));
  EXPECT_EQ(s.waiting(), 3u);
  EXPECT_EQ(s.in_flight(), 2u);

  a.clear();
  s.Finished(2, kT0 + kMs, a);
  EXPECT_THAT(a.start, ElementsAre(3u));
  a.clear();
  s.Finished(1, kT0 + 2 * kMs, a);
  EXPECT_THAT(a.start, ElementsAre(4u));
  a.clear();
  s.Finished(3, kT0 + 3 * kMs, a);
  EXPECT_THAT(a.start, ElementsAre(5u));
  EXPECT_EQ(s.waiting(), 0u);
  // A queued probe's slot is its start time, not the time it became due.
  EXPECT_EQ(s.started(5), kT0 + 3 * kMs);
}

TEST(ProbeSchedulerTest, TimeoutsAreReportedOnceInStartOrder) {
  ProbeScheduler s(8, 1);
  ProbeScheduler::Actions a;
  s.Add(1, Every(1'000, 200), kT0, a);
  s.Add(2, Every(1'000, 200), kT0 + 30 * kMs, a);
  s.Add(3, Every(1'000, 100), kT0 + 30 * kMs, a);
  ASSERT_THAT(a.start, ElementsAre(1u, 2u, 3u));
  EXPECT_EQ(s.NextWake(), kT0 + 130 * kMs);

  a.clear();
  s.Poll(kT0 + 130 * kMs, a);
  EXPECT_THAT(a.timed_out, ElementsAre(3u));
  a.clear();
  s.Poll(kT0 + 230 * kMs, a);
  EXPECT_THAT(a.timed_out, ElementsAre(1u, 2u));
  a.clear();
  s.Poll(kT0 + 400 * kMs, a);
  EXPECT_THAT(a.timed_out, IsEmpty());  // each once
  // A timed-out probe holds its slot until the caller ends it.
  EXPECT_EQ(s.in_flight(), 3u);
  s.Finished(1, kT0 + 231 * kMs, a);
  EXPECT_EQ(s.in_flight(), 2u);
}

TEST(ProbeSchedulerTest, AProbeThatEndsInTimeIsNotTimedOut) {
  ProbeScheduler s(8, 1);
  ProbeScheduler::Actions a;
  s.Add(1, Every(1'000, 200), kT0, a);
  a.clear();
  s.Finished(1, kT0 + 10 * kMs, a);
  s.Poll(kT0 + 500 * kMs, a);
  EXPECT_THAT(a.timed_out, IsEmpty());
  EXPECT_EQ(s.NextWake(), kT0 + 1'000 * kMs);
}

TEST(ProbeSchedulerTest, RemovedTargetNeverStartsAgainAndFreesItsSlotOnFinish) {
  ProbeScheduler s(/*max_in_flight=*/1, 1);
  ProbeScheduler::Actions a;
  s.Add(1, Every(100, 50), kT0, a);
  s.Add(2, Every(100, 50), kT0, a);
  ASSERT_THAT(a.start, ElementsAre(1u));
  // 1 is removed mid-probe: its timeout is gone, its slot held until it
  // ends; then the queued target starts.
  s.Remove(1);
  EXPECT_EQ(s.NextWake(), ProbeScheduler::kNever);
  a.clear();
  s.Finished(1, kT0 + kMs, a);
  EXPECT_THAT(a.start, ElementsAre(2u));
  EXPECT_EQ(s.size(), 1u);
  a.clear();
  s.Finished(2, kT0 + 2 * kMs, a);
  s.Poll(kT0 + 10'000 * kMs, a);
  EXPECT_THAT(a.start, ElementsAre(2u));  // never 1

  // A target removed while waiting for its next probe: the entry is dropped.
  a.clear();
  s.Finished(2, kT0 + 10'001 * kMs, a);
  s.Remove(2);
  EXPECT_EQ(s.size(), 0u);
  s.Poll(kT0 + 20'000 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  // Finishing an unknown or idle target is ignored.
  s.Finished(99, kT0, a);
  EXPECT_EQ(s.in_flight(), 0u);
}

TEST(ProbeSchedulerTest, RemovalWhileQueuedOrAfterATimeoutStartsNothing) {
  ProbeScheduler s(/*max_in_flight=*/1, 1);
  ProbeScheduler::Actions a;
  s.Add(1, Every(100, 50), kT0, a);
  s.Add(2, Every(100, 50), kT0, a);
  ASSERT_THAT(a.start, ElementsAre(1u));
  ASSERT_EQ(s.waiting(), 1u);
  // 2 is removed while it waits for a slot: it is forgotten at once.
  s.Remove(2);
  EXPECT_EQ(s.size(), 1u);

  // 1 times out, and is removed before its probe has ended.
  a.clear();
  s.Poll(kT0 + 50 * kMs, a);
  ASSERT_THAT(a.timed_out, ElementsAre(1u));
  s.Remove(1);
  a.clear();
  s.Poll(kT0 + 60 * kMs, a);
  EXPECT_THAT(a.timed_out, IsEmpty());
  EXPECT_EQ(s.in_flight(), 1u);  // its slot is held until it ends

  // Its end frees the slot and starts nothing: the queued target is gone.
  s.Finished(1, kT0 + 61 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  EXPECT_EQ(s.in_flight(), 0u);
  EXPECT_EQ(s.waiting(), 0u);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.NextWake(), ProbeScheduler::kNever);
  s.Poll(kT0 + 10'000 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  EXPECT_THAT(a.timed_out, IsEmpty());
}

TEST(ProbeSchedulerTest, JitterSpreadsTheIntervalWithinItsFraction) {
  ProbeScheduler s(8, /*seed=*/42);
  ProbeScheduler::Actions a;
  const int64_t interval = 1'000 * kMs;
  const int64_t tick = ProbeScheduler::TickFor(interval);
  s.Add(1, Every(1'000, 100, /*jitter=*/0.1), kT0, a);
  int64_t now = kT0;
  int64_t low = INT64_MAX;
  int64_t high = 0;
  for (int i = 0; i < 500; ++i) {
    a.clear();
    const int64_t started = s.started(1);
    s.Finished(1, now, a);
    const int64_t due = s.NextWake();
    const int64_t gap = due - started;
    low = std::min(low, gap);
    high = std::max(high, gap);
    EXPECT_EQ(due % tick, 0);
    now = due;
    s.Poll(now, a);
    ASSERT_THAT(a.start, ElementsAre(1u));
  }
  EXPECT_GE(low, interval * 9 / 10);
  EXPECT_LE(high, interval * 11 / 10 + tick);
  // Spread over most of the range, not stuck at one value.
  EXPECT_LT(low, interval * 93 / 100);
  EXPECT_GT(high, interval * 107 / 100);
}

TEST(ProbeSchedulerTest, TargetsDueInOneTickStartTogether) {
  ProbeScheduler s(8, 1);
  ProbeScheduler::Actions a;
  // 1 s interval: 10 ms ticks. Starts 3 ms apart fall due in one tick.
  s.Add(1, Every(1'000, 100), kT0 + 1 * kMs, a);
  s.Add(2, Every(1'000, 100), kT0 + 4 * kMs, a);
  a.clear();
  s.Finished(1, kT0 + 5 * kMs, a);
  s.Finished(2, kT0 + 6 * kMs, a);
  EXPECT_EQ(s.NextWake(), kT0 + 1'010 * kMs);
  s.Poll(kT0 + 1'010 * kMs, a);
  EXPECT_THAT(a.start, ElementsAre(1u, 2u));
}

TEST(ProbeSchedulerTest, ClearForgetsEverything) {
  ProbeScheduler s(1, 1);
  ProbeScheduler::Actions a;
  s.Add(1, Every(100, 50), kT0, a);
  s.Add(2, Every(100, 50), kT0, a);
  s.Clear();
  EXPECT_EQ(s.in_flight(), 0u);
  EXPECT_EQ(s.size(), 0u);
  EXPECT_EQ(s.NextWake(), ProbeScheduler::kNever);
  a.clear();
  s.Finished(1, kT0, a);
  s.Poll(kT0 + 1'000 * kMs, a);
  EXPECT_THAT(a.start, IsEmpty());
  EXPECT_THAT(a.timed_out, IsEmpty());
}

}  // namespace
}  // namespace aside::server::health_internal
