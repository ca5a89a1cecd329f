#include "server/health/slow_start.h"

#include <gtest/gtest.h>

#include "lib/clock.h"

namespace aside::server {
namespace {

constexpr absl::Duration kWindow = absl::Seconds(100);

TEST(SlowStartTest, RampsFromTenPercentToFull) {
  FakeClock clock;
  const int64_t t0 = clock.NowNanos();
  EXPECT_EQ(SlowStartWeight(100, t0, clock.NowNanos(), kWindow), 10u);
  clock.Advance(absl::Seconds(5));  // 5 % of the window: still the floor
  EXPECT_EQ(SlowStartWeight(100, t0, clock.NowNanos(), kWindow), 10u);
  clock.Advance(absl::Seconds(20));
  EXPECT_EQ(SlowStartWeight(100, t0, clock.NowNanos(), kWindow), 25u);
  clock.Advance(absl::Seconds(50));
  EXPECT_EQ(SlowStartWeight(100, t0, clock.NowNanos(), kWindow), 75u);
  clock.Advance(absl::Seconds(25));
  EXPECT_EQ(SlowStartWeight(100, t0, clock.NowNanos(), kWindow), 100u);
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(SlowStartWeight(100, t0, clock.NowNanos(), kWindow), 100u);
}

TEST(SlowStartTest, NeverDrainsARampingBackend) {
  FakeClock clock;
  const int64_t t0 = clock.NowNanos();
  EXPECT_EQ(SlowStartWeight(1, t0, clock.NowNanos(), kWindow), 1u);
  EXPECT_EQ(SlowStartWeight(3, t0, clock.NowNanos(), kWindow), 1u);
  EXPECT_EQ(SlowStartWeight(0, t0, clock.NowNanos(), kWindow), 0u);
}

TEST(SlowStartTest, OffWithoutAWindow) {
  FakeClock clock;
  const int64_t t0 = clock.NowNanos();
  EXPECT_EQ(SlowStartWeight(100, t0, t0, absl::ZeroDuration()), 100u);
  EXPECT_FALSE(NextSlowStartRebuild(t0, t0, absl::ZeroDuration()));
  EXPECT_DOUBLE_EQ(SlowStartFactor(t0, t0, absl::ZeroDuration()), 1.0);
}

TEST(SlowStartTest, RebuildTicksEveryTenthOfTheWindowUntilTheEnd) {
  FakeClock clock;
  const int64_t t0 = clock.NowNanos();
  const int64_t step = absl::ToInt64Nanoseconds(kWindow / 10);
  EXPECT_EQ(NextSlowStartRebuild(t0, t0, kWindow), t0 + step);
  EXPECT_EQ(NextSlowStartRebuild(t0, t0 + step - 1, kWindow), t0 + step);
  EXPECT_EQ(NextSlowStartRebuild(t0, t0 + step, kWindow), t0 + 2 * step);
  EXPECT_EQ(NextSlowStartRebuild(t0, t0 + 9 * step + 5, kWindow),
            t0 + 10 * step);
  EXPECT_FALSE(NextSlowStartRebuild(t0, t0 + 10 * step, kWindow));
  // Following the ticks walks the weight up in tenths.
  int64_t now = t0;
  uint32_t last = 0;
  int ticks = 0;
  while (auto next = NextSlowStartRebuild(t0, now, kWindow)) {
    now = *next;
    const uint32_t weight = SlowStartWeight(1000, t0, now, kWindow);
    EXPECT_GT(weight, last);
    last = weight;
    ++ticks;
  }
  EXPECT_EQ(ticks, 10);
  EXPECT_EQ(last, 1000u);
}

TEST(SlowStartTest, FutureStartDoesNotRamp) {
  FakeClock clock;
  const int64_t now = clock.NowNanos();
  EXPECT_EQ(SlowStartWeight(100, now + 1'000'000, now, kWindow), 100u);
  EXPECT_FALSE(NextSlowStartRebuild(now + 1'000'000, now, kWindow));
}

}  // namespace
}  // namespace aside::server
