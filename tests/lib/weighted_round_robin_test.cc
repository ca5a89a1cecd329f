#include "lib/policies/weighted_round_robin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>

#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;
using ::testing::ElementsAre;

PolicyConfig Wrr() {
  PolicyConfig c;
  c.kind = PolicyKind::kWeightedRoundRobin;
  return c;
}

TableConstPtr Make(const TableOptions& options) {
  auto t = Table::Create(MakeTableSpec(Wrr(), options), nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

uint32_t PickOne(const Table& t) {
  std::array<uint32_t, 1> out;
  EXPECT_EQ(t.Pick({}, absl::MakeSpan(out)), 1u);
  return out[0];
}

TEST(SmoothWeightedCycleTest, MatchesNginxForFiveOneOne) {
  // nginx's smooth weighted round robin: a a b a c a a.
  EXPECT_THAT(SmoothWeightedCycle({5, 1, 1}), ElementsAre(0, 0, 1, 0, 2, 0, 0));
}

TEST(SmoothWeightedCycleTest, ReducesByTheGreatestCommonDivisor) {
  EXPECT_EQ(SmoothWeightedCycle({500, 100, 100}).size(), 7u);
  EXPECT_THAT(SmoothWeightedCycle({0, 0}), ElementsAre());
}

TEST(SmoothWeightedCycleTest, ExactCountsForLargeGroups) {
  // 3000 members with weights 1..3000 sum to 4.5M, past kMaxWrrCycle
  // neither; use distinct coprime-ish weights that stay exact.
  std::vector<uint32_t> weights;
  for (uint32_t i = 0; i < 2000; ++i) {
    weights.push_back(1 + i % 97);
  }
  std::vector<uint32_t> cycle = SmoothWeightedCycle(weights);
  std::vector<uint64_t> counts(weights.size(), 0);
  for (uint32_t i : cycle) {
    counts[i]++;
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    ASSERT_EQ(counts[i], weights[i]) << i;
  }
}

TEST(WeightedRoundRobinTest, ExactCountsOverOneCycleAndInterleaved) {
  TableConstPtr t = Make({.weights = {5, 1, 1}});
  std::map<uint32_t, int> counts;
  int run = 0;
  int longest_run = 0;
  uint32_t last = 99;
  for (int i = 0; i < 7 * 100; ++i) {
    const uint32_t p = PickOne(*t);
    counts[p]++;
    run = p == last ? run + 1 : 1;
    longest_run = std::max(longest_run, run);
    last = p;
  }
  EXPECT_EQ(counts[0], 500);
  EXPECT_EQ(counts[1], 100);
  EXPECT_EQ(counts[2], 100);
  // Smooth: a heavy backend never gets its five picks in a row (the cycle
  // a a b a c a a repeats, so at most four in a row across a boundary).
  EXPECT_LT(longest_run, 5);
}

TEST(WeightedRoundRobinTest, WeightZeroAndUnreadyAreNeverPicked) {
  TableConstPtr t =
      Make({.weights = {3, 0, 2, 4}, .ready = {true, true, true, false}});
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 500; ++i) {
    counts[PickOne(*t)]++;
  }
  EXPECT_EQ(counts[0], 300);
  EXPECT_EQ(counts[2], 200);
  EXPECT_EQ(counts.count(1), 0u);
  EXPECT_EQ(counts.count(3), 0u);
}

TEST(WeightedRoundRobinTest, FallbacksAreDistinctAndComplete) {
  TableConstPtr t = Make({.weights = {5, 1, 1, 0}});
  std::array<uint32_t, 4> out;
  const size_t n = t->Pick({}, absl::MakeSpan(out));
  ASSERT_EQ(n, 3u);
  EXPECT_THAT(std::vector<uint32_t>(out.begin(), out.begin() + n),
              ::testing::UnorderedElementsAre(0u, 1u, 2u));
}

TEST(WeightedRoundRobinTest, ExcludedFirstChoiceFallsBackToTheNextMember) {
  TableConstPtr t = Make({.weights = {5, 1}});
  const std::array<uint32_t, 1> exclude = {0};
  PickRequest r;
  r.exclude = exclude;
  std::array<uint32_t, 1> out;
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
    EXPECT_EQ(out[0], 1u);
  }
}

TEST(WeightedRoundRobinTest, AllZeroPicksNothing) {
  std::array<uint32_t, 1> out;
  EXPECT_EQ(Make({.weights = {0, 0, 0}})->Pick({}, absl::MakeSpan(out)), 0u);
  EXPECT_EQ(Make({.weights = {}})->Pick({}, absl::MakeSpan(out)), 0u);
}

}  // namespace
}  // namespace aside
