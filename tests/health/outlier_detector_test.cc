#include "server/health/outlier_detector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"

namespace aside::server {
namespace {

OutlierSpec Enabled() {
  OutlierSpec spec;
  spec.enabled = true;
  spec.consecutive_failures = 3;
  spec.base_ejection_time = absl::Seconds(30);
  spec.max_ejection_time = absl::Seconds(300);
  spec.max_ejection_percent = 10;
  return spec;
}

std::vector<std::string> Members(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(absl::StrCat("10.0.0.", i + 1, ":80"));
  }
  return out;
}

// Reports `n` failures one by one; returns how many of them ejected.
int Fail(OutlierDetector& d, const std::string& address, int n) {
  int ejected = 0;
  for (int i = 0; i < n; ++i) {
    ejected += d.Report(address, false) ? 1 : 0;
  }
  return ejected;
}

TEST(OutlierDetectorTest, OffByDefault) {
  FakeClock clock;
  OutlierDetector d(OutlierSpec{}, &clock);
  d.SetMembers(Members(3));
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 100), 0);
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  EXPECT_FALSE(d.NextExpiry());
}

TEST(OutlierDetectorTest, ConsecutiveFailuresEjectForTheBaseTime) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 2), 0);
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  EXPECT_TRUE(d.Report("10.0.0.1:80", false));
  EXPECT_TRUE(d.IsEjected("10.0.0.1:80"));
  EXPECT_FALSE(d.IsEjected("10.0.0.2:80"));
  ASSERT_TRUE(d.NextExpiry());
  EXPECT_EQ(*d.NextExpiry(), clock.NowNanos() + 30'000'000'000);
  clock.Advance(absl::Seconds(30) - absl::Nanoseconds(1));
  EXPECT_TRUE(d.IsEjected("10.0.0.1:80"));
  clock.Advance(absl::Nanoseconds(1));
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  EXPECT_FALSE(d.NextExpiry());
}

TEST(OutlierDetectorTest, SuccessResetsTheConsecutiveCount) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(Fail(d, "10.0.0.1:80", 2), 0);
    EXPECT_FALSE(d.Report("10.0.0.1:80", true));
  }
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
}

TEST(OutlierDetectorTest, EjectionTimeGrowsWithTheCountUpToTheMax) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  const std::string a = "10.0.0.1:80";
  for (int n = 1; n <= 12; ++n) {
    ASSERT_EQ(Fail(d, a, 3), 1) << "ejection " << n;
    const int64_t expected = std::min(30 * n, 300);
    EXPECT_EQ(*d.NextExpiry() - clock.NowNanos(), expected * 1'000'000'000LL)
        << "ejection " << n;
    EXPECT_EQ(d.Ejections()[0].count, static_cast<uint32_t>(n));
    clock.Advance(absl::Seconds(expected));  // fails again right on return
    EXPECT_FALSE(d.IsEjected(a));
  }
}

TEST(OutlierDetectorTest, CountDecaysWhileTheBackendBehaves) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  const std::string a = "10.0.0.1:80";
  for (int n = 1; n <= 3; ++n) {
    ASSERT_EQ(Fail(d, a, 3), 1);
    clock.Advance(absl::Seconds(30 * n));
  }
  // Ejected 3 times; 2 base times of good behaviour take 2 off.
  clock.Advance(absl::Seconds(60));
  ASSERT_EQ(Fail(d, a, 3), 1);
  EXPECT_EQ(d.Ejections()[0].count, 2u);
  EXPECT_EQ(*d.NextExpiry() - clock.NowNanos(), 60'000'000'000LL);
}

TEST(OutlierDetectorTest, ReportsWhileEjectedAreIgnored) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  ASSERT_EQ(Fail(d, "10.0.0.1:80", 3), 1);
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 10), 0);
  clock.Advance(absl::Seconds(30));
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  // The count restarted at the ejection: two more failures do not eject.
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 2), 0);
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 1), 1);
}

TEST(OutlierDetectorTest, CapIsAPercentOfMembersRoundedDownButAtLeastOne) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(30));
  EXPECT_EQ(d.MaxEjected(), 3u);  // 10 % of 30, despite binary rounding
  d.SetMembers(Members(29));
  EXPECT_EQ(d.MaxEjected(), 2u);
  d.SetMembers(Members(5));
  EXPECT_EQ(d.MaxEjected(), 1u);  // at least one
  d.SetMembers(Members(1));
  EXPECT_EQ(d.MaxEjected(), 0u);  // never every member
  d.SetMembers({});
  EXPECT_EQ(d.MaxEjected(), 0u);
  OutlierSpec all = Enabled();
  all.max_ejection_percent = 100;
  d.SetSpec(all);
  d.SetMembers(Members(10));
  EXPECT_EQ(d.MaxEjected(), 9u);  // not 10, even at 100 %
  for (int i = 1; i <= 10; ++i) {
    Fail(d, absl::StrCat("10.0.0.", i, ":80"), 10);
  }
  EXPECT_EQ(d.EjectedCount(), 9u);
  OutlierSpec none = Enabled();
  none.max_ejection_percent = 0;
  d.SetSpec(none);
  d.SetMembers(Members(100));
  EXPECT_EQ(d.MaxEjected(), 0u);
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 10), 0);
}

