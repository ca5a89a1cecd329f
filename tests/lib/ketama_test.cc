#include "lib/policies/ketama.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "lib/hash.h"
#include "lib/random.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

PolicyConfig Ketama(uint32_t points_per_weight = 160) {
  PolicyConfig c;
  c.kind = PolicyKind::kKetama;
  c.ketama.points_per_weight = points_per_weight;
  return c;
}

struct Node {
  std::string address;
  uint32_t weight = 1;
  bool ready = true;
};

TableSpec Spec(const std::vector<Node>& nodes, uint32_t ppw = 160) {
  TableSpec spec;
  spec.group = "k";
  spec.policy = Ketama(ppw);
  spec.panic_threshold = 0;
  for (const Node& n : nodes) {
    Member m;
    m.backend.address = n.address;
    m.backend.weight = n.weight;
    m.weight = n.weight;
    m.ready = n.ready;
    spec.members.push_back(std::move(m));
  }
  return spec;
}

TableConstPtr Make(const std::vector<Node>& nodes, uint32_t ppw = 160,
                   const Table* previous = nullptr) {
  auto t = Table::Create(Spec(nodes, ppw), previous, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *t : nullptr;
}

std::vector<Node> SeedNodes(std::vector<uint32_t> weights) {
  std::vector<Node> nodes;
  for (size_t i = 0; i < weights.size(); ++i) {
    nodes.push_back({absl::StrCat("10.0.0.", i + 1, ":80"), weights[i]});
  }
  return nodes;
}

std::string PickAddress(const Table& t, absl::string_view key) {
  std::array<uint32_t, 1> out;
  PickRequest r;
  r.key = key;
  if (t.Pick(r, absl::MakeSpan(out)) != 1) {
    return "";
  }
  return t.member(out[0]).backend.address;
}

std::map<std::string, int> Distribution(const Table& t, int keys) {
  std::map<std::string, int> counts;
  for (int i = 0; i < keys; ++i) {
    counts[PickAddress(t, absl::StrCat("key-", i))]++;
  }
  return counts;
}

// A direct transcription of nginx 1.22's ngx_http_upstream_init_chash and
// find_chash_point over zlib's crc32, without any of the optimisations (no
// radix sort, no bucket index): the reference the selector must equal.
class NaiveNginxRing {
 public:
  explicit NaiveNginxRing(const std::vector<Node>& nodes, uint32_t ppw = 160) {
    std::vector<Node> sorted = nodes;
    std::sort(sorted.begin(), sorted.end(), [](const Node& a, const Node& b) {
      return a.address < b.address;
    });
    for (const Node& n : sorted) {
      const size_t colon = n.address.rfind(':');
      const std::string host = n.address.substr(0, colon);
      const std::string port = n.address.substr(colon + 1);
      uLong base = crc32(0, nullptr, 0);
      base = crc32(base, reinterpret_cast<const Bytef*>(host.data()),
                   static_cast<uInt>(host.size()));
      base = crc32(base, reinterpret_cast<const Bytef*>(""), 1);
      base = crc32(base, reinterpret_cast<const Bytef*>(port.data()),
                   static_cast<uInt>(port.size()));
      uint32_t prev = 0;
      for (uint64_t j = 0; j < uint64_t{n.weight} * ppw; ++j) {
        unsigned char bytes[4] = {static_cast<unsigned char>(prev),
                                  static_cast<unsigned char>(prev >> 8),
                                  static_cast<unsigned char>(prev >> 16),
                                  static_cast<unsigned char>(prev >> 24)};
        const uint32_t h = static_cast<uint32_t>(crc32(base, bytes, 4));
        points_.emplace_back(h, n.address);
        prev = h;
      }
    }
    // glibc's qsort is a merge sort: stable, as this is.
    std::stable_sort(
        points_.begin(), points_.end(),
        [](const auto& a, const auto& b) { return a.first < b.first; });
    points_.erase(std::unique(points_.begin(), points_.end(),
                              [](const auto& a, const auto& b) {
                                return a.first == b.first;
                              }),
                  points_.end());
  }

  std::string Pick(absl::string_view key) const {
    const uint32_t h = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(key.data()),
              static_cast<uInt>(key.size())));
    size_t i = 0;
    size_t j = points_.size();
    while (i < j) {
      const size_t k = (i + j) / 2;
      if (h > points_[k].first) {
        i = k + 1;
      } else if (h < points_[k].first) {
        j = k;
      } else {
        i = k;
        break;
      }
    }
    return points_[i % points_.size()].second;
  }

  size_t size() const { return points_.size(); }

 private:
  std::vector<std::pair<uint32_t, std::string>> points_;
};

