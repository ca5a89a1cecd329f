#include "lib/policies/prequal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>

#include "lib/random.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;

constexpr int64_t kNow = 5'000'000'000;
constexpr double kMs = 1e6;

struct Fixture {
  LoadTracker loads;
  TableConstPtr table;
};

// own_weight 1 unless a test says otherwise: the tests below count one
// call as one.
void Make(Fixture& f, TableOptions options, uint32_t pool_size = 4,
          double own_weight = 1) {
  PolicyConfig c;
  c.kind = PolicyKind::kPrequal;
  c.prequal.pool_size = pool_size;
  c.prequal.own_weight = own_weight;
  auto t = Table::Create(MakeTableSpec(c, options), nullptr, &f.loads);
  ASSERT_TRUE(t.ok()) << t.status();
  f.table = *t;
}

BackendLoad& Load(const Fixture& f, uint32_t member) {
  return *f.table->member(member).load;
}

// One call to `member` that failed at kNow.
void FailOneCall(const Fixture& f, uint32_t member) {
  Completion failed;
  failed.now_nanos = kNow;
  failed.latency_nanos = 100'000;
  failed.ok = false;
  Load(f, member).Start();
  Load(f, member).Finish(failed, f.table->load_model());
}

uint32_t PickOne(const Fixture& f, FastRng& rng, int64_t now = kNow,
                 absl::Span<const uint32_t> exclude = {}) {
  std::array<uint32_t, 1> out;
  PickRequest r;
  r.rng = &rng;
  r.now_nanos = now;
  r.exclude = exclude;
  EXPECT_EQ(f.table->Pick(r, absl::MakeSpan(out)), 1u);
  return out[0];
}

TEST(PrequalTest, PicksTheColdBackendWithTheLowestLatency) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1, 1}});
  Load(f, 0).Report(1, 30 * kMs, kNow);
  Load(f, 1).Report(2, 10 * kMs, kNow);
  Load(f, 2).Report(9, 5 * kMs, kNow);  // fastest, but hot
  Load(f, 3).Report(0, 20 * kMs, kNow);
  FastRng rng(1);
  // RIFs 0 1 2 9: the 0.84 quantile is 2, so only 9 is hot.
  EXPECT_EQ(PickOne(f, rng), 1u);
  // Excluded (a retry): the next coldest-fastest.
  const uint32_t excluded[] = {1};
  EXPECT_EQ(PickOne(f, rng, kNow, excluded), 3u);
}

TEST(PrequalTest, OwnCallsSinceTheReportCount) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1, 1}});
  Load(f, 0).Report(1, 30 * kMs, kNow);
  Load(f, 1).Report(2, 10 * kMs, kNow);
  Load(f, 2).Report(9, 5 * kMs, kNow);
  Load(f, 3).Report(0, 20 * kMs, kNow);
  for (int i = 0; i < 4; ++i) {
    Load(f, 1).Start();
  }
  const ReportedLoad r = Load(f, 1).Reported();
  EXPECT_EQ(r.rif, 6);
  EXPECT_NEAR(r.latency_nanos, 10 * kMs * 7 / 3, 1e3);
  FastRng rng(2);
  // 1 is still cold (6 is the quantile now) but at 23 ms: 3 answers first.
  EXPECT_EQ(PickOne(f, rng), 3u);
  // A new report replaces the correction.
  Load(f, 1).Report(2, 10 * kMs, kNow + 1);
  EXPECT_EQ(Load(f, 1).Reported().rif, 2);
  EXPECT_EQ(PickOne(f, rng, kNow + 1), 1u);
}

