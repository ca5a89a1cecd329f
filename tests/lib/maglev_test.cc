#include "lib/policies/maglev.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::StatusIs;
using ::aside::testing::TableOptions;
using ::testing::HasSubstr;

PolicyConfig Maglev(uint64_t size = 65537) {
  PolicyConfig c;
  c.kind = PolicyKind::kMaglev;
  c.maglev.table_size = size;
  return c;
}

TableConstPtr Make(TableOptions options, uint64_t size = 65537,
                   const Table* previous = nullptr) {
  auto t =
      Table::Create(MakeTableSpec(Maglev(size), options), previous, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

std::vector<MaglevNode> Nodes(size_t n, uint32_t weight = 1) {
  static std::vector<std::string> addresses;
  addresses.clear();
  for (size_t i = 0; i < n; ++i) {
    addresses.push_back(testing::TestAddress(i));
  }
  std::vector<MaglevNode> nodes;
  for (const std::string& a : addresses) {
    nodes.push_back({a, weight});
  }
  return nodes;
}

std::vector<uint64_t> SlotCounts(const std::vector<uint32_t>& table, size_t n) {
  std::vector<uint64_t> counts(n, 0);
  for (uint32_t pos : table) {
    counts[pos]++;
  }
  return counts;
}

TEST(MaglevTest, EqualWeightsOwnWithinOnePercentOfEachOther) {
  for (size_t n : {3, 10, 100, 655}) {
    const std::vector<uint32_t> table = MaglevPopulate(Nodes(n), 65537);
    ASSERT_EQ(table.size(), 65537u);
    const std::vector<uint64_t> counts = SlotCounts(table, n);
    const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    // Each owns floor or ceil of M/n: within one slot, which is < 1% once
    // M >= 100 n.
    EXPECT_LE(*hi - *lo, 1u) << n;
    EXPECT_LE(static_cast<double>(*hi - *lo), 0.01 * static_cast<double>(*lo))
        << n;
  }
}

TEST(MaglevTest, WeightsSetTheShareOfSlots) {
  std::vector<MaglevNode> nodes = Nodes(4);
  for (size_t i = 0; i < 4; ++i) {
    nodes[i].weight = static_cast<uint32_t>(i + 1);
  }
  const std::vector<uint64_t> counts =
      SlotCounts(MaglevPopulate(nodes, 65537), 4);
  for (size_t i = 0; i < 4; ++i) {
    const double expected = 65537.0 * static_cast<double>(i + 1) / 10.0;
    EXPECT_NEAR(static_cast<double>(counts[i]), expected, expected * 0.01) << i;
  }
}

TEST(MaglevTest, IsDeterministicAcrossBuildsAndProcesses) {
  const std::vector<uint32_t> a = MaglevPopulate(Nodes(7), 101);
  const std::vector<uint32_t> b = MaglevPopulate(Nodes(7), 101);
  EXPECT_EQ(a, b);
  // A golden fingerprint: the same addresses give this table in every
  // process on every little-endian machine (seeded hashes, no std::hash).
  // Fixed addresses, independent of the test helpers' address scheme.
  static const std::vector<std::string> addresses = {
      "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80",
      "10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80"};
  std::vector<MaglevNode> golden;
  for (const std::string& address : addresses) {
    golden.push_back({address, 1});
  }
  uint64_t fingerprint = 0;
  for (uint32_t pos : MaglevPopulate(golden, 65537)) {
    fingerprint = fingerprint * 31 + pos;
  }
  EXPECT_EQ(fingerprint, 0xf1190a20ce0fca09ULL) << std::hex << fingerprint;
  EXPECT_EQ(Hash64("key-0", kMaglevKeySeed), 0xb2ebca5de2aa784cULL)
      << std::hex << Hash64("key-0", kMaglevKeySeed);
}

// The population as the Maglev paper states it, one probe at a time, with
// this implementation's weighted turns.
std::vector<uint32_t> NaivePopulate(const std::vector<MaglevNode>& nodes,
                                    uint64_t m) {
  struct Entry {
    uint64_t next, skip, target, weight;
    uint32_t position;
  };
  std::vector<Entry> entries;
  uint64_t max_weight = 0;
  for (uint32_t pos = 0; pos < nodes.size(); ++pos) {
    if (nodes[pos].weight == 0) continue;
    entries.push_back(
        {Hash64(nodes[pos].address, kMaglevOffsetSeed) % m,
         Hash64(nodes[pos].address, kMaglevSkipSeed) % (m - 1) + 1, 0,
         nodes[pos].weight, pos});
    max_weight = std::max<uint64_t>(max_weight, nodes[pos].weight);
  }
  std::vector<uint32_t> table(m, ~uint32_t{0});
  uint64_t filled = 0;
  for (uint64_t round = 0; filled < m; ++round) {
    for (Entry& e : entries) {
      if (round * e.weight < e.target) continue;
      e.target += max_weight;
      while (table[e.next] != ~uint32_t{0}) e.next = (e.next + e.skip) % m;
      table[e.next] = e.position;
      e.next = (e.next + e.skip) % m;
      if (++filled == m) break;
    }
  }
  return table;
}

TEST(MaglevTest, PopulationEqualsTheOneProbeAtATimeReference) {
  for (const uint64_t m : {uint64_t{101}, uint64_t{1009}, uint64_t{65537}}) {
    for (const size_t n : {size_t{1}, size_t{7}, size_t{100}}) {
      std::vector<MaglevNode> nodes = Nodes(n);
      for (size_t i = 0; i < nodes.size(); ++i) {
        nodes[i].weight = 1 + static_cast<uint32_t>(i % 3);
      }
      EXPECT_EQ(MaglevPopulate(nodes, m), NaivePopulate(nodes, m))
          << m << " slots, " << n << " backends";
    }
  }
}

TEST(MaglevTest, RemovingABackendMovesFewOtherKeys) {
  TableConstPtr ten = Make({.weights = std::vector<uint32_t>(10, 1)});
  TableOptions nine_options{.weights = std::vector<uint32_t>(10, 1)};
  nine_options.weights[9] = 0;  // the same addresses, the last one weight 0
  TableConstPtr nine = Make(nine_options);
  int moved_other = 0;
  int owned = 0;
  std::array<uint32_t, 1> a;
  std::array<uint32_t, 1> b;
  for (int i = 0; i < 100000; ++i) {
    const std::string key = absl::StrCat("key-", i);
    PickRequest r;
    r.key = key;
    ASSERT_EQ(ten->Pick(r, absl::MakeSpan(a)), 1u);
    ASSERT_EQ(nine->Pick(r, absl::MakeSpan(b)), 1u);
    if (a[0] == 9) {
      ++owned;
    } else if (a[0] != b[0]) {
      ++moved_other;
    }
  }
  EXPECT_NEAR(owned, 10000, 600);
  // Maglev trades a little disruption for balance (the paper's §5.3): far
  // fewer than modulo hashing's ~90%.
  EXPECT_LT(moved_other, 5000);
}

TEST(MaglevTest, FallbacksAreDistinctEligibleAndDeterministic) {
  TableConstPtr t = Make({.weights = {1, 2, 0, 1, 3, 1},
                          .ready = {true, true, true, false, true, true}});
  for (int i = 0; i < 300; ++i) {
    const std::string key = absl::StrCat("k", i);
    PickRequest r;
    r.key = key;
    std::array<uint32_t, 6> a;
    std::array<uint32_t, 6> b;
    const size_t n = t->Pick(r, absl::MakeSpan(a));
    ASSERT_EQ(n, 4u);
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(b)), 4u);
    ASSERT_TRUE(std::equal(a.begin(), a.begin() + n, b.begin()));
    std::set<uint32_t> seen(a.begin(), a.begin() + n);
    EXPECT_EQ(seen, (std::set<uint32_t>{0, 1, 4, 5}));
  }
}