TEST(KetamaTest, LargeRingIsExactlySortedByHashThenPosition) {
  std::vector<KetamaNode> nodes;
  std::vector<std::string> addresses;
  for (size_t i = 0; i < 400; ++i) {
    addresses.push_back(testing::TestAddress(i));  // in address order
  }
  std::vector<uint64_t> expected;
  for (uint32_t i = 0; i < addresses.size(); ++i) {
    const uint32_t weight = 1 + i % 4;
    nodes.push_back({addresses[i], weight});
    const uint32_t base = KetamaBaseHash(addresses[i]);
    uint32_t prev = 0;
    for (uint32_t j = 0; j < weight * 160; ++j) {
      prev = Crc32UpdateWord(base, prev);
      expected.push_back((uint64_t{prev} << 32) | i);
    }
  }
  std::sort(expected.begin(), expected.end());
  ASSERT_OK_AND_ASSIGN(auto ring, KetamaRing::Build(nodes, 160));
  ASSERT_EQ(ring->size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(ring->hash_at(i), expected[i] >> 32) << i;
    ASSERT_EQ(ring->position_at(i), static_cast<uint32_t>(expected[i])) << i;
  }
  // The index finds the first point >= any hash.
  FastRng rng(3);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t h = static_cast<uint32_t>(rng.Next());
    const size_t want = static_cast<size_t>(
        std::lower_bound(expected.begin(), expected.end(), uint64_t{h} << 32) -
        expected.begin());
    ASSERT_EQ(ring->Find(h), want == expected.size() ? 0 : want) << h;
  }
}

TEST(KetamaTest, SplitsServerNamesAsNginxDoes) {
  auto split = [](absl::string_view s) {
    KetamaHostPort hp = SplitKetamaServer(s);
    return std::pair<std::string, std::string>(hp.host, hp.port);
  };
  EXPECT_EQ(split("127.0.0.1:80"),
            std::make_pair(std::string("127.0.0.1"), std::string("80")));
  EXPECT_EQ(split("[::1]:8080"),
            std::make_pair(std::string("[::1]"), std::string("8080")));
  EXPECT_EQ(split("unix:/tmp/s.sock"),
            std::make_pair(std::string("/tmp/s.sock"), std::string("")));
  EXPECT_EQ(split("backend.svc"),
            std::make_pair(std::string("backend.svc"), std::string("")));
  EXPECT_EQ(split("a:b"), std::make_pair(std::string("a:b"), std::string("")));
}

TEST(KetamaTest, CrcWordStepEqualsZlib) {
  FastRng rng(7);
  for (int i = 0; i < 10000; ++i) {
    const uint32_t base = static_cast<uint32_t>(rng.Next());
    const uint32_t word = static_cast<uint32_t>(rng.Next());
    unsigned char bytes[4] = {static_cast<unsigned char>(word),
                              static_cast<unsigned char>(word >> 8),
                              static_cast<unsigned char>(word >> 16),
                              static_cast<unsigned char>(word >> 24)};
    ASSERT_EQ(Crc32UpdateWord(base, word),
              static_cast<uint32_t>(crc32(base, bytes, 4)));
  }
  EXPECT_EQ(Crc32("123456789"), 0xcbf43926u);  // the CRC-32 check value
}

