#include "server/health/health_state.h"

#include <gtest/gtest.h>

#include <limits>

namespace aside::server {
namespace {

TEST(HealthStateTest, FirstResultDecidesAtOnce) {
  HealthCounters up;
  EXPECT_TRUE(ApplyProbeResult(2, 3, true, up));
  EXPECT_EQ(up.state, HealthState::kHealthy);
  HealthCounters down;
  EXPECT_TRUE(ApplyProbeResult(2, 3, false, down));
  EXPECT_EQ(down.state, HealthState::kUnhealthy);
}

TEST(HealthStateTest, FallNeedsConsecutiveFailures) {
  HealthCounters c{HealthState::kHealthy};
  EXPECT_FALSE(ApplyProbeResult(2, 3, false, c));
  EXPECT_FALSE(ApplyProbeResult(2, 3, false, c));
  EXPECT_FALSE(ApplyProbeResult(2, 3, true, c));  // resets the run
  EXPECT_EQ(c.consecutive_failures, 0u);
  EXPECT_FALSE(ApplyProbeResult(2, 3, false, c));
  EXPECT_FALSE(ApplyProbeResult(2, 3, false, c));
  EXPECT_EQ(c.state, HealthState::kHealthy);
  EXPECT_TRUE(ApplyProbeResult(2, 3, false, c));
  EXPECT_EQ(c.state, HealthState::kUnhealthy);
  EXPECT_EQ(c.consecutive_failures, 3u);
  EXPECT_EQ(c.consecutive_successes, 0u);
}

TEST(HealthStateTest, RiseNeedsConsecutiveSuccesses) {
  HealthCounters c{HealthState::kUnhealthy};
  EXPECT_FALSE(ApplyProbeResult(2, 3, true, c));
  EXPECT_FALSE(ApplyProbeResult(2, 3, false, c));
  EXPECT_FALSE(ApplyProbeResult(2, 3, true, c));
  EXPECT_EQ(c.state, HealthState::kUnhealthy);
  EXPECT_TRUE(ApplyProbeResult(2, 3, true, c));
  EXPECT_EQ(c.state, HealthState::kHealthy);
}

TEST(HealthStateTest, ThresholdsOfOneFlipOnEveryChange) {
  HealthCounters c{HealthState::kHealthy};
  EXPECT_TRUE(ApplyProbeResult(1, 1, false, c));
  EXPECT_TRUE(ApplyProbeResult(1, 1, true, c));
  EXPECT_FALSE(ApplyProbeResult(1, 1, true, c));
}

TEST(HealthStateTest, CountsSaturate) {
  HealthCounters c{HealthState::kHealthy, std::numeric_limits<uint32_t>::max(),
                   0};
  EXPECT_FALSE(ApplyProbeResult(2, 3, true, c));
  EXPECT_EQ(c.consecutive_successes, std::numeric_limits<uint32_t>::max());
}

TEST(HealthStateTest, ReadinessOfUnknownDependsOnRequireFirstProbe) {
  EXPECT_TRUE(HealthReady(HealthState::kUnknown, false));
  EXPECT_FALSE(HealthReady(HealthState::kUnknown, true));
  EXPECT_TRUE(HealthReady(HealthState::kHealthy, true));
  EXPECT_FALSE(HealthReady(HealthState::kUnhealthy, false));
}

}  // namespace
}  // namespace aside::server