TEST(OutlierDetectorTest, FullCapDefersTheEjectionToTheNextFailure) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));  // cap 1
  ASSERT_EQ(Fail(d, "10.0.0.1:80", 3), 1);
  EXPECT_EQ(Fail(d, "10.0.0.2:80", 5), 0);
  EXPECT_FALSE(d.IsEjected("10.0.0.2:80"));
  EXPECT_EQ(d.EjectedCount(), 1u);
  clock.Advance(absl::Seconds(30));  // the first one returns
  EXPECT_TRUE(d.Report("10.0.0.2:80", false));
  EXPECT_TRUE(d.IsEjected("10.0.0.2:80"));
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
}

TEST(OutlierDetectorTest, BatchedFailuresEqualSingleReports) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  EXPECT_FALSE(d.ReportConsecutiveFailures("10.0.0.1:80", 2));
  EXPECT_TRUE(d.ReportConsecutiveFailures("10.0.0.1:80", 1));
  EXPECT_TRUE(d.ReportConsecutiveFailures("10.0.0.3:80", 0) == false);
  clock.Advance(absl::Seconds(30));
  // A batch far past the threshold ejects once.
  EXPECT_TRUE(d.ReportConsecutiveFailures("10.0.0.1:80", 1000));
  EXPECT_EQ(d.Ejections()[0].count, 2u);
}

TEST(OutlierDetectorTest, BatchesFromReportersContinueOrResetTheRun) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  const std::string a = "10.0.0.1:80";
  EXPECT_FALSE(d.ReportBatch(a, 0, 0, 0));
  EXPECT_FALSE(d.ReportBatch(a, 2, 2, 2));  // all failed: run of 2
  EXPECT_FALSE(d.ReportBatch(a, 5, 1, 1));  // a success reset it: run of 1
  EXPECT_FALSE(d.ReportBatch(a, 1, 1, 1));  // run of 2
  EXPECT_TRUE(d.ReportBatch(a, 1, 1, 1));   // run of 3: ejected
  clock.Advance(absl::Seconds(30));
  // Trailing failures past the threshold eject even after successes, and
  // inconsistent counts are clamped rather than trusted.
  EXPECT_TRUE(d.ReportBatch(a, 10, 4, 99));
}

TEST(OutlierDetectorTest, NonMembersAreIgnoredAndDepartedStateIsDropped) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  EXPECT_EQ(Fail(d, "192.168.0.1:80", 100), 0);
  EXPECT_FALSE(d.IsEjected("192.168.0.1:80"));
  ASSERT_EQ(Fail(d, "10.0.0.1:80", 3), 1);
  d.SetMembers(Members(10));  // unchanged members keep their state
  EXPECT_TRUE(d.IsEjected("10.0.0.1:80"));
  const std::vector<std::string> all = Members(10);
  const std::vector<std::string> without_first(all.begin() + 1, all.end());
  d.SetMembers(without_first);
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  d.SetMembers(Members(10));  // back, clean
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 3), 1);
  EXPECT_EQ(d.Ejections()[0].count, 1u);
}

TEST(OutlierDetectorTest, NextExpiryIsTheEarliestAndEjectionsAreSorted) {
  FakeClock clock;
  OutlierSpec spec = Enabled();
  spec.max_ejection_percent = 50;
  OutlierDetector d(spec, &clock);
  d.SetMembers(Members(10));
  ASSERT_EQ(Fail(d, "10.0.0.3:80", 3), 1);
  clock.Advance(absl::Seconds(10));
  ASSERT_EQ(Fail(d, "10.0.0.2:80", 3), 1);
  EXPECT_EQ(*d.NextExpiry(), clock.NowNanos() + 20'000'000'000LL);
  auto ejections = d.Ejections();
  ASSERT_EQ(ejections.size(), 2u);
  EXPECT_EQ(ejections[0].address, "10.0.0.2:80");
  EXPECT_EQ(ejections[1].address, "10.0.0.3:80");
  EXPECT_EQ(ejections[1].until, clock.WallNow() + absl::Seconds(20));
  EXPECT_TRUE(d.IsEjected("10.0.0.3:80", clock.NowNanos()));
  EXPECT_FALSE(d.IsEjected("10.0.0.3:80", clock.NowNanos() + 20'000'000'000LL));
}

TEST(OutlierDetectorTest, DisablingClearsEjections) {
  FakeClock clock;
  OutlierDetector d(Enabled(), &clock);
  d.SetMembers(Members(10));
  ASSERT_EQ(Fail(d, "10.0.0.1:80", 3), 1);
  EXPECT_TRUE(d.SetSpec(OutlierSpec{}));
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  EXPECT_FALSE(d.SetSpec(Enabled()));
  EXPECT_FALSE(d.IsEjected("10.0.0.1:80"));
  EXPECT_EQ(Fail(d, "10.0.0.1:80", 3), 1);
  EXPECT_EQ(d.Ejections()[0].count, 1u);  // the history was cleared too
}

}  // namespace
}  // namespace aside::server