TEST(KetamaTest, FirstPointOfABackendIsCrcOfHostNulPortAndZero) {
  TableConstPtr t = Make({{"127.0.0.1:80", 1}});
  const KetamaRing* ring = KetamaRingForTest(t->selector());
  ASSERT_NE(ring, nullptr);
  ASSERT_EQ(ring->size(), 160u);
  const std::string first(
      "127.0.0.1\0"
      "80\0\0\0\0",
      16);
  const uint32_t h = Crc32(first);
  bool found = false;
  for (size_t i = 0; i < ring->size(); ++i) {
    found = found || ring->hash_at(i) == h;
  }
  EXPECT_TRUE(found);
  for (size_t i = 1; i < ring->size(); ++i) {
    ASSERT_LE(ring->hash_at(i - 1), ring->hash_at(i));
  }
}

TEST(KetamaTest, PicksWhatTheNaiveNginxTranscriptionPicks) {
  std::vector<Node> nodes = {{"10.1.0.1:80", 3},
                             {"10.1.0.2:8080", 1},
                             {"[2001:db8::5]:443", 2},
                             {"10.1.0.10:80", 5},
                             {"cache.example:11211", 1}};
  TableConstPtr t = Make(nodes);
  NaiveNginxRing naive(nodes);
  EXPECT_EQ(KetamaRingForTest(t->selector())->size(), naive.size());
  FastRng rng(42);
  for (int i = 0; i < 20000; ++i) {
    const std::string key =
        absl::StrCat("/path/", rng.Next() % 100000, "?q=", i);
    ASSERT_EQ(PickAddress(*t, key), naive.Pick(key)) << key;
  }
  // Keys whose hash lands exactly on, just before and just past a point.
  const KetamaRing* ring = KetamaRingForTest(t->selector());
  EXPECT_EQ(ring->Find(ring->hash_at(5)), 5u);
  EXPECT_EQ(ring->Find(ring->hash_at(5) + 1), 6u);
  EXPECT_EQ(ring->Find(ring->hash_at(ring->size() - 1) + 1), 0u);
  EXPECT_EQ(ring->Find(0), 0u);
}

TEST(KetamaTest, ReproducesPingoraKetamaDistributions) {
  // pingora-ketama (a port of nginx's function) on the seed's lab.
  EXPECT_EQ(Distribution(*Make(SeedNodes({1, 1, 1, 1})), 100000),
            (std::map<std::string, int>{{"10.0.0.1:80", 24178},
                                        {"10.0.0.2:80", 23419},
                                        {"10.0.0.3:80", 24535},
                                        {"10.0.0.4:80", 27868}}));
  EXPECT_EQ(Distribution(*Make(SeedNodes({1, 2, 3, 4})), 100000),
            (std::map<std::string, int>{{"10.0.0.1:80", 10636},
                                        {"10.0.0.2:80", 20364},
                                        {"10.0.0.3:80", 30002},
                                        {"10.0.0.4:80", 38998}}));
}

TEST(KetamaTest, AddingABackendMovesAboutOneInNPlusOneKeysOnlyToIt) {
  TableConstPtr four = Make(SeedNodes({1, 1, 1, 1}));
  TableConstPtr five = Make(SeedNodes({1, 1, 1, 1, 1}));
  int moved = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::string key = absl::StrCat("key-", i);
    const std::string before = PickAddress(*four, key);
    const std::string after = PickAddress(*five, key);
    if (before != after) {
      ++moved;
      ASSERT_EQ(after, "10.0.0.5:80") << key;
    }
  }
  EXPECT_EQ(moved, 20931);  // the seed's figure; ideal 1/5 = 20000
}

TEST(KetamaTest, RemovingABackendMovesOnlyItsOwnKeys) {
  TableConstPtr four = Make(SeedNodes({1, 1, 1, 1}));
  TableConstPtr three = Make(SeedNodes({1, 1, 1}));
  int moved = 0;
  for (int i = 0; i < 100000; ++i) {
    const std::string key = absl::StrCat("key-", i);
    const std::string before = PickAddress(*four, key);
    if (before != PickAddress(*three, key)) {
      ++moved;
      ASSERT_EQ(before, "10.0.0.4:80") << key;
    }
  }
  EXPECT_EQ(moved, 27868);  // exactly the keys .4 owned
}

