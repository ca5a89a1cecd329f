#include "lib/policies/round_robin.h"

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

PolicyConfig RoundRobin() { return PolicyConfig{}; }

TableConstPtr Make(TableOptions options) {
  auto t =
      Table::Create(MakeTableSpec(RoundRobin(), options), nullptr, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

uint32_t PickOne(const Table& t, const PickRequest& r = {}) {
  std::array<uint32_t, 1> out;
  EXPECT_EQ(t.Pick(r, absl::MakeSpan(out)), 1u);
  return out[0];
}

TEST(RoundRobinTest, CyclesThroughMembersInOrder) {
  TableConstPtr t = Make({.weights = {1, 5, 1, 1}});
  const uint32_t first = PickOne(*t);
  for (uint32_t i = 1; i < 12; ++i) {
    EXPECT_EQ(PickOne(*t), (first + i) % 4);
  }
}

TEST(RoundRobinTest, SkipsIneligibleMembersAndNeverPicksWeightZero) {
  TableConstPtr t =
      Make({.weights = {100, 0, 100, 100}, .ready = {true, true, false, true}});
  std::map<uint32_t, int> counts;
  for (int i = 0; i < 1000; ++i) {
    counts[PickOne(*t)]++;
  }
  EXPECT_EQ(counts.count(1), 0u);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[3], 0);
}

TEST(RoundRobinTest, OnePickAdvancesThePositionOnceEvenWithFallbacks) {
  TableConstPtr t = Make({.weights = {1, 1, 1, 1, 1}});
  const uint32_t first = PickOne(*t);
  std::array<uint32_t, 5> out;
  // A pick with four fallbacks still moves the position by exactly one.
  ASSERT_EQ(t->Pick({}, absl::MakeSpan(out)), 5u);
  EXPECT_EQ(out[0], (first + 1) % 5);
  EXPECT_EQ(PickOne(*t), (first + 2) % 5);
}

TEST(RoundRobinTest, FallbacksVisitEachEligibleMemberOnce) {
  TableConstPtr t =
      Make({.weights = {1, 1, 0, 1}, .ready = {true, false, true, true}});
  std::array<uint32_t, 8> out;
  const size_t n = t->Pick({}, absl::MakeSpan(out));
  ASSERT_EQ(n, 2u);
  EXPECT_THAT(std::vector<uint32_t>(out.begin(), out.begin() + n),
              ::testing::UnorderedElementsAre(0u, 3u));
}

TEST(RoundRobinTest, HonoursExclusions) {
  TableConstPtr t = Make({.weights = {1, 1, 1}});
  const std::array<uint32_t, 2> exclude = {0, 2};
  PickRequest r;
  r.exclude = exclude;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(PickOne(*t, r), 1u);
  }
  const std::array<uint32_t, 3> all = {0, 1, 2};
  r.exclude = all;
  std::array<uint32_t, 1> out;
  EXPECT_EQ(t->Pick(r, absl::MakeSpan(out)), 0u);
}

TEST(RoundRobinTest, EmptyAllZeroAndAllUnreadyPickNothing) {
  std::array<uint32_t, 1> out;
  EXPECT_EQ(Make({.weights = {}})->Pick({}, absl::MakeSpan(out)), 0u);
  EXPECT_EQ(Make({.weights = {0, 0}})->Pick({}, absl::MakeSpan(out)), 0u);
  EXPECT_EQ(Make({.weights = {1, 1}, .ready = {false, false}})
                ->Pick({}, absl::MakeSpan(out)),
            0u);
}

TEST(RoundRobinTest, StartsAtARandomPosition) {
  // Over many fresh tables, the first pick is not always the same member.
  std::map<uint32_t, int> firsts;
  for (int i = 0; i < 200; ++i) {
    firsts[PickOne(*Make({.weights = {1, 1, 1, 1}}))]++;
  }
  EXPECT_GT(firsts.size(), 1u);
}

}  // namespace
}  // namespace aside
