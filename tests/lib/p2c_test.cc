#include "lib/policies/p2c.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>

#include "lib/clock.h"
#include "lib/random.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;

PolicyConfig P2c(P2cParams::Load load,
                 absl::Duration decay = P2cParams().decay) {
  PolicyConfig c;
  c.kind = PolicyKind::kP2c;
  c.p2c.load = load;
  c.p2c.decay = decay;
  return c;
}

struct Fixture {
  LoadTracker loads;
  TableConstPtr table;
};

void Make(Fixture& f, P2cParams::Load load, TableOptions options,
          absl::Duration decay = P2cParams().decay) {
  auto t = Table::Create(MakeTableSpec(P2c(load, decay), options), nullptr,
                         &f.loads);
  ASSERT_TRUE(t.ok()) << t.status();
  f.table = *t;
}

uint32_t PickOne(const Table& t, FastRng& rng, int64_t now = 0) {
  std::array<uint32_t, 1> out;
  PickRequest r;
  r.rng = &rng;
  r.now_nanos = now;
  EXPECT_EQ(t.Pick(r, absl::MakeSpan(out)), 1u);
  return out[0];
}

TEST(P2cTest, DrawsTwoDistinctBackends) {
  // With a distinct second draw the most loaded backend never wins; were
  // the two draws ever equal it would be picked alone now and then.
  for (size_t n : {2, 3, 5}) {
    Fixture f;
    Make(f, P2cParams::Load::kPending,
         {.weights = std::vector<uint32_t>(n, 1)});
    for (int i = 0; i < 50; ++i) {
      f.table->member(0).load->Start();
    }
    FastRng rng(n);
    std::map<uint32_t, int> counts;
    for (int i = 0; i < 20000; ++i) {
      counts[PickOne(*f.table, rng)]++;
    }
    EXPECT_EQ(counts.count(0), 0u) << n;
    // The others are equally loaded: each wins about equally often.
    for (uint32_t m = 1; m < n; ++m) {
      EXPECT_NEAR(counts[m], 20000.0 / static_cast<double>(n - 1), 600) << n;
    }
  }
}

TEST(P2cTest, EqualLoadsSpreadUniformly) {
  Fixture f;
  Make(f, P2cParams::Load::kPending, {.weights = {1, 1, 1, 1}});
  FastRng rng(3);
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 40000; ++i) {
    counts[PickOne(*f.table, rng)]++;
  }
  for (uint32_t m = 0; m < 4; ++m) {
    EXPECT_NEAR(counts[m], 10000, 400) << m;
  }
}

TEST(P2cTest, PendingIsDividedByWeight) {
  Fixture f;
  Make(f, P2cParams::Load::kPending, {.weights = {2, 1}});
  for (int i = 0; i < 3; ++i) {
    f.table->member(0).load->Start();  // 3 / 2 = 1.5
  }
  for (int i = 0; i < 2; ++i) {
    f.table->member(1).load->Start();  // 2 / 1 = 2
  }
  FastRng rng(1);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(PickOne(*f.table, rng), 0u);
  }
  f.table->member(0).load->Start();  // 4 / 2 = 2: a tie, either may win
  f.table->member(0).load->Start();  // 5 / 2 = 2.5
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(PickOne(*f.table, rng), 1u);
  }
}

TEST(P2cTest, PeakEwmaFollowsItsDefinitionUnderAnInjectedClock) {
  Fixture f;
  Make(f, P2cParams::Load::kPeakEwma, {.weights = {1, 1}}, absl::Seconds(10));
  FakeClock clock;
  const LoadModel& model = f.table->load_model();
  BackendLoad& slow = *f.table->member(0).load;
  BackendLoad& fast = *f.table->member(1).load;
  auto done = [&](BackendLoad& load, int64_t ms) {
    Completion c;
    c.now_nanos = clock.NowNanos();
    c.latency_nanos = ms * 1'000'000;
    load.Start();
    load.Finish(c, model);
  };
  done(slow, 100);
  done(fast, 20);
  FastRng rng(5);
  EXPECT_EQ(PickOne(*f.table, rng, clock.NowNanos()), 1u);
  // 20 s later (tau 10 s): slow 100 e^-2 = 13.5 ms, fast 20 e^-2 = 2.7 ms;
  // ten requests in flight on the fast one make it 2.7 * 11 = 29.8 ms.
  clock.Advance(absl::Seconds(20));
  for (int i = 0; i < 10; ++i) {
    fast.Start();
  }
  EXPECT_EQ(PickOne(*f.table, rng, clock.NowNanos()), 0u);
  // A new peak on the slow one counts at once.
  done(slow, 500);
  EXPECT_EQ(PickOne(*f.table, rng, clock.NowNanos()), 1u);
}