TEST(KetamaTest, AnUnreadyBackendsKeysWalkOnAndComeBack) {
  std::vector<Node> nodes = SeedNodes({1, 1, 1, 1});
  TableConstPtr all = Make(nodes);
  nodes[1].ready = false;
  TableConstPtr down = Make(nodes, 160, all.get());
  // Readiness does not rebuild the ring.
  EXPECT_EQ(KetamaRingForTest(all->selector()),
            KetamaRingForTest(down->selector()));
  for (int i = 0; i < 20000; ++i) {
    const std::string key = absl::StrCat("key-", i);
    const std::string before = PickAddress(*all, key);
    const std::string after = PickAddress(*down, key);
    if (before != "10.0.0.2:80") {
      ASSERT_EQ(before, after) << key;
    } else {
      ASSERT_NE(after, "10.0.0.2:80");
    }
  }
}

TEST(KetamaTest, WeightZeroHasNoPointsAndIsNeverPicked) {
  TableConstPtr t =
      Make({{"10.0.0.1:80", 1}, {"10.0.0.2:80", 0}, {"10.0.0.3:80", 2}});
  EXPECT_EQ(KetamaRingForTest(t->selector())->size(), 3u * 160);
  std::array<uint32_t, 3> out;
  for (int i = 0; i < 2000; ++i) {
    const std::string key = absl::StrCat("k", i);
    PickRequest r;
    r.key = key;
    const size_t n = t->Pick(r, absl::MakeSpan(out));
    ASSERT_EQ(n, 2u);
    for (size_t j = 0; j < n; ++j) {
      ASSERT_NE(out[j], 1u);
    }
  }
  TableConstPtr zero = Make({{"10.0.0.1:80", 0}, {"10.0.0.2:80", 0}});
  EXPECT_EQ(PickAddress(*zero, "k"), "");
}

TEST(KetamaTest, FallbacksAreDeterministicDistinctAndWalkTheRing) {
  std::vector<Node> nodes;
  for (int i = 1; i <= 12; ++i) {
    nodes.push_back(
        {absl::StrCat("10.0.1.", i, ":80"), static_cast<uint32_t>(1 + i % 3)});
  }
  TableConstPtr t = Make(nodes);
  const KetamaRing* ring = KetamaRingForTest(t->selector());
  for (int i = 0; i < 500; ++i) {
    const std::string key = absl::StrCat("user-", i);
    PickRequest r;
    r.key = key;
    std::array<uint32_t, 12> a;
    std::array<uint32_t, 12> b;
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(a)), 12u);
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(b)), 12u);
    ASSERT_EQ(a, b);
    ASSERT_EQ(std::set<uint32_t>(a.begin(), a.end()).size(), 12u);
    // The second choice is the owner of the next ring point owned by
    // someone else.
    size_t p = ring->Find(Crc32(key));
    while (ring->position_at(p) == a[0]) {
      p = (p + 1) % ring->size();
    }
    ASSERT_EQ(a[1], ring->position_at(p));
  }
}

TEST(KetamaTest, ChangedMembersUpdateTheRingToWhatAFullBuildGives) {
  std::vector<Node> nodes;
  for (int i = 1; i <= 40; ++i) {
    nodes.push_back(
        {absl::StrCat("10.0.2.", i, ":80"), static_cast<uint32_t>(1 + i % 4)});
  }
  TableConstPtr before = Make(nodes);
  std::vector<Node> changed = nodes;
  changed.erase(changed.begin() + 7);      // removed
  changed.push_back({"10.0.2.99:80", 2});  // added
  changed[3].weight = 7;                   // re-weighted
  TableConstPtr incremental = Make(changed, 160, before.get());
  TableConstPtr full = Make(changed);
  const KetamaRing* a = KetamaRingForTest(incremental->selector());
  const KetamaRing* b = KetamaRingForTest(full->selector());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    ASSERT_EQ(a->hash_at(i), b->hash_at(i)) << i;
    ASSERT_EQ(a->position_at(i), b->position_at(i)) << i;
  }
}

