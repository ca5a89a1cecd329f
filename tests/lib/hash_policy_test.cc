#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "lib/policies/hash.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;

PolicyConfig HashPolicy() {
  PolicyConfig c;
  c.kind = PolicyKind::kHash;
  return c;
}

// The seed's backends: 10.0.0.1:80, 10.0.0.2:80, ... (address order is
// index order for up to 9 of them).
TableSpec SeedSpec(std::vector<uint32_t> weights,
                   std::vector<bool> ready = {}) {
  TableSpec spec = MakeTableSpec(
      HashPolicy(), {.weights = weights, .ready = std::move(ready)});
  for (size_t i = 0; i < spec.members.size(); ++i) {
    spec.members[i].backend.address = absl::StrCat("10.0.0.", i + 1, ":80");
  }
  return spec;
}

TableConstPtr Make(TableSpec spec, const Table* previous = nullptr) {
  auto t = Table::Create(std::move(spec), previous, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

std::vector<int> FirstChoiceCounts(const Table& t, int keys) {
  std::vector<int> counts(t.size(), 0);
  std::array<uint32_t, 1> out;
  for (int i = 0; i < keys; ++i) {
    const std::string key = absl::StrCat("key-", i);
    PickRequest r;
    r.key = key;
    EXPECT_EQ(t.Pick(r, absl::MakeSpan(out)), 1u);
    counts[out[0]]++;
  }
  return counts;
}

TEST(Fnv1a64Test, MatchesTheReferenceVectors) {
  // From the FNV reference (draft-eastlake-fnv): FNV-1a 64.
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(HashPolicyTest, ReproducesPingoraFnvDistributionOverFourBackends) {
  TableConstPtr t = Make(SeedSpec({1, 1, 1, 1}));
  EXPECT_THAT(FirstChoiceCounts(*t, 100000),
              ::testing::ElementsAre(24999, 25001, 25001, 24999));
}

TEST(HashPolicyTest, ReproducesPingoraFnvDistributionForWeightsOneToFour) {
  TableConstPtr t = Make(SeedSpec({1, 2, 3, 4}));
  EXPECT_THAT(FirstChoiceCounts(*t, 100000),
              ::testing::ElementsAre(9925, 19982, 30105, 39988));
}

TEST(HashPolicyTest, WeightsAreReducedByTheirCommonDivisor) {
  // 100,200,300,400 is the same table as 1,2,3,4.
  TableConstPtr t = Make(SeedSpec({100, 200, 300, 400}));
  EXPECT_THAT(FirstChoiceCounts(*t, 100000),
              ::testing::ElementsAre(9925, 19982, 30105, 39988));
}

TEST(HashPolicyTest, SlotTableIsSharedWhenOnlyReadinessChanges) {
  TableConstPtr all = Make(SeedSpec({1, 2, 3, 4}));
  TableConstPtr down =
      Make(SeedSpec({1, 2, 3, 4}, {true, false, true, true}), all.get());
  EXPECT_NE(HashTableIdentityForTest(all->selector()), nullptr);
  EXPECT_EQ(HashTableIdentityForTest(all->selector()),
            HashTableIdentityForTest(down->selector()));
  TableConstPtr reweighted = Make(SeedSpec({1, 2, 3, 5}), down.get());
  EXPECT_NE(HashTableIdentityForTest(down->selector()),
            HashTableIdentityForTest(reweighted->selector()));
  // Only the keys of the member that went away move, each to a fixed
  // fallback.
  std::array<uint32_t, 1> a;
  std::array<uint32_t, 1> b;
  for (int i = 0; i < 20000; ++i) {
    const std::string key = absl::StrCat("key-", i);
    PickRequest r;
    r.key = key;
    ASSERT_EQ(all->Pick(r, absl::MakeSpan(a)), 1u);
    ASSERT_EQ(down->Pick(r, absl::MakeSpan(b)), 1u);
    if (a[0] != 1) {
      ASSERT_EQ(a[0], b[0]) << key;
    } else {
      ASSERT_NE(b[0], 1u);
      std::array<uint32_t, 1> again;
      ASSERT_EQ(down->Pick(r, absl::MakeSpan(again)), 1u);
      ASSERT_EQ(again[0], b[0]);
    }
  }
}

TEST(HashPolicyTest, LargeWeightSumsGiveTheSameAnswersWithoutASlotTable) {
  // Weights whose reduced sum passes kMaxHashSlots use a prefix-sum search:
  // the first choice is still weighted_slot(fnv % total).
  std::vector<uint32_t> weights;
  uint64_t total = 0;
  for (uint32_t i = 0; i < 100; ++i) {
    weights.push_back(9000 + i * 7 + 1);  // gcd 1, sum > 2^18
    total += weights.back();
  }
  ASSERT_GT(total, kMaxHashSlots);
  TableConstPtr t = Make(MakeTableSpec(HashPolicy(), {.weights = weights}));
  std::array<uint32_t, 1> out;
  for (int i = 0; i < 5000; ++i) {
    const std::string key = absl::StrCat("k", i);
    uint64_t r = Fnv1a64(key) % total;
    uint32_t expected = 0;
    while (r >= weights[expected]) {
      r -= weights[expected++];
    }
    PickRequest req;
    req.key = key;
    ASSERT_EQ(t->Pick(req, absl::MakeSpan(out)), 1u);
    ASSERT_EQ(out[0], expected) << key;
  }
}

}  // namespace
}  // namespace aside
