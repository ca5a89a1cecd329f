#include "server/load/load_aggregator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

class LoadAggregatorTest : public ::testing::Test {
 protected:
  LoadAggregatorTest()
      : loads_(&clock_, absl::Seconds(10),
               [this](const std::string& g, const std::string& a) {
                 return g == "web" && (a == "10.0.0.1:80" ||
                                       (a == "10.0.0.2:80" && second_member_));
               }) {
    loads_.set_listener(
        [this](const LoadAggregator::Accepted& a) { accepted_.push_back(a); });
  }

  static LoadObservation Obs(uint64_t requests, uint64_t failures,
                             absl::Duration latency_sum,
                             const char* address = "10.0.0.1:80") {
    LoadObservation o;
    o.group = "web";
    o.address = address;
    o.requests = requests;
    o.failures = failures;
    o.latency_sum_nanos = absl::ToInt64Nanoseconds(latency_sum);
    return o;
  }

  FakeClock clock_;
  bool second_member_ = true;
  LoadAggregator loads_;
  std::vector<LoadAggregator::Accepted> accepted_;
};

TEST_F(LoadAggregatorTest, FirstReportIsABaselineThenDeltasCount) {
  // The reporter counted 1000 requests before we ever heard of it.
  ASSERT_OK(loads_.Add("a", Obs(1000, 10, absl::Seconds(10))));
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_requests, 0u);
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(loads_.Add(
      "a", Obs(1100, 15, absl::Seconds(10) + absl::Milliseconds(500))));
  const LoadSnapshot s = loads_.Snapshot("web", "10.0.0.1:80");
  EXPECT_EQ(s.window_requests, 100u);
  EXPECT_EQ(s.window_failures, 5u);
  EXPECT_DOUBLE_EQ(s.failure_ratio, 0.05);
  EXPECT_EQ(s.mean_latency, absl::Milliseconds(5));
  EXPECT_DOUBLE_EQ(s.requests_per_second, 10);
  EXPECT_EQ(s.reporters, 1u);
  ASSERT_EQ(accepted_.size(), 1u);
  EXPECT_EQ(accepted_[0].new_requests, 100u);
  EXPECT_EQ(accepted_[0].mean_latency, absl::Milliseconds(5));
}

TEST_F(LoadAggregatorTest, AggregatesAcrossReportersAndExpiresWithTheWindow) {
  ASSERT_OK(loads_.Add("a", Obs(0, 0, absl::ZeroDuration())));
  ASSERT_OK(loads_.Add("b", Obs(0, 0, absl::ZeroDuration())));
  LoadObservation a = Obs(100, 0, absl::Milliseconds(100));
  a.in_flight = 3;
  LoadObservation b = Obs(300, 30, absl::Milliseconds(900));
  b.in_flight = 4;
  ASSERT_OK(loads_.Add("a", a));
  ASSERT_OK(loads_.Add("b", b));
  LoadSnapshot s = loads_.Snapshot("web", "10.0.0.1:80");
  EXPECT_EQ(s.window_requests, 400u);
  EXPECT_EQ(s.mean_latency, absl::Microseconds(2500));
  EXPECT_EQ(s.in_flight, 7u);
  EXPECT_EQ(s.reporters, 2u);
  clock_.Advance(absl::Seconds(11));
  s = loads_.Snapshot("web", "10.0.0.1:80");
  EXPECT_EQ(s.window_requests, 0u);
  EXPECT_EQ(s.in_flight, 0u);  // stale reporters no longer count
  EXPECT_EQ(s.reporters, 0u);
}

TEST_F(LoadAggregatorTest, BadObservationsAreRejectedAndChangeNothing) {
  ASSERT_OK(loads_.Add("a", Obs(100, 0, absl::Seconds(1))));
  ASSERT_OK(loads_.Add("a", Obs(200, 0, absl::Seconds(2))));
  const LoadSnapshot before = loads_.Snapshot("web", "10.0.0.1:80");

  EXPECT_THAT(loads_.Add("a", Obs(150, 0, absl::Seconds(3))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("went backwards")));
  EXPECT_THAT(loads_.Add("a", Obs(300, 400, absl::Seconds(3))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("failures: 400 exceeds requests")));
  LoadObservation nan = Obs(300, 0, absl::Seconds(3));
  nan.cpu = std::nan("");
  EXPECT_THAT(loads_.Add("a", nan), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("utilization.cpu")));
  LoadObservation inf = Obs(300, 0, absl::Seconds(3));
  inf.application = INFINITY;
  EXPECT_FALSE(loads_.Add("a", inf).ok());
  LoadObservation negative = Obs(300, 0, absl::Seconds(3));
  negative.cpu = -0.5;
  EXPECT_FALSE(loads_.Add("a", negative).ok());
  LoadObservation negative_latency = Obs(300, 0, absl::Seconds(3));
  negative_latency.latency_sum_nanos = -1;
  EXPECT_FALSE(loads_.Add("a", negative_latency).ok());
  EXPECT_THAT(loads_.Add("a", Obs(300, 0, absl::Seconds(3), "10.9.9.9:80")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("not a backend of group 'web'")));
  LoadObservation other_group = Obs(300, 0, absl::Seconds(3));
  other_group.group = "api";
  EXPECT_FALSE(loads_.Add("a", other_group).ok());

  const LoadSnapshot after = loads_.Snapshot("web", "10.0.0.1:80");
  EXPECT_EQ(after.window_requests, before.window_requests);
  EXPECT_EQ(after.mean_latency, before.mean_latency);
  EXPECT_FALSE(after.utilization.has_value());
  // The reporter's baseline is unchanged too: the next good report counts
  // from 200.
  ASSERT_OK(
      loads_.Add("a", Obs(250, 0, absl::Seconds(2) + absl::Milliseconds(50))));
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_requests, 150u);
}