TEST(KetamaTest, AnUpdatedRingAndItsIndexEqualAFullBuild) {
  // Large enough for a 17-bit index, which an update shifts instead of
  // rebuilding: a backend added, removed, re-weighted; and a ring growing
  // past 2^18 points, whose index doubles.
  for (const size_t count : {size_t{1002}, size_t{1640}}) {
    std::vector<std::string> addresses;
    for (size_t i = 0; i < count; ++i) {
      addresses.push_back(testing::TestAddress(i));  // in address order
    }
    auto nodes_of = [&](size_t skip_a, size_t skip_b, uint32_t weight_of_5) {
      std::vector<KetamaNode> nodes;
      for (size_t i = 0; i < addresses.size(); ++i) {
        if (i != skip_a && i != skip_b) {
          nodes.push_back({addresses[i], i == 5 ? weight_of_5 : 1u});
        }
      }
      return nodes;
    };
    const std::vector<KetamaNode> before = nodes_of(17, count - 1, 1);
    ASSERT_OK_AND_ASSIGN(auto ring, KetamaRing::Build(before, 160));
    for (const std::vector<KetamaNode>& after :
         {nodes_of(300, count - 1, 1), nodes_of(17, count - 1, 3),
          nodes_of(17, 300, 2), nodes_of(count, count, 1),
          nodes_of(17, count - 1, 500)}) {
      ASSERT_OK_AND_ASSIGN(auto updated,
                           KetamaRing::Update(*ring, before, after, 160));
      ASSERT_OK_AND_ASSIGN(auto full, KetamaRing::Build(after, 160));
      ASSERT_EQ(updated->size(), full->size());
      for (size_t i = 0; i < full->size(); ++i) {
        ASSERT_EQ(updated->hash_at(i), full->hash_at(i)) << i;
        ASSERT_EQ(updated->position_at(i), full->position_at(i)) << i;
      }
      FastRng rng(5);
      for (int i = 0; i < 100000; ++i) {
        const uint32_t h = static_cast<uint32_t>(rng.Next());
        ASSERT_EQ(updated->Find(h), full->Find(h)) << h;
      }
      for (size_t i = 0; i < full->size(); i += 7) {
        const uint32_t h = full->hash_at(i);
        ASSERT_EQ(updated->Find(h), full->Find(h)) << h;
        ASSERT_EQ(updated->Find(h + 1), full->Find(h + 1)) << h;
      }
    }
  }
}

TEST(KetamaTest, PointsPerWeightIsHonoured) {
  TableConstPtr ten = Make(SeedNodes({1, 2}), 10);
  EXPECT_EQ(KetamaRingForTest(ten->selector())->size(), 30u);
  TableConstPtr full = Make(SeedNodes({1, 2}), 160);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string key = absl::StrCat("key-", i);
    differ += PickAddress(*ten, key) != PickAddress(*full, key) ? 1 : 0;
  }
  EXPECT_GT(differ, 0);  // a different ring, not silently the default
  // A ppw change does not reuse the previous ring.
  TableConstPtr again = Make(SeedNodes({1, 2}), 160, ten.get());
  EXPECT_EQ(KetamaRingForTest(again->selector())->size(), 480u);
}

TEST(KetamaTest, RejectsRingsPastTheLimitNamingTheSizes) {
  std::vector<Node> nodes;
  for (int i = 0; i < 20; ++i) {
    nodes.push_back({absl::StrCat("10.0.3.", i + 1, ":80"), 10000});
  }
  EXPECT_THAT(
      Table::Create(Spec(nodes, 1000), nullptr, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ring points")));
}

}  // namespace
}  // namespace aside
