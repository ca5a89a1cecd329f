// The contract every policy keeps (lib/selector.h, DESIGN.md §4), checked
// over all of them: empty and degenerate tables, weight 0, exclusion,
// distinct and eligible fallbacks, one round-robin step per pick,
// concurrent picks, and picks during table swaps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/clock.h"
#include "lib/load/load_tracker.h"
#include "lib/random.h"
#include "lib/snapshot_cell.h"
#include "lib/table.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

using ::aside::testing::MakeTableSpec;
using ::aside::testing::TableOptions;
using ::testing::HasSubstr;

struct PolicyCase {
  std::string name;
  PolicyConfig config;
  // One shared position advanced once per pick (round_robin and the
  // policies that fall back to it).
  bool round_robin_like = false;
  // The same key gives the same picks.
  bool key_deterministic = false;
};

void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.name; }

std::vector<PolicyCase> AllPolicies() {
  std::vector<PolicyCase> cases;
  auto add = [&](std::string name, PolicyKind kind, bool rr, bool hash,
                 auto tweak) {
    PolicyCase c;
    c.name = std::move(name);
    c.config.kind = kind;
    tweak(c.config);
    c.round_robin_like = rr;
    c.key_deterministic = hash;
    cases.push_back(std::move(c));
  };
  auto none = [](PolicyConfig&) {};
  add("round_robin", PolicyKind::kRoundRobin, true, false, none);
  add("weighted_round_robin", PolicyKind::kWeightedRoundRobin, true, false,
      none);
  add("random", PolicyKind::kRandom, false, false, none);
  add("hash", PolicyKind::kHash, false, true, none);
  add("ketama", PolicyKind::kKetama, false, true, none);
  add("maglev", PolicyKind::kMaglev, false, true,
      [](PolicyConfig& c) { c.maglev.table_size = 1009; });
  add("ring_hash", PolicyKind::kRingHash, false, true, none);
  add("p2c_pending", PolicyKind::kP2c, false, false, none);
  add("p2c_peak_ewma", PolicyKind::kP2c, false, false,
      [](PolicyConfig& c) { c.p2c.load = P2cParams::Load::kPeakEwma; });
  add("least_time", PolicyKind::kLeastTime, false, false, none);
  add("sticky", PolicyKind::kSticky, true, false, none);
  add("locality", PolicyKind::kLocality, true, false, none);
  add("locality_over_ketama", PolicyKind::kLocality, false, true,
      [](PolicyConfig& c) {
        auto child = std::make_shared<PolicyConfig>();
        child->kind = PolicyKind::kKetama;
        c.child = child;
      });
  return cases;
}

class PolicyContractTest : public ::testing::TestWithParam<PolicyCase> {
 protected:
  TableConstPtr Make(TableOptions options, const Table* previous = nullptr) {
    options.session_key =
        std::make_shared<const std::string>("0123456789abcdef0123456789abcdef");
    auto t = Table::Create(MakeTableSpec(GetParam().config, options), previous,
                           &loads_);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }

  // Picks up to `count` for `key` excluding `exclude`.
  std::vector<uint32_t> Pick(const Table& t, size_t count,
                             absl::string_view key = "",
                             absl::Span<const uint32_t> exclude = {}) {
    std::vector<uint32_t> out(count);
    PickRequest r;
    r.key = key;
    r.exclude = exclude;
    r.rng = &rng_;
    SessionToken token;
    r.issued_token = &token;
    out.resize(t.Pick(r, absl::MakeSpan(out)));
    return out;
  }

  LoadTracker loads_;
  FastRng rng_{12345};
};

TEST_P(PolicyContractTest, EmptyTablePicksNothing) {
  TableConstPtr t = Make({.weights = {}});
  EXPECT_TRUE(Pick(*t, 1).empty());
  EXPECT_TRUE(Pick(*t, 3, "k").empty());
  EXPECT_THAT(t->NoBackendMessage(0), HasSubstr("has no backends"));
}

