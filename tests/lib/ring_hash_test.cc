#include "lib/policies/ring_hash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "lib/hash.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;
using ::testing::ElementsAre;

// The golden values below follow gRFC A42 (Envoy's ring construction with
// xxHash64, seed 0), computed independently of this code.

TEST(XxHash64Test, MatchesTheReferenceVectors) {
  EXPECT_EQ(XxHash64("", 0), 0xef46db3751d8e999ULL);
  EXPECT_EQ(XxHash64("a", 0), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(XxHash64("abc", 0), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(XxHash64("abc", 1234567), 0xcb54395bbf895909ULL);
  EXPECT_EQ(XxHash64("127.0.0.1:8080_0", 0), 0xf673a43b9624fa24ULL);
  EXPECT_EQ(XxHash64("[::1]:443_17", 0), 0x01a67ce7a41200f9ULL);
  EXPECT_EQ(XxHash64("user-42", 0), 0x397e9d3a76af7c81ULL);
  // 36 bytes: one 32-byte stripe and a tail of 4.
  EXPECT_EQ(XxHash64("abcdefghijklmnopqrstuvwxyz0123456789", 0),
            0x64f23ecf1609b766ULL);
  EXPECT_EQ(XxHash64(std::string(100, 'x'), 0), 0x92f0de5a88a3c094ULL);
}

struct GoldenRing {
  std::vector<RingHashNode> nodes;
  uint64_t min_ring_size;
  uint64_t max_ring_size;
  size_t size;
  std::vector<size_t> counts;
  std::array<uint64_t, 3> first_hashes;
  std::array<uint32_t, 3> first_positions;
  // Owners of "user-1" .. "user-5", "" and "k\u00e9y" (UTF-8).
  std::array<uint32_t, 7> owners;
};

uint32_t OwnerOf(const RingHashRing& ring, absl::string_view key) {
  const uint64_t h = XxHash64(key, 0);
  auto it = std::lower_bound(ring.hashes.begin(), ring.hashes.end(), h);
  const size_t i = it == ring.hashes.end()
                       ? 0
                       : static_cast<size_t>(it - ring.hashes.begin());
  return ring.positions[i];
}

TEST(RingHashTest, BuildsTheRingGrpcBuilds) {
  const std::vector<GoldenRing> golden = {
      {{{"10.0.0.1:80", 1}, {"10.0.0.2:80", 2}, {"10.0.0.3:80", 3}},
       1024,
       4096,
       1026,
       {171, 342, 513},
       {0x00674c93dec902e6ULL, 0x007513dd8f16f009ULL, 0x00d38a7bb147075aULL},
       {2, 2, 1},
       {1, 1, 2, 1, 2, 1, 1}},
      {{{"127.0.0.1:50051", 1}, {"127.0.0.1:50052", 1}, {"127.0.0.1:50053", 1}},
       1024,
       4096,
       1026,
       {342, 342, 342},
       {0x00005df9bef08c6eULL, 0x000227bde80ca0edULL, 0x001d6898ef77808dULL},
       {1, 1, 2},
       {2, 1, 1, 1, 0, 0, 0}},
      // min_ring_size 10: the smallest share (1/8) scaled to a whole
      // number of entries gives 16.
      {{{"[::1]:443", 7}, {"[2001:db8::5]:443", 1}},
       10,
       100,
       16,
       {14, 2},
       {0x07be774df697278cULL, 0x0e0bab224967771bULL, 0x3add7642414f6ea6ULL},
       {0, 0, 0},
       {0, 1, 0, 0, 1, 0, 1}},
  };
  for (const GoldenRing& g : golden) {
    const RingHashRing ring =
        BuildRingHashRing(g.nodes, g.min_ring_size, g.max_ring_size);
    ASSERT_EQ(ring.hashes.size(), g.size);
    ASSERT_TRUE(std::is_sorted(ring.hashes.begin(), ring.hashes.end()));
    std::vector<size_t> counts(g.nodes.size(), 0);
    for (uint32_t p : ring.positions) {
      counts[p]++;
    }
    EXPECT_EQ(counts, g.counts);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(ring.hashes[i], g.first_hashes[i]) << i;
      EXPECT_EQ(ring.positions[i], g.first_positions[i]) << i;
    }
    const std::array<const char*, 7> keys = {
        "user-1", "user-2", "user-3", "user-4", "user-5", "", "k\xc3\xa9y"};
    for (size_t k = 0; k < keys.size(); ++k) {
      EXPECT_EQ(OwnerOf(ring, keys[k]), g.owners[k]) << keys[k];
    }
  }
}

TEST(RingHashTest, MaxRingSizeCapsTheRing) {
  std::vector<RingHashNode> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back({testing::TestAddress(i), static_cast<uint32_t>(1 + i)});
  }
  // min share 1/6 × 1024 rounds up to 171 → 1026 > 1000.
  EXPECT_EQ(BuildRingHashRing(nodes, 1024, 1000).hashes.size(), 1000u);
  EXPECT_EQ(BuildRingHashRing(nodes, 1024, 4096).hashes.size(), 1026u);
  EXPECT_TRUE(BuildRingHashRing({}, 1024, 4096).hashes.empty());
}

