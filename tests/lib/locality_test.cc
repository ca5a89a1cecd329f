#include "lib/policies/locality.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "lib/policies/ketama.h"
#include "lib/random.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;
using ::testing::Pointwise;

constexpr double kEps = 1e-9;

ZoneWeight Zone(const char* zone, uint32_t hosts, double util) {
  ZoneWeight z;
  z.locality = {"r", zone, ""};
  z.host_count = hosts;
  z.utilization = util;
  return z;
}

std::vector<double> WeightsOf(std::vector<ZoneWeight> zones) {
  AssignZoneWeights(absl::MakeSpan(zones));
  std::vector<double> w;
  for (const ZoneWeight& z : zones) {
    w.push_back(z.weight);
  }
  return w;
}

std::vector<double> Shares(std::vector<ZoneWeight> zones, int local,
                           LocalityParams params = {}) {
  AssignZoneWeights(absl::MakeSpan(zones));
  std::vector<double> shares(zones.size());
  CallerZoneShares(zones, local, params, absl::MakeSpan(shares));
  return shares;
}

TEST(ZoneWeightsTest, WeightIsHostCountTimesHeadroom) {
  // 4 × (1 - 0.5) = 2; 3 × max(0, 1 - 1.2) = 0; 5 × (1 - 0.1) = 4.5.
  EXPECT_THAT(
      WeightsOf({Zone("a", 4, 0.5), Zone("b", 3, 1.2), Zone("c", 5, 0.1)}),
      Pointwise(DoubleNear(kEps), {2.0, 0.0, 4.5}));
}

TEST(ZoneWeightsTest, ZonesWithoutFreshDataGetTheirHostCount) {
  EXPECT_THAT(WeightsOf({Zone("a", 4, 0.5), Zone("b", 2, -1)}),
              Pointwise(DoubleNear(kEps), {2.0, 2.0}));
}

TEST(ZoneWeightsTest, AllOverloadedFallsBackToHostCounts) {
  EXPECT_THAT(
      WeightsOf({Zone("a", 4, 1.0), Zone("b", 2, 1.5), Zone("c", 0, 2.0)}),
      Pointwise(DoubleNear(kEps), {4.0, 2.0, 0.0}));
  EXPECT_THAT(WeightsOf({Zone("a", 0, -1)}),
              Pointwise(DoubleNear(kEps), {0.0}));
  // Published weights that are all zero share by host count too.
  std::vector<ZoneWeight> zeros = {Zone("a", 3, 0.2), Zone("b", 1, 0.2)};
  std::vector<double> shares(2);
  CallerZoneShares(zeros, -1, {}, absl::MakeSpan(shares));
  EXPECT_THAT(shares, Pointwise(DoubleNear(kEps), {3.0, 1.0}));
}

TEST(ZoneSharesTest, LocalZoneGetsEverythingWithinTheVarianceThreshold) {
  // Remote mean = (0.45 × 3 + 0.40 × 1) / 4 = 0.4375; local 0.5 <= 0.5375:
  // all local, then 3% probed to the remotes by host count: 3/4 and 1/4.
  const std::vector<ZoneWeight> zones = {Zone("a", 2, 0.5), Zone("b", 3, 0.45),
                                         Zone("c", 1, 0.40)};
  EXPECT_THAT(Shares(zones, 0),
              Pointwise(DoubleNear(kEps), {0.97, 0.0225, 0.0075}));
  LocalityParams no_probe;
  no_probe.remote_probe_fraction = 0;
  EXPECT_THAT(Shares(zones, 0, no_probe),
              Pointwise(DoubleNear(kEps), {1.0, 0.0, 0.0}));
}

TEST(ZoneSharesTest, BusierLocalZoneSharesByHeadroom) {
  // Local 0.6 > 0.4375 + 0.1: weights as computed, 2 × 0.4 = 0.8,
  // 3 × 0.55 = 1.65, 1 × 0.6 = 0.6; the remotes already exceed 3%.
  EXPECT_THAT(
      Shares({Zone("a", 2, 0.6), Zone("b", 3, 0.45), Zone("c", 1, 0.40)}, 0),
      Pointwise(DoubleNear(kEps), {0.8, 1.65, 0.6}));
  // A wider threshold keeps it local.
  LocalityParams wide;
  wide.utilization_variance_threshold = 0.2;
  wide.remote_probe_fraction = 0;
  EXPECT_THAT(
      Shares({Zone("a", 2, 0.6), Zone("b", 3, 0.45), Zone("c", 1, 0.40)}, 0,
             wide),
      Pointwise(DoubleNear(kEps), {1.0, 0.0, 0.0}));
}