TEST(MaglevTest, TableIsSharedWhenOnlyReadinessChanges) {
  TableConstPtr a = Make({.weights = {1, 1, 1}});
  TableConstPtr b = Make({.weights = {1, 1, 1}, .ready = {true, false, true}},
                         65537, a.get());
  EXPECT_EQ(MaglevTableIdentityForTest(a->selector()),
            MaglevTableIdentityForTest(b->selector()));
  TableConstPtr c = Make({.weights = {1, 2, 1}}, 65537, b.get());
  EXPECT_NE(MaglevTableIdentityForTest(b->selector()),
            MaglevTableIdentityForTest(c->selector()));
  TableConstPtr d = Make({.weights = {1, 2, 1}}, 101, c.get());
  EXPECT_NE(MaglevTableIdentityForTest(c->selector()),
            MaglevTableIdentityForTest(d->selector()));
}

TEST(MaglevTest, WeightZeroIsAcceptedAndNeverPicked) {
  TableConstPtr t = Make({.weights = {0, 1, 0}});
  std::array<uint32_t, 3> out;
  for (int i = 0; i < 1000; ++i) {
    const std::string key = absl::StrCat("k", i);
    PickRequest r;
    r.key = key;
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
    ASSERT_EQ(out[0], 1u);
  }
  EXPECT_EQ(Make({.weights = {0, 0}})->Pick({}, absl::MakeSpan(out)), 0u);
}

TEST(MaglevTest, RejectsATableSmallerThanTheGroup) {
  EXPECT_THAT(
      Table::Create(MakeTableSpec(Maglev(101),
                                  {.weights = std::vector<uint32_t>(102, 1)}),
                    nullptr, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("table_size: 101 is smaller than the 102 backends")));
}

}  // namespace
}  // namespace aside