TEST(PrequalTest, OwnCallsCountOwnWeightTimes) {
  Fixture f;
  Make(f, {.weights = {1, 1}});
  Load(f, 0).Report(2, 10 * kMs, kNow);
  Load(f, 0).Start();
  // Other clients send where this one does: its call counts 4 times by
  // default, and the latency follows.
  EXPECT_EQ(Load(f, 0).Reported(4).rif, 6);
  EXPECT_NEAR(Load(f, 0).Reported(4).latency_nanos, 10 * kMs * 7 / 3, 1e3);
  // Its calls answered since the report take off as much, down to 0.
  Completion done;
  done.now_nanos = kNow;
  done.latency_nanos = kMs;
  Load(f, 0).Finish(done, f.table->load_model());
  Load(f, 0).Finish(done, f.table->load_model());
  EXPECT_EQ(Load(f, 0).Reported(4).rif, 0);
  EXPECT_NEAR(Load(f, 0).Reported(4).latency_nanos, 10 * kMs, 1e3);
}

TEST(PrequalTest, OwnWeightTurnsAPickAway) {
  for (const double weight : {1.0, 4.0}) {
    Fixture f;
    Make(f, {.weights = {1, 1}}, 4, weight);
    Load(f, 0).Report(2, 10 * kMs, kNow);
    Load(f, 1).Report(3, 14 * kMs, kNow);
    Load(f, 0).Start();
    FastRng rng(4);
    // Counted once, 0 is at RIF 3 and 13.3 ms, cold and fastest; counted
    // 4 times, at RIF 6 and 23.3 ms, hot.
    EXPECT_EQ(PickOne(f, rng), weight == 1 ? 0u : 1u) << weight;
  }
}

TEST(PrequalTest, AReportOnACallStillInFlightDoesNotCountThatCall) {
  Fixture f;
  Make(f, {.weights = {1}});
  // Two calls in flight; the answer to one carries RIF 5, counted by the
  // backend after it answered.
  Load(f, 0).Start();
  Load(f, 0).Start();
  Load(f, 0).Report(5, 10 * kMs, kNow, /*own_excluded=*/1);
  EXPECT_EQ(Load(f, 0).Reported().rif, 6);  // the other call is still out
  Completion done;
  done.now_nanos = kNow;
  done.latency_nanos = kMs;
  Load(f, 0).Finish(done, f.table->load_model());
  EXPECT_EQ(Load(f, 0).Reported().rif, 5);
}

TEST(PrequalTest, AFailureMakesABackendHotForMaxAge) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1}});
  // A sinkhole reports no load at all.
  Load(f, 0).Report(0, 0, kNow);
  Load(f, 1).Report(1, 10 * kMs, kNow);
  Load(f, 2).Report(1, 12 * kMs, kNow);
  FastRng rng(3);
  EXPECT_EQ(PickOne(f, rng), 0u);
  FailOneCall(f, 0);
  EXPECT_EQ(Load(f, 0).last_failure_nanos(), kNow);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(PickOne(f, rng), 1u);
  }
  // Fresh reports again after the failure's max_age (1 s).
  const int64_t later = kNow + 1'100'000'000;
  Load(f, 0).Report(0, 0, later);
  Load(f, 1).Report(1, 10 * kMs, later);
  Load(f, 2).Report(1, 12 * kMs, later);
  EXPECT_EQ(PickOne(f, rng, later), 0u);
}

TEST(PrequalTest, ABackendWhoseReportWentStaleGetsACallToReportAgain) {
  Fixture f;
  Make(f, {.weights = {1, 1}});
  Load(f, 0).Report(0, 1 * kMs, kNow);
  Load(f, 1).Report(40, 400 * kMs, kNow);  // slow and hot
  FastRng rng(5);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(PickOne(f, rng), 0u);
  }
  // 1 has been picked by no one for over max_age (1 s), so it reported
  // nothing since: one call goes there to hear from it again, and no
  // second one while that call is out.
  const int64_t later = kNow + 1'500'000'000;
  Load(f, 0).Report(0, 1 * kMs, later);
  EXPECT_EQ(PickOne(f, rng, later), 1u);
  Load(f, 1).Start();
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(PickOne(f, rng, later), 0u);
  }
  // Its answer reports it idle and fast now: it takes its turn again.
  Load(f, 1).Report(0, 0.5 * kMs, later, /*own_excluded=*/1);
  Completion done;
  done.now_nanos = later;
  done.latency_nanos = kMs;
  Load(f, 1).Finish(done, f.table->load_model());
  EXPECT_EQ(PickOne(f, rng, later), 1u);
}

