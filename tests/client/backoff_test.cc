#include "client/backoff.h"

#include <gtest/gtest.h>

#include <vector>

namespace aside {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

TEST(BackoffTest, WithoutJitterDelaysGrowBy1Point6UpTo120Seconds) {
  // uniform01 = 0.5 is the middle of the jitter range: no spread.
  Backoff backoff(BackoffOptions{}, [] { return 0.5; });
  const std::vector<double> expected = {
      1.0,         1.6,          2.56,           4.096,
      6.5536,      10.48576,     16.777216,      26.8435456,
      42.94967296, 68.719476736, 109.9511627776, 120.0,
      120.0};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(Seconds(backoff.Next()), expected[i], 1e-6) << "attempt " << i;
  }
}

TEST(BackoffTest, JitterSpreadsEachDelayByAtMostTwentyPercent) {
  // The lowest and highest draws give exactly -20% and +20% (the upper end
  // is exclusive, so approach it).
  std::vector<double> draws = {0.0, 0.999999999, 0.0, 0.999999999};
  size_t next = 0;
  Backoff backoff(BackoffOptions{},
                  [&] { return draws[next++ % draws.size()]; });
  EXPECT_NEAR(Seconds(backoff.Next()), 0.8, 1e-6);
  EXPECT_NEAR(Seconds(backoff.Next()), 1.6 * 1.2, 1e-6);
  EXPECT_NEAR(Seconds(backoff.Next()), 2.56 * 0.8, 1e-6);
  EXPECT_NEAR(Seconds(backoff.Next()), 4.096 * 1.2, 1e-6);
}

TEST(BackoffTest, CappedDelaysStayWithinJitterOfTheMaximum) {
  double u = 0.0;
  Backoff backoff(BackoffOptions{}, [&] {
    u += 0.37;
    u -= static_cast<int>(u);
    return u;
  });
  for (int i = 0; i < 15; ++i) {
    backoff.Next();
  }
  for (int i = 0; i < 100; ++i) {
    const double d = Seconds(backoff.Next());
    EXPECT_GE(d, 96.0);
    EXPECT_LE(d, 144.0);
  }
}

TEST(BackoffTest, ResetStartsOverAtTheInitialDelay) {
  Backoff backoff(BackoffOptions{}, [] { return 0.5; });
  backoff.Next();
  backoff.Next();
  backoff.Next();
  backoff.Reset();
  EXPECT_NEAR(Seconds(backoff.Next()), 1.0, 1e-9);
  EXPECT_NEAR(Seconds(backoff.Next()), 1.6, 1e-9);
}

TEST(BackoffTest, TheDefaultRandomSourceStaysInRange) {
  Backoff backoff(BackoffOptions{});
  const double d = Seconds(backoff.Next());
  EXPECT_GE(d, 0.8);
  EXPECT_LE(d, 1.2);
}

}  // namespace
}  // namespace aside