TEST_F(LoadAggregatorTest, ResetStartsANewBaselineWithTheReportedCounts) {
  ASSERT_OK(loads_.Add("a", Obs(1000, 0, absl::Seconds(1))));
  LoadObservation restarted = Obs(20, 1, absl::Milliseconds(40));
  restarted.reset = true;
  ASSERT_OK(loads_.Add("a", restarted));
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_requests, 20u);
  ASSERT_OK(loads_.Add("a", Obs(30, 1, absl::Milliseconds(60))));
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_requests, 30u);
}

TEST_F(LoadAggregatorTest, DeltaReportersAddAsTheyCome) {
  LoadObservation d = Obs(50, 5, absl::ZeroDuration());
  d.deltas = true;
  ASSERT_OK(loads_.Add("grpclb", d));
  ASSERT_OK(loads_.Add("grpclb", d));
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_requests, 100u);
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_failures, 10u);
}

TEST_F(LoadAggregatorTest, OverloadLevelsAreReadOnceASecondForEveryEdge) {
  // 2000 calls in the 10 s window: 200/s against a limit of 100/s.
  ASSERT_OK(loads_.AddClientStats("web", 2000, 2000, 0, 2000, {}));
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("web", 100), 0.5);
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("web", 0), 0);
  // More calls within the second: every caller still gets the same level.
  ASSERT_OK(loads_.AddClientStats("web", 2000, 2000, 0, 2000, {}));
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("web", 100), 0.5);
  clock_.Advance(absl::Seconds(1));
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("web", 100), 0.75);  // 400/s
  // A new limit is read at once; the level never passes 0.9.
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("web", 10),
                   LoadAggregator::kMaxOverloadFraction);
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("web", 1000), 0);
  EXPECT_DOUBLE_EQ(loads_.OverloadFraction("api", 100), 0);
}

TEST_F(LoadAggregatorTest, GrpclbClientStatsCountInTheGroupRate) {
  // Stock grpclb clients report no per-backend counts, only their calls
  // (a drop counts as started and finished): the group's rate, which
  // drives overload drops, must include them.
  ASSERT_OK(loads_.Add("a", Obs(0, 0, absl::ZeroDuration())));
  ASSERT_OK(loads_.Add("a", Obs(100, 0, absl::ZeroDuration())));
  ASSERT_OK(loads_.AddClientStats("web", 210, 200, 0, 150,
                                  {{"drop/web/overload", 50}}));
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(loads_.AddClientStats("web", 100, 100, 0, 100, {}));
  EXPECT_DOUBLE_EQ(loads_.GroupRequestsPerSecond("web"), 40);  // 400 / 10 s
  EXPECT_DOUBLE_EQ(loads_.GroupRequestsPerSecond("api"), 0);
  // Not a backend's load: the per-backend view is ReportLoad's alone.
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").window_requests, 100u);
  // Out of the window, out of the rate; the totals stay.
  clock_.Advance(absl::Seconds(10));
  loads_.Prune();
  EXPECT_DOUBLE_EQ(loads_.GroupRequestsPerSecond("web"), 0);
  EXPECT_EQ(loads_.ClientStats("web").calls_finished, 300u);
}

TEST_F(LoadAggregatorTest, UtilisationPrefersApplicationOverCpu) {
  LoadObservation o = Obs(0, 0, absl::ZeroDuration());
  o.cpu = 0.9;
  ASSERT_OK(loads_.Add("a", o));
  EXPECT_DOUBLE_EQ(*loads_.Snapshot("web", "10.0.0.1:80").utilization, 0.9);
  o.application = 0.4;
  ASSERT_OK(loads_.Add("a", o));
  EXPECT_DOUBLE_EQ(*loads_.Snapshot("web", "10.0.0.1:80").utilization, 0.4);
}

TEST_F(LoadAggregatorTest, PruneForgetsBackendsThatLeft) {
  ASSERT_OK(loads_.Add("a", Obs(0, 0, absl::ZeroDuration(), "10.0.0.2:80")));
  ASSERT_OK(loads_.Add("a", Obs(0, 0, absl::ZeroDuration())));
  loads_.Prune();
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.2:80").reporters, 1u);
  second_member_ = false;
  loads_.Prune();
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.2:80").reporters, 0u);
  EXPECT_EQ(loads_.Snapshot("web", "10.0.0.1:80").reporters, 1u);
}

}  // namespace
}  // namespace aside::server