TEST(PrequalTest, ExplorationsAreFourPerMaxAge) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1, 1, 1, 1}}, 6);
  Load(f, 0).Report(0, 1 * kMs, kNow);  // 1..5 have never reported
  FastRng rng(7);
  const uint32_t first = PickOne(f, rng);
  EXPECT_NE(first, 0u);
  Load(f, first).Start();
  // The next one waits a quarter of max_age (1 s).
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(PickOne(f, rng, kNow + 249'000'000), 0u);
  }
  const uint32_t second = PickOne(f, rng, kNow + 250'000'000);
  EXPECT_NE(second, 0u);
  EXPECT_NE(second, first);  // the first has a call out there
}

TEST(PrequalTest, ABackendThatFailedLatelyIsNotExplored) {
  Fixture f;
  Make(f, {.weights = {1, 1}});
  Load(f, 0).Report(0, 1 * kMs, kNow);
  FailOneCall(f, 1);
  FastRng rng(6);
  // 2 s after its failure 1 has no report, but waits 4 max_ages.
  int64_t at = kNow + 2'000'000'000;
  Load(f, 0).Report(0, 1 * kMs, at);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(PickOne(f, rng, at), 0u);
  }
  at = kNow + 4'500'000'000;
  Load(f, 0).Report(0, 1 * kMs, at);
  EXPECT_EQ(PickOne(f, rng, at), 1u);
}

TEST(PrequalTest, WithoutFreshReportsItReadsItsOwnView) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1}});
  Load(f, 0).Report(0, 1 * kMs, kNow);  // stale by the time of the pick
  Completion c;
  c.now_nanos = kNow;
  c.latency_nanos = 40'000'000;
  Load(f, 0).Start();
  Load(f, 0).Finish(c, f.table->load_model());
  c.latency_nanos = 20'000'000;
  Load(f, 1).Start();
  Load(f, 1).Finish(c, f.table->load_model());
  c.latency_nanos = 5'000'000;
  Load(f, 2).Start();
  Load(f, 2).Finish(c, f.table->load_model());
  const int64_t later = kNow + 2'000'000'000;
  FastRng rng(4);
  EXPECT_EQ(PickOne(f, rng, later), 2u);
  // Four of its own calls in flight there make it the hot one.
  for (int i = 0; i < 4; ++i) {
    Load(f, 2).Start();
  }
  EXPECT_EQ(PickOne(f, rng, later), 1u);
}

TEST(PrequalTest, PoolsAreDrawnAtRandomAndSpreadIdleBackends) {
  Fixture f;
  Make(f, {.weights = std::vector<uint32_t>(20, 1)});
  for (uint32_t m = 0; m < 20; ++m) {
    Load(f, m).Report(0, 10 * kMs, kNow);
  }
  FastRng rng(5);
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 20000; ++i) {
    counts[PickOne(f, rng)]++;
  }
  ASSERT_EQ(counts.size(), 20u);
  for (const auto& [member, n] : counts) {
    EXPECT_NEAR(n, 1000, 150) << member;
  }
}

TEST(PrequalTest, WeightZeroAndUnreadyAreNeverPicked) {
  Fixture f;
  Make(f, {.weights = {1, 0, 1}, .ready = {false, true, true}});
  Load(f, 0).Report(0, 1 * kMs, kNow);
  Load(f, 1).Report(0, 1 * kMs, kNow);
  Load(f, 2).Report(50, 90 * kMs, kNow);
  FastRng rng(6);
  EXPECT_EQ(PickOne(f, rng), 2u);
}

}  // namespace
}  // namespace aside