TEST(RingHashTest, EndpointNamesAreWhatClientsPrint) {
  EXPECT_EQ(RingHashEndpointName("10.0.0.1:80"), "10.0.0.1:80");
  EXPECT_EQ(RingHashEndpointName("[::1]:443"), "[::1]:443");
  EXPECT_EQ(RingHashEndpointName("db.internal:5432"), "db.internal:5432");
}

PolicyConfig RingHash(uint64_t min_size = 1024, uint64_t max_size = 4096) {
  PolicyConfig c;
  c.kind = PolicyKind::kRingHash;
  c.ring_hash.min_ring_size = min_size;
  c.ring_hash.max_ring_size = max_size;
  return c;
}

TableConstPtr Make(TableOptions options, const Table* previous = nullptr) {
  auto t = Table::Create(MakeTableSpec(RingHash(), options), previous, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

uint32_t PickOne(const Table& table, absl::string_view key) {
  PickRequest request;
  request.key = key;
  std::array<uint32_t, 1> out{};
  EXPECT_EQ(table.selector().Pick(request, absl::MakeSpan(out)), 1u) << key;
  return out[0];
}

TEST(RingHashTest, PicksTheOwnerOfTheKeyOnTheRingOfEligibleMembers) {
  TableOptions options;
  options.weights = {1, 2, 3, 0};
  options.ready = {true, true, true, true};
  TableConstPtr table = Make(options);
  ASSERT_NE(table, nullptr);
  std::vector<RingHashNode> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes.push_back({testing::TestAddress(i), options.weights[i]});
  }
  const RingHashRing ring = BuildRingHashRing(nodes, 1024, 4096);
  for (int k = 0; k < 500; ++k) {
    const std::string key = absl::StrCat("key-", k);
    EXPECT_EQ(PickOne(*table, key), OwnerOf(ring, key)) << key;
  }
  // Member 1 not ready: gRPC is not sent it, so the ring is the ring of
  // members 0 and 2 (not the old ring with member 1 skipped).
  options.ready[1] = false;
  TableConstPtr without = Make(options, table.get());
  const RingHashRing ring02 =
      BuildRingHashRing({nodes[0], nodes[2]}, 1024, 4096);
  for (int k = 0; k < 500; ++k) {
    const std::string key = absl::StrCat("key-", k);
    const uint32_t want = OwnerOf(ring02, key) == 0 ? 0 : 2;
    EXPECT_EQ(PickOne(*without, key), want) << key;
  }
}

TEST(RingHashTest, FallbacksWalkTheRingAndCoverEveryEligibleMember) {
  TableOptions options;
  options.weights = {1, 1, 1, 1, 1};
  TableConstPtr table = Make(options);
  PickRequest request;
  request.key = "session-7";
  std::array<uint32_t, 8> out{};
  const size_t n = table->selector().Pick(request, absl::MakeSpan(out));
  ASSERT_EQ(n, 5u);
  std::vector<uint32_t> got(out.begin(), out.begin() + n);
  std::sort(got.begin(), got.end());
  EXPECT_THAT(got, ElementsAre(0, 1, 2, 3, 4));
  // Excluding the first choice gives the second.
  const std::array<uint32_t, 1> exclude = {out[0]};
  request.exclude = exclude;
  std::array<uint32_t, 1> retry{};
  ASSERT_EQ(table->selector().Pick(request, absl::MakeSpan(retry)), 1u);
  EXPECT_EQ(retry[0], out[1]);
}

TEST(RingHashTest, TheRingIsSharedWhenItsMembersAreUnchanged) {
  TableOptions options;
  options.weights = {1, 2, 3};
  TableConstPtr first = Make(options);
  options.generation = 2;
  TableConstPtr same = Make(options, first.get());
  EXPECT_EQ(RingHashRingForTest(first->selector()),
            RingHashRingForTest(same->selector()));
  options.weights = {1, 2, 4};
  options.generation = 3;
  TableConstPtr reweighted = Make(options, same.get());
  EXPECT_NE(RingHashRingForTest(same->selector()),
            RingHashRingForTest(reweighted->selector()));
}

TEST(RingHashTest, MembersAreOrderedByLocalityAsGrpcOrdersEndpoints) {
  // Backends in zones b and a: gRPC clients order endpoints by locality, so
  // the zone-a backend comes first although its address sorts last.
  TableSpec spec = MakeTableSpec(RingHash(), TableOptions{{1, 3}});
  spec.members[0].backend.locality.zone = "b";
  spec.members[1].backend.locality.zone = "a";
  auto table = Table::Create(spec, nullptr, nullptr);
  ASSERT_TRUE(table.ok()) << table.status();
  const RingHashRing ring = BuildRingHashRing(
      {{testing::TestAddress(1), 3}, {testing::TestAddress(0), 1}}, 1024, 4096);
  for (int k = 0; k < 200; ++k) {
    const std::string key = absl::StrCat("k", k);
    EXPECT_EQ(PickOne(**table, key), OwnerOf(ring, key) == 0 ? 1u : 0u);
  }
}

}  // namespace
}  // namespace aside
