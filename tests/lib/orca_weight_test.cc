#include "lib/load/orca_weight.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace aside {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

OrcaLoad Load(double qps, double cpu, double eps = 0, double app = 0) {
  OrcaLoad l;
  l.qps = qps;
  l.cpu_utilization = cpu;
  l.eps = eps;
  l.application_utilization = app;
  return l;
}

TEST(OrcaReportWeightTest, IsQpsOverUtilisationWithTheErrorPenalty) {
  EXPECT_DOUBLE_EQ(OrcaReportWeight(Load(100, 0.2), 1.0), 500);
  // eps/qps * penalty is added to the utilisation: 100 / (0.2 + 0.1 * 2).
  EXPECT_DOUBLE_EQ(OrcaReportWeight(Load(100, 0.2, 10), 2.0), 250);
  // A penalty of 0 ignores errors.
  EXPECT_DOUBLE_EQ(OrcaReportWeight(Load(100, 0.2, 10), 0.0), 500);
  // Application utilisation wins over CPU when set.
  EXPECT_DOUBLE_EQ(OrcaReportWeight(Load(100, 0.2, 0, 0.5), 1.0), 200);
}

TEST(OrcaReportWeightTest, ReportsWithoutASignalCarryNone) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(OrcaReportWeight(Load(0, 0.5), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(100, 0), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(-5, 0.5), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(100, -0.5), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(nan, 0.5), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(100, nan), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(inf, 0.5), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(100, 0.5, inf), 1.0), 0);
  EXPECT_EQ(OrcaReportWeight(Load(1e308, 1e-308), 1.0), 0);  // overflows
}

TEST(OrcaEndpointWeightTest, BlackoutThenWeightThenExpiry) {
  OrcaWeightParams p;
  p.blackout_nanos = 10 * kSecond;
  p.expiration_nanos = 180 * kSecond;
  OrcaEndpointWeight w;
  EXPECT_EQ(w.Weight(0, p), 0);
  EXPECT_EQ(w.NextChange(0, p), std::nullopt);
  w.OnReport(Load(100, 0.2), 1 * kSecond, p);
  EXPECT_EQ(w.Weight(1 * kSecond, p), 0);  // blackout
  EXPECT_EQ(w.NextChange(1 * kSecond, p), 11 * kSecond);
  w.OnReport(Load(100, 0.5), 10 * kSecond, p);
  EXPECT_EQ(w.Weight(10 * kSecond, p), 0);
  EXPECT_DOUBLE_EQ(w.Weight(11 * kSecond, p), 200);  // the last report's
  EXPECT_EQ(w.NextChange(11 * kSecond, p), 190 * kSecond);
  EXPECT_DOUBLE_EQ(w.Weight(189 * kSecond, p), 200);
  EXPECT_EQ(w.Weight(190 * kSecond, p), 0);  // expired
  // After an expiry the blackout starts again.
  w.OnReport(Load(100, 0.5), 200 * kSecond, p);
  EXPECT_EQ(w.Weight(205 * kSecond, p), 0);
  EXPECT_DOUBLE_EQ(w.Weight(210 * kSecond, p), 200);
}

TEST(OrcaEndpointWeightTest, AReportWithoutSignalNeitherCountsNorRefreshes) {
  OrcaWeightParams p;
  p.blackout_nanos = 0;
  p.expiration_nanos = 10 * kSecond;
  OrcaEndpointWeight w;
  w.OnReport(Load(100, 0.25), 0, p);
  EXPECT_DOUBLE_EQ(w.Weight(0, p), 400);
  w.OnReport(Load(0, 0.25), 5 * kSecond, p);  // idle backend: no qps
  EXPECT_DOUBLE_EQ(w.Weight(9 * kSecond, p), 400);
  EXPECT_EQ(w.Weight(10 * kSecond, p), 0);
}

TEST(OrcaTableWeightsTest, UsableWeightsScaledOthersTakeTheMean) {
  EXPECT_THAT(OrcaTableWeights({}), testing::IsEmpty());
  EXPECT_THAT(OrcaTableWeights({0, 0}), testing::IsEmpty());
  // 500 : 500 : 125, the largest is the scale.
  EXPECT_THAT(OrcaTableWeights({500, 500, 125}),
              testing::ElementsAre(1000, 1000, 250));
  // The one without a weight gets the mean of the others (300).
  EXPECT_THAT(OrcaTableWeights({400, 0, 200}),
              testing::ElementsAre(1000, 750, 500));
  // Never below 1.
  EXPECT_THAT(OrcaTableWeights({1e6, 1}), testing::ElementsAre(1000, 1));
}

}  // namespace
}  // namespace aside
