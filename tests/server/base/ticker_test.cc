// Ticker (server/base/stream_set.h): runs on its interval, and soon after
// Wake() whatever the interval.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/time/time.h"
#include "server/base/stream_set.h"

namespace aside::server {
namespace {

// Waits (bounded) until `count` reaches `at_least`.
bool WaitFor(const std::atomic<int>& count, int at_least) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (count.load() < at_least) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(TickerTest, WakeRunsTheTickWithoutWaitingForTheInterval) {
  std::atomic<int> runs{0};
  Ticker ticker("test-ticker", absl::Hours(24), [&runs] { ++runs; });
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
TEST(TickerTest, WakesDuringARunMakeOneMoreRun) {
  std::atomic<int> runs{0};
  std::atomic<bool> release{false};
  Ticker ticker("test-ticker", absl::Hours(24), [&] {
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

TEST(TickerTest, TheIntervalStillRuns) {
  std::atomic<int> runs{0};
  Ticker ticker("test-ticker", absl::Milliseconds(5), [&runs] { ++runs; });
  ASSERT_TRUE(WaitFor(runs, 3));
}

}  // namespace
}  // namespace aside::server