TEST(ZoneSharesTest, RemoteProbeTopsUpASmallRemoteShare) {
  // Local 100 hosts at 0.5 (weight 50), remote 1 host at 0.3 (0.7): not
  // local-preferred (0.5 > 0.4) but the remote share 0.7 / 50.7 < 3%:
  // deficit 0.03 × 50.7 - 0.7 = 0.821 moves from local to remote.
  EXPECT_THAT(Shares({Zone("a", 100, 0.5), Zone("b", 1, 0.3)}, 0),
              Pointwise(DoubleNear(1e-9), {49.179, 1.521}));
}

TEST(ZoneSharesTest, UnknownCallerAndOverloadedLocalUseTheWeights) {
  const std::vector<ZoneWeight> zones = {Zone("a", 2, 0.5), Zone("b", 2, 0.5)};
  EXPECT_THAT(Shares(zones, -1), Pointwise(DoubleNear(kEps), {1.0, 1.0}));
  // A local zone without headroom is never preferred: all overloaded gives
  // host counts, and the probe is already met.
  EXPECT_THAT(Shares({Zone("a", 2, 1.0), Zone("b", 2, 1.0)}, 0),
              Pointwise(DoubleNear(kEps), {2.0, 2.0}));
  // No data anywhere counts as idle: local preferred.
  EXPECT_THAT(Shares({Zone("a", 2, -1), Zone("b", 2, -1)}, 1),
              Pointwise(DoubleNear(kEps), {0.03, 0.97}));
}

HostLoadReport Host(const char* zone, double util, int64_t at,
                    bool ready = true) {
  HostLoadReport h;
  h.locality = {"r", zone, ""};
  h.utilization = util;
  h.reported_at_nanos = at;
  h.ready = ready;
  return h;
}

TEST(ZoneWeightCalculatorTest, AveragesFreshReportsAndSmooths) {
  LocalityParams p;  // update 1 s, smoothing 5 s, expiry 180 s
  const double alpha = 1 - std::exp(-0.2);
  EXPECT_NEAR(LocalitySmoothingAlpha(p), alpha, kEps);
  ZoneWeightCalculator calc(p);
  const int64_t s = 1'000'000'000;
  int64_t now = 1000 * s;
  std::vector<HostLoadReport> hosts = {
      Host("a", 0.2, now),
      Host("a", 0.6, now - 10 * s),
      Host("a", 0.9, now - 181 * s),          // stale: ignored
      Host("a", 0.0, now),                    // no signal: ignored
      Host("a", 0.99, now, /*ready=*/false),  // not ready: not a host
      Host("b", 0.5, now - 200 * s),
      Host("b", 0.1, now - 300 * s)};
  std::vector<ZoneWeight> w = calc.Update(hosts, now);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].locality.zone, "a");
  EXPECT_EQ(w[0].host_count, 4u);
  EXPECT_NEAR(w[0].utilization, 0.4, kEps);  // first value as is
  EXPECT_NEAR(w[0].weight, 4 * 0.6, kEps);
  EXPECT_EQ(w[1].host_count, 2u);
  EXPECT_EQ(w[1].utilization, -1);  // all stale
  EXPECT_NEAR(w[1].weight, 2.0, kEps);

  // One period later, zone a averages 0.8: smoothed 0.4 + alpha × 0.4.
  now += s;
  hosts = {Host("a", 0.8, now), Host("b", 0.5, now)};
  w = calc.Update(hosts, now);
  EXPECT_NEAR(w[0].utilization, alpha * 0.8 + (1 - alpha) * 0.4, kEps);
  EXPECT_NEAR(w[0].weight, 1 * (1 - w[0].utilization), kEps);
  EXPECT_NEAR(w[1].utilization, 0.5, kEps);  // b had no history

  // Zone a goes stale: history forgotten; back with data: taken as is.
  now += 200 * s;
  w = calc.Update({Host("a", 0.8, now - 200 * s)}, now);
  EXPECT_EQ(w[0].utilization, -1);
  w = calc.Update({Host("a", 0.3, now)}, now);
  EXPECT_NEAR(w[0].utilization, 0.3, kEps);
}

