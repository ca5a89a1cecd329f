#include "lib/policies/least_time.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>

#include "lib/clock.h"
#include "lib/random.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;
using ::testing::ElementsAre;

// Estimates return to the default with age, so samples and picks share one
// time unless a test moves it.
constexpr int64_t kNow = 1'000'000'000;

struct Fixture {
  LoadTracker loads;
  TableConstPtr table;
};

void Make(Fixture& f, TableOptions options,
          LeastTimeParams::Metric metric = LeastTimeParams::Metric::kLastByte,
          absl::Duration default_latency = absl::Milliseconds(10)) {
  PolicyConfig c;
  c.kind = PolicyKind::kLeastTime;
  c.least_time.metric = metric;
  c.least_time.default_latency = default_latency;
  auto t = Table::Create(MakeTableSpec(c, options), nullptr, &f.loads);
  ASSERT_TRUE(t.ok()) << t.status();
  f.table = *t;
}

void Record(const Fixture& f, uint32_t member, int64_t last_ms,
            int64_t first_ms = -1) {
  Completion c;
  c.now_nanos = kNow;
  c.latency_nanos = last_ms * 1'000'000;
  c.first_byte_nanos = first_ms < 0 ? -1 : first_ms * 1'000'000;
  f.table->member(member).load->Start();
  f.table->member(member).load->Finish(c, f.table->load_model());
}

std::vector<uint32_t> PickAll(const Table& t, size_t n, FastRng& rng,
                              int64_t now = kNow) {
  std::vector<uint32_t> out(n);
  PickRequest r;
  r.rng = &rng;
  r.now_nanos = now;
  out.resize(t.Pick(r, absl::MakeSpan(out)));
  return out;
}

TEST(LeastTimeTest, PicksTheLowestEwmaThenTheNextLowest) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1, 1}});
  Record(f, 0, 50);
  Record(f, 1, 20);
  Record(f, 2, 30);
  Record(f, 3, 40);
  FastRng rng(1);
  EXPECT_THAT(PickAll(*f.table, 4, rng), ElementsAre(1, 2, 3, 0));
  // Samples move the EWMA: 1 gets slower (0.3 * 100 + 0.7 * 20 = 44 ms).
  Record(f, 1, 100);
  EXPECT_THAT(PickAll(*f.table, 2, rng), ElementsAre(2, 3));
}

TEST(LeastTimeTest, NewBackendsGetTheDefaultLatency) {
  Fixture f;
  Make(f, {.weights = {1, 1}});
  Record(f, 0, 50);
  FastRng rng(2);
  EXPECT_THAT(PickAll(*f.table, 1, rng), ElementsAre(1));  // default 10 ms
  Fixture g;
  Make(g, {.weights = {1, 1}}, LeastTimeParams::Metric::kLastByte,
       absl::Milliseconds(80));
  Record(g, 0, 50);
  EXPECT_THAT(PickAll(*g.table, 1, rng), ElementsAre(0));  // default 80 ms
}

TEST(LeastTimeTest, TiesAreBrokenRandomly) {
  Fixture f;
  Make(f, {.weights = {1, 1, 1, 1}});
  Record(f, 3, 500);  // the only one with a (slow) sample
  FastRng rng(3);
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 30000; ++i) {
    counts[PickAll(*f.table, 1, rng)[0]]++;
  }
  EXPECT_EQ(counts.count(3), 0u);
  for (uint32_t m = 0; m < 3; ++m) {
    EXPECT_NEAR(counts[m], 10000, 400) << m;
  }
}

TEST(LeastTimeTest, FirstByteMetricReadsTheFirstByteEwma) {
  Fixture f;
  Make(f, {.weights = {1, 1}}, LeastTimeParams::Metric::kFirstByte);
  Record(f, 0, /*last*/ 10, /*first*/ 9);
  Record(f, 1, /*last*/ 90, /*first*/ 2);
  FastRng rng(4);
  EXPECT_THAT(PickAll(*f.table, 2, rng), ElementsAre(1, 0));
}

TEST(LeastTimeTest, CallsInFlightMultiplyTheEstimate) {
  Fixture f;
  Make(f, {.weights = {1, 1}});
  Record(f, 0, 10);
  Record(f, 1, 25);
  FastRng rng(6);
  EXPECT_THAT(PickAll(*f.table, 1, rng), ElementsAre(0));
  // Two calls queued on the fast one: 10 ms × 3 > 25 ms × 1, before either
  // completes.
  f.table->member(0).load->Start();
  EXPECT_THAT(PickAll(*f.table, 1, rng), ElementsAre(0));  // 20 < 25
  f.table->member(0).load->Start();
  EXPECT_THAT(PickAll(*f.table, 1, rng), ElementsAre(1));
}

TEST(LeastTimeTest, AnEstimateNobodyRefreshesReturnsToTheDefault) {
  Fixture f;
  Make(f, {.weights = {1, 1}});  // default 10 ms
  Record(f, 0, 200);             // was slow once
  Completion c;
  c.latency_nanos = 20'000'000;
  FastRng rng(7);
  // Backend 1 answers in 20 ms, every 100 ms.
  auto tick = [&](int64_t t) {
    c.now_nanos = t;
    f.table->member(1).load->Start();
    f.table->member(1).load->Finish(c, f.table->load_model());
  };
  tick(kNow);
  EXPECT_THAT(PickAll(*f.table, 1, rng), ElementsAre(1));
  // After 3 s, 10 + 190 e^-3 = 19.5 ms < 20 ms: tried again.
  int64_t t = kNow;
  for (; t < kNow + 3'000'000'000; t += 100'000'000) {
    tick(t);
    ASSERT_THAT(PickAll(*f.table, 1, rng, t), ElementsAre(1)) << t;
  }
  tick(t);
  EXPECT_THAT(PickAll(*f.table, 1, rng, t), ElementsAre(0));
  const LoadModel& model = f.table->load_model();
  EXPECT_NEAR(f.table->member(0).load->LeastTimeCost(kNow + 3'000'000'000,
                                                     model, false),
              10e6 + 190e6 * std::exp(-3.0), 1e3);
  EXPECT_NEAR(f.table->member(0).load->LeastTimeCost(kNow + 3600'000'000'000,
                                                     model, false),
              10e6, 1);
}

TEST(LeastTimeTest, WeightZeroAndUnreadyAreSkipped) {
  Fixture f;
  Make(f, {.weights = {1, 0, 1}, .ready = {false, true, true}});
  Record(f, 0, 1);
  Record(f, 1, 1);
  Record(f, 2, 99);
  FastRng rng(5);
  EXPECT_THAT(PickAll(*f.table, 3, rng), ElementsAre(2));
}

}  // namespace
}  // namespace aside