TEST(P2cTest, NewBackendsStartAtTheDefaultRtt) {
  Fixture f;
  Make(f, P2cParams::Load::kPeakEwma, {.weights = {1, 1}});
  const LoadModel& model = f.table->load_model();
  FakeClock clock;
  Completion c;
  c.now_nanos = clock.NowNanos();
  c.latency_nanos = 50'000'000;  // 50 ms > the 30 ms default
  f.table->member(0).load->Finish(c, model);
  FastRng rng(9);
  EXPECT_EQ(PickOne(*f.table, rng, clock.NowNanos()), 1u);
  c.latency_nanos = 10'000'000;
  Fixture g;
  Make(g, P2cParams::Load::kPeakEwma, {.weights = {1, 1}});
  g.table->member(0).load->Finish(c, g.table->load_model());
  EXPECT_EQ(PickOne(*g.table, rng, clock.NowNanos()), 0u);
}

TEST(P2cTest, ANewBackendsDefaultRttDecaysSoItIsTriedInAFastFleet) {
  // Backend 0 answers in 2 ms, far under the 30 ms default of backend 1,
  // which has no sample. The default decays from when the backend was
  // first seen (tau 10 s here, 1 s by default): it wins once
  // 30 ms * exp(-t / 10 s) < 2 ms, after about 27 s, instead of never.
  FakeClock clock;
  LoadTracker loads(&clock);
  auto made = Table::Create(
      MakeTableSpec(P2c(P2cParams::Load::kPeakEwma, absl::Seconds(10)),
                    {.weights = {1, 1}}),
      nullptr, &loads);
  ASSERT_OK(made);
  const TableConstPtr t = *made;
  FastRng rng(5);
  auto tick = [&] {  // one second of backend 0 answering in 2 ms
    clock.Advance(absl::Seconds(1));
    Completion c;
    c.now_nanos = clock.NowNanos();
    c.latency_nanos = 2'000'000;
    t->member(0).load->Start();
    t->member(0).load->Finish(c, t->load_model());
  };
  tick();
  EXPECT_EQ(PickOne(*t, rng, clock.NowNanos()), 0u);
  for (int s = 1; s < 20; ++s) {
    tick();
  }
  EXPECT_EQ(PickOne(*t, rng, clock.NowNanos()), 0u);  // 30 * e^-2 = 4.1 ms
  for (int s = 20; s < 30; ++s) {
    tick();
  }
  EXPECT_EQ(PickOne(*t, rng, clock.NowNanos()), 1u);  // 30 * e^-3 = 1.5 ms
  // Its first sample replaces the default at once.
  Completion slow;
  slow.now_nanos = clock.NowNanos();
  slow.latency_nanos = 20'000'000;
  t->member(1).load->Start();
  t->member(1).load->Finish(slow, t->load_model());
  EXPECT_EQ(PickOne(*t, rng, clock.NowNanos()), 0u);
}

TEST(P2cTest, FallbacksAreTheOtherDrawThenTheRest) {
  Fixture f;
  Make(f, P2cParams::Load::kPending,
       {.weights = {1, 1, 0, 1, 1}, .ready = {true, true, true, true, false}});
  FastRng rng(11);
  for (int i = 0; i < 200; ++i) {
    std::array<uint32_t, 5> out;
    PickRequest r;
    r.rng = &rng;
    const size_t n = f.table->Pick(r, absl::MakeSpan(out));
    ASSERT_EQ(n, 3u);
    std::set<uint32_t> seen(out.begin(), out.begin() + n);
    ASSERT_EQ(seen, (std::set<uint32_t>{0, 1, 3}));
  }
}

}  // namespace
}  // namespace aside