TEST_P(PolicyContractTest, OneBackendIsAlwaysPicked) {
  TableConstPtr t = Make({.weights = {7}});
  for (int i = 0; i < 20; ++i) {
    EXPECT_THAT(Pick(*t, 3, absl::StrCat("k", i)), ::testing::ElementsAre(0u));
  }
}

TEST_P(PolicyContractTest, AllUnreadyPicksNothingUnlessInPanic) {
  TableConstPtr t =
      Make({.weights = {1, 1, 1}, .ready = {false, false, false}});
  EXPECT_TRUE(Pick(*t, 2, "k").empty());
  EXPECT_THAT(t->NoBackendMessage(0), HasSubstr("0 of 3 backends ready"));
  TableConstPtr panic = Make({.weights = {1, 1, 1},
                              .ready = {false, false, false},
                              .panic_threshold = 50});
  EXPECT_TRUE(panic->panic());
  EXPECT_EQ(Pick(*panic, 3, "k").size(), 3u);
}

TEST_P(PolicyContractTest, AllWeightsZeroPicksNothing) {
  TableConstPtr t = Make({.weights = {0, 0, 0}});
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(Pick(*t, 3, absl::StrCat("k", i)).empty());
  }
  EXPECT_THAT(t->NoBackendMessage(0), HasSubstr("weight 0"));
}

TEST_P(PolicyContractTest, ExcludingEverythingPicksNothing) {
  TableConstPtr t = Make({.weights = {1, 2, 3}});
  const std::array<uint32_t, 3> all = {2, 0, 1};
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(Pick(*t, 3, absl::StrCat("k", i), all).empty());
  }
  EXPECT_THAT(t->NoBackendMessage(3), HasSubstr("excluded"));
}

TEST_P(PolicyContractTest, FallbacksAreDistinctEligibleAndComplete) {
  TableConstPtr t =
      Make({.weights = {3, 0, 1, 2, 1, 0, 5, 1},
            .ready = {true, true, false, true, true, true, true, true}});
  const std::set<uint32_t> eligible = {0, 3, 4, 6, 7};
  const std::array<uint32_t, 2> exclude = {4, 1};
  for (int i = 0; i < 300; ++i) {
    const std::string key = absl::StrCat("user-", i);
    // Asking for everything gives exactly the eligible members.
    std::vector<uint32_t> all = Pick(*t, 8, key);
    ASSERT_EQ(all.size(), eligible.size());
    ASSERT_EQ(std::set<uint32_t>(all.begin(), all.end()), eligible);
    // Fewer: distinct and eligible.
    for (size_t k = 1; k <= 4; ++k) {
      std::vector<uint32_t> some = Pick(*t, k, key);
      ASSERT_EQ(some.size(), k);
      std::set<uint32_t> s(some.begin(), some.end());
      ASSERT_EQ(s.size(), k);
      for (uint32_t m : some) {
        ASSERT_TRUE(eligible.count(m)) << m;
      }
    }
    // Excluded members never come back.
    std::vector<uint32_t> rest = Pick(*t, 8, key, exclude);
    ASSERT_EQ(std::set<uint32_t>(rest.begin(), rest.end()),
              (std::set<uint32_t>{0, 3, 6, 7}));
  }
}

TEST_P(PolicyContractTest, WeightZeroIsNeverPickedFirstOrAsFallback) {
  TableConstPtr t = Make({.weights = {0, 4, 0, 1, 0, 2}});
  for (int i = 0; i < 2000; ++i) {
    for (uint32_t m : Pick(*t, 1 + i % 6, absl::StrCat("k", i))) {
      ASSERT_NE(m % 2, 0u) << "weight-0 member " << m;
    }
  }
}

