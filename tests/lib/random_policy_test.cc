#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>

#include "lib/policies/weighted_random.h"
#include "lib/random.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;

TableConstPtr Make(TableOptions options) {
  PolicyConfig c;
  c.kind = PolicyKind::kRandom;
  auto t = Table::Create(MakeTableSpec(c, options), nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

TEST(RandomPolicyTest, DrawsInProportionToWeight) {
  TableConstPtr t = Make({.weights = {1, 2, 3, 4, 0}});
  FastRng rng(2026);
  std::map<uint32_t, int> counts;
  std::array<uint32_t, 1> out;
  constexpr int kDraws = 200000;
  for (int i = 0; i < kDraws; ++i) {
    PickRequest r;
    r.rng = &rng;
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
    counts[out[0]]++;
  }
  for (uint32_t m = 0; m < 4; ++m) {
    const double p = (m + 1) / 10.0;
    const double sd = std::sqrt(kDraws * p * (1 - p));
    EXPECT_NEAR(counts[m], kDraws * p, 5 * sd) << m;
  }
  EXPECT_EQ(counts.count(4), 0u);
}

TEST(RandomPolicyTest, SkewedWeightsStayExact) {
  // One heavy member among many light ones: the alias table's integer
  // thresholds keep the light ones' share.
  std::vector<uint32_t> weights(50, 1);
  weights[7] = 10000;
  TableConstPtr t = Make({.weights = weights});
  FastRng rng(7);
  int light = 0;
  std::array<uint32_t, 1> out;
  constexpr int kDraws = 500000;
  for (int i = 0; i < kDraws; ++i) {
    PickRequest r;
    r.rng = &rng;
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
    light += out[0] != 7 ? 1 : 0;
  }
  const double p = 49.0 / 10049.0;
  EXPECT_NEAR(light, kDraws * p, 5 * std::sqrt(kDraws * p));
}

TEST(RandomPolicyTest, FallbacksAreDistinctAndComplete) {
  TableConstPtr t = Make(
      {.weights = {5, 1, 0, 1, 1}, .ready = {true, true, true, false, true}});
  FastRng rng(1);
  for (int i = 0; i < 500; ++i) {
    std::array<uint32_t, 5> out;
    PickRequest r;
    r.rng = &rng;
    const size_t n = t->Pick(r, absl::MakeSpan(out));
    ASSERT_EQ(n, 3u);
    ASSERT_EQ(std::set<uint32_t>(out.begin(), out.begin() + n),
              (std::set<uint32_t>{0, 1, 4}));
  }
}

}  // namespace
}  // namespace aside