// A table over zones a, b and c of region r: members 0-3 in a, 4-5 in b,
// 6 in c.
TableConstPtr ZoneTable(std::vector<ZoneWeight> weights,
                        PolicyConfig policy = {}, std::vector<bool> ready = {},
                        const Table* previous = nullptr) {
  AssignZoneWeights(absl::MakeSpan(weights));
  if (policy.kind != PolicyKind::kLocality) {
    policy.kind = PolicyKind::kLocality;
  }
  TableSpec spec;
  spec.group = "z";
  spec.policy = policy;
  spec.panic_threshold = 0;
  spec.zone_weights = std::move(weights);
  const char* zones[] = {"a", "a", "a", "a", "b", "b", "c"};
  for (int i = 0; i < 7; ++i) {
    Member m;
    m.backend.address = absl::StrCat("10.0.0.", i + 1, ":80");
    m.backend.locality = {"r", zones[i], ""};
    m.ready = ready.empty() || ready[i];
    spec.members.push_back(std::move(m));
  }
  auto t = Table::Create(std::move(spec), previous, nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return *t;
}

std::map<std::string, double> ZoneFractions(
    const Table& t, const Locality* caller, int picks,
    std::map<uint32_t, int>* members = nullptr) {
  FastRng rng(99);
  std::map<std::string, double> zones;
  std::array<uint32_t, 1> out;
  for (int i = 0; i < picks; ++i) {
    PickRequest r;
    r.caller = caller;
    r.rng = &rng;
    EXPECT_EQ(t.Pick(r, absl::MakeSpan(out)), 1u);
    zones[t.member(out[0]).backend.locality.zone] += 1.0 / picks;
    if (members != nullptr) {
      (*members)[out[0]]++;
    }
  }
  return zones;
}

TEST(LocalitySelectorTest, CallerZoneKeepsTrafficAndProbesRemotes) {
  // All zones at 0.5: local preferred; the 3% probe splits 2:1 over b, c.
  TableConstPtr t =
      ZoneTable({Zone("a", 4, 0.5), Zone("b", 2, 0.5), Zone("c", 1, 0.5)});
  const Locality caller{"r", "a", "x"};
  std::map<uint32_t, int> members;
  auto f = ZoneFractions(*t, &caller, 200000, &members);
  EXPECT_NEAR(f["a"], 0.97, 0.003);
  EXPECT_NEAR(f["b"], 0.02, 0.002);
  EXPECT_NEAR(f["c"], 0.01, 0.002);
  // Round robin inside zone a: its four members equally.
  for (uint32_t m = 0; m < 4; ++m) {
    EXPECT_NEAR(members[m], 0.97 * 200000 / 4, 1000) << m;
  }
  // An unknown caller gets the zone weights: 2 : 1 : 0.5.
  auto g = ZoneFractions(*t, nullptr, 200000);
  EXPECT_NEAR(g["a"], 2 / 3.5, 0.005);
  EXPECT_NEAR(g["b"], 1 / 3.5, 0.005);
  EXPECT_NEAR(g["c"], 0.5 / 3.5, 0.005);
}

TEST(LocalitySelectorTest, WithoutPublishedWeightsZonesCountReadyHosts) {
  TableConstPtr t =
      ZoneTable({}, {}, {true, true, false, false, true, true, true});
  const Locality caller{"r", "b", ""};
  auto f = ZoneFractions(*t, &caller, 100000);
  // Local preferred (no data counts as idle), probe 3% split a:c = 2:1.
  EXPECT_NEAR(f["b"], 0.97, 0.003);
  EXPECT_NEAR(f["a"], 0.02, 0.002);
  EXPECT_NEAR(f["c"], 0.01, 0.002);
}

TEST(LocalitySelectorTest, FallbacksCoverTheZoneThenTheOthers) {
  TableConstPtr t =
      ZoneTable({Zone("a", 4, 0.5), Zone("b", 2, 0.5), Zone("c", 1, 0.5)});
  const Locality caller{"r", "b", ""};
  FastRng rng(1);
  std::array<uint32_t, 7> out;
  PickRequest r;
  r.caller = &caller;
  r.rng = &rng;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(t->Pick(r, absl::MakeSpan(out)), 7u);
    EXPECT_EQ(std::set<uint32_t>(out.begin(), out.end()).size(), 7u);
    if (out[0] == 4 || out[0] == 5) {  // the usual case: zone b first
      EXPECT_EQ(std::set<uint32_t>(out.begin(), out.begin() + 2),
                (std::set<uint32_t>{4, 5}));
    }
  }
}

TEST(LocalitySelectorTest, KetamaChildKeepsItsRingAcrossReadinessChanges) {
  PolicyConfig policy;
  policy.kind = PolicyKind::kLocality;
  auto child = std::make_shared<PolicyConfig>();
  child->kind = PolicyKind::kKetama;
  policy.child = child;
  TableConstPtr t1 = ZoneTable({}, policy);
  TableConstPtr t2 = ZoneTable(
      {}, policy, {true, false, true, true, true, true, true}, t1.get());
  const Locality caller{"r", "a", ""};
  std::array<uint32_t, 1> out;
  PickRequest r;
  r.caller = &caller;
  r.key = "user-1";
  FastRng rng(4);
  r.rng = &rng;
  std::set<uint32_t> seen;
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(t1->Pick(r, absl::MakeSpan(out)), 1u);
    if (t1->member(out[0]).backend.locality.zone == "a") {
      seen.insert(out[0]);
    }
  }
  EXPECT_EQ(seen.size(), 1u);  // the same key, the same backend in zone a
}

}  // namespace
}  // namespace aside