TEST_P(PolicyContractTest, HashPoliciesAreDeterministicPerKey) {
  if (!GetParam().key_deterministic) {
    GTEST_SKIP() << "not a hash policy";
  }
  TableConstPtr t = Make({.weights = {1, 2, 3, 1, 1, 2}});
  TableConstPtr rebuilt = Make({.weights = {1, 2, 3, 1, 1, 2}});
  for (int i = 0; i < 500; ++i) {
    const std::string key = absl::StrCat("session-", i);
    const std::vector<uint32_t> a = Pick(*t, 6, key);
    ASSERT_EQ(a, Pick(*t, 6, key));
    ASSERT_EQ(a, Pick(*rebuilt, 6, key));
  }
}

TEST_P(PolicyContractTest, OnePickAdvancesTheRoundRobinPositionOnce) {
  if (!GetParam().round_robin_like) {
    GTEST_SKIP() << "no round-robin position";
  }
  constexpr uint32_t kN = 5;
  TableConstPtr t = Make({.weights = std::vector<uint32_t>(kN, 1)});
  uint32_t p = Pick(*t, 1)[0];
  for (int round = 0; round < 200; ++round) {
    // A retry excluding the next member, asking for fallbacks too: its
    // first choice skips over the excluded one ...
    const std::array<uint32_t, 1> exclude = {(p + 1) % kN};
    const std::vector<uint32_t> retry = Pick(*t, 3, "", exclude);
    ASSERT_EQ(retry.size(), 3u);
    ASSERT_EQ(retry[0], (p + 2) % kN);
    // ... but the position moved by one step only: the next pick gets the
    // member after the excluded one, not the one after that.
    p = Pick(*t, 1)[0];
    ASSERT_EQ(p, retry[0]) << "round " << round;
  }
  // Over whole cycles every member is first equally often.
  std::map<uint32_t, int> counts;
  for (uint32_t i = 0; i < kN * 100; ++i) {
    counts[Pick(*t, 2)[0]]++;
  }
  for (uint32_t m = 0; m < kN; ++m) {
    EXPECT_EQ(counts[m], 100) << m;
  }
}

