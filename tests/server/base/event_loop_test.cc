// EventLoop, LoopTimer and Ticker (server/base/event_loop.h): a Ticker runs
// on its interval and soon after Wake(), on a thread of its own or on a
// loop; a LoopTimer never runs once stopped, and its Stop waits for a run in
// progress but not for itself.
#include "server/base/event_loop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/time/time.h"
#include "tests/testing/eventually.h"

namespace aside::server {
namespace {

using ::aside::testing::Eventually;

// Waits (bounded) until `count` reaches `at_least`.
bool WaitFor(const std::atomic<int>& count, int at_least) {
  return Eventually([&] { return count.load() >= at_least; },
                    absl::Seconds(10));
}

// Ticker's tests run on a thread of its own and on a loop.
class TickerTest : public ::testing::TestWithParam<bool> {
 protected:
  EventLoop* loop() { return GetParam() ? &loop_ : nullptr; }
  EventLoop loop_{"test-loop"};
};

TEST_P(TickerTest, WakeRunsTheTickWithoutWaitingForTheInterval) {
  std::atomic<int> runs{0};
  Ticker ticker(loop(), "test-ticker", absl::Hours(24), [&runs] { ++runs; });
  EXPECT_EQ(runs.load(), 0);
  ticker.Wake();
  ASSERT_TRUE(WaitFor(runs, 1));
  ticker.Wake();
  ASSERT_TRUE(WaitFor(runs, 2));
  ticker.Stop();
  EXPECT_EQ(runs.load(), 2);
}

// Wakes that come while a run is in progress make one more run, not one
// per wake.
TEST_P(TickerTest, WakesDuringARunMakeOneMoreRun) {
  std::atomic<int> runs{0};
  std::atomic<bool> release{false};
  Ticker ticker(loop(), "test-ticker", absl::Hours(24), [&] {
    ++runs;
    while (!release.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  ticker.Wake();
  ASSERT_TRUE(WaitFor(runs, 1));
  for (int i = 0; i < 5; ++i) {
    ticker.Wake();
  }
  release = true;
  ASSERT_TRUE(WaitFor(runs, 2));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ticker.Stop();
  EXPECT_EQ(runs.load(), 2);
}

TEST_P(TickerTest, TheIntervalStillRuns) {
  std::atomic<int> runs{0};
  Ticker ticker(loop(), "test-ticker", absl::Milliseconds(5),
                [&runs] { ++runs; });
  ASSERT_TRUE(WaitFor(runs, 3));
}

INSTANTIATE_TEST_SUITE_P(ThreadAndLoop, TickerTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "OnALoop" : "OwnThread";
                         });

// Stop returns only once a run in progress has ended, and nothing runs
// after it: the run's state may go at once.
TEST(LoopTimerTest, StopWaitsForARunInProgressAndNothingRunsAfter) {
  EventLoop loop("test-loop");
  std::atomic<int> runs{0};
  std::atomic<bool> inside{false};
  std::atomic<bool> release{false};
  auto timer = std::make_unique<LoopTimer>(&loop, [&](bool) {
    inside = true;
    while (!release.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ++runs;
    inside = false;
  });
  timer->RunSoon();
  ASSERT_TRUE(Eventually([&] { return inside.load(); }));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  timer->Stop();
  EXPECT_FALSE(inside.load());
  EXPECT_EQ(runs.load(), 1);
  releaser.join();
  // Asked for after the stop: never runs.
  timer->RunSoon();
  timer->RunAfter(absl::ZeroDuration());
  timer.reset();
  std::atomic<bool> drained{false};
  loop.Post([&] { drained = true; });
  ASSERT_TRUE(Eventually([&] { return drained.load(); }));
  EXPECT_EQ(runs.load(), 1);
}

// Two times asked for: one run, at the earlier; a later one asked for
// while an earlier is pending folds into it.
TEST(LoopTimerTest, TheEarliestTimeAskedForWins) {
  EventLoop loop("test-loop");
  std::atomic<int> due_runs{0};
  LoopTimer timer(&loop, [&](bool due) {
    if (due) {
      ++due_runs;
    }
  });
  timer.RunAfter(absl::Hours(1));
  timer.RunAfter(absl::Milliseconds(1));
  timer.RunAfter(absl::Hours(2));
  ASSERT_TRUE(WaitFor(due_runs, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(due_runs.load(), 1);
}

// A timer stopped on the loop's thread (from another timer's run) does
// not wait for the loop, which would never come.
TEST(LoopTimerTest, StopOnTheLoopThreadDoesNotWaitForItself) {
  EventLoop loop("test-loop");
  auto victim = std::make_unique<LoopTimer>(&loop, [](bool) {});
  victim->RunAfter(absl::Hours(1));
  std::atomic<bool> stopped{false};
  LoopTimer stopper(&loop, [&](bool) {
    EXPECT_TRUE(loop.InLoop());
    victim.reset();
    stopped = true;
  });
  stopper.RunSoon();
  ASSERT_TRUE(Eventually([&] { return stopped.load(); }));
  EXPECT_FALSE(loop.InLoop());
}

}  // namespace
}  // namespace aside::server