TEST_P(PolicyContractTest, ConcurrentPicksStayValid) {
  TableConstPtr t =
      Make({.weights = {1, 2, 0, 3, 1, 1, 2, 1},
            .ready = {true, true, true, true, false, true, true, true}});
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      FastRng rng(th + 1);
      std::array<uint32_t, 3> out;
      for (int i = 0; i < 5000; ++i) {
        const std::string key = absl::StrCat("k", i);
        PickRequest r;
        r.key = key;
        r.rng = &rng;
        const size_t n = t->Pick(r, absl::MakeSpan(out));
        std::set<uint32_t> seen(out.begin(), out.begin() + n);
        if (n != 3 || seen.size() != 3 || seen.count(2) || seen.count(4)) {
          bad.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& th : threads) {
    th.join();
  }
  EXPECT_EQ(bad.load(), 0);
}

// A clock that moves 1 us every time it is read, as time moves between the
// creation of one backend's load entry and the next in a real table build.
class TickingClock final : public Clock {
 public:
  int64_t NowNanos() const noexcept override {
    return nanos_.fetch_add(1000, std::memory_order_relaxed);
  }
  absl::Time WallNow() const noexcept override {
    return absl::FromUnixNanos(NowNanos());
  }

 private:
  mutable std::atomic<int64_t> nanos_{1'000'000'000};
};

// Equal backends with nothing known about them (no reports, no samples, in
// creation order) get equal shares of first picks: no policy may turn the
// address order or the order entries were created in into a preference.
// Each count is checked against its binomial expectation (n = 20000,
// p = 1/10: sd ~42) with a bound of +-20 % (~9.5 sd), and the spread with
// a chi-square bound far above its 99.99th percentile (9 df: 33.7).
TEST_P(PolicyContractTest, EqualBackendsWithNothingKnownShareFirstPicks) {
  if (GetParam().key_deterministic) {
    GTEST_SKIP() << "a hash policy maps one key to one backend";
  }
  TickingClock clock;
  LoadTracker loads(&clock);
  TableOptions options{.weights = std::vector<uint32_t>(10, 100)};
  options.session_key =
      std::make_shared<const std::string>("0123456789abcdef0123456789abcdef");
  ASSERT_OK_AND_ASSIGN(TableConstPtr t,
                       Table::Create(MakeTableSpec(GetParam().config, options),
                                     nullptr, &loads));
  constexpr int kPicks = 20000;
  std::vector<int> counts(10, 0);
  std::array<uint32_t, 1> out;
  const int64_t later = clock.NowNanos() + 2'000'000'000;
  for (int i = 0; i < kPicks; ++i) {
    PickRequest r;
    r.rng = &rng_;
    r.now_nanos = later + i;
    SessionToken token;
    r.issued_token = &token;
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 1u);
    counts[out[0]]++;
  }
  const double expected = kPicks / 10.0;
  double chi2 = 0;
  for (size_t m = 0; m < counts.size(); ++m) {
    EXPECT_GT(counts[m], expected * 0.8) << "backend " << m;
    EXPECT_LT(counts[m], expected * 1.2) << "backend " << m;
    chi2 += (counts[m] - expected) * (counts[m] - expected) / expected;
  }
  EXPECT_LT(chi2, 60) << ::testing::PrintToString(counts);
}

// Generation g: the same 6 addresses, those with index parity g % 2 ready,
// plus 2 more members only in odd generations. A pick that saw the members
// of one generation with the readiness of another would return a member of
// the wrong parity, or an odd-only member in an even generation.
TEST_P(PolicyContractTest, PicksDuringTableSwapsSeeOneGeneration) {
  auto spec_for = [&](uint64_t generation) {
    TableOptions options;
    options.generation = generation;
    options.session_key =
        std::make_shared<const std::string>("0123456789abcdef0123456789abcdef");
    const size_t n = generation % 2 ? 8 : 6;
    for (size_t i = 0; i < n; ++i) {
      options.weights.push_back(1 + static_cast<uint32_t>(i % 3));
      options.ready.push_back(i >= 6 || i % 2 == generation % 2);
    }
    return MakeTableSpec(GetParam().config, options);
  };
  ASSERT_OK_AND_ASSIGN(TableConstPtr first,
                       Table::Create(spec_for(1), nullptr, &loads_));
  SnapshotCell<Table> cell(first);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> picks{0};
  std::vector<std::thread> readers;
  for (int th = 0; th < 3; ++th) {
    readers.emplace_back([&, th] {
      FastRng rng(100 + th);
      std::array<uint32_t, 2> out;
      int i = 0;
      while (!done.load(std::memory_order_acquire) || i < 100) {
        TableConstPtr t = cell.Acquire();
        const std::string key = absl::StrCat("k", i++);
        PickRequest r;
        r.key = key;
        r.rng = &rng;
        const size_t n = t->Pick(r, absl::MakeSpan(out));
        const uint64_t g = t->generation();
        if (n == 0) {
          torn.fetch_add(1);
        }
        for (size_t j = 0; j < n; ++j) {
          const std::string& a = t->member(out[j]).backend.address;
          const size_t index = static_cast<size_t>(
              std::find_if(
                  t->members().begin(), t->members().end(),
                  [&](const Member& m) { return m.backend.address == a; }) -
              t->members().begin());
          const bool extra = index >= 6;
          if ((extra && g % 2 == 0) || (!extra && index % 2 != g % 2)) {
            torn.fetch_add(1);
          }
        }
        picks.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  TableConstPtr current = first;
  for (uint64_t g = 2; g < 200; ++g) {
    auto next = Table::Create(spec_for(g), current.get(), &loads_);
    ASSERT_TRUE(next.ok()) << next.status();
    current = *next;
    cell.Publish(current);
  }
  done.store(true, std::memory_order_release);
  for (std::thread& th : readers) {
    th.join();
  }
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(picks.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContractTest,
                         ::testing::ValuesIn(AllPolicies()),
                         [](const ::testing::TestParamInfo<PolicyCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace aside
