// Rendezvous hashing for probe ownership (lib/rendezvous.h) and the fleet's
// etcd values (server/fleet/fleet_records.h).
#include "lib/rendezvous.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/fleet/fleet_records.h"
#include "server/health/health_registry.h"

namespace aside {
namespace {

std::vector<uint64_t> Members(int n) {
  std::vector<uint64_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(RendezvousMemberHash(absl::StrCat("replica-", i)));
  }
  return out;
}

uint64_t Key(int i) {
  server::HealthCheckSpec spec;
  return server::FleetTargetKey(
      absl::StrCat("10.0.", i / 250, ".", i % 250, ":80"), spec);
}

TEST(RendezvousTest, RemovingAMemberMovesOnlyItsKeys) {
  const std::vector<uint64_t> five = Members(5);
  std::vector<uint64_t> four = five;
  four.erase(four.begin() + 2);
  int moved = 0;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t before = five[RendezvousOwner(Key(i), five)];
    const uint64_t after = four[RendezvousOwner(Key(i), four)];
    if (before != five[2]) {
      EXPECT_EQ(before, after) << "key " << i;
    } else {
      ++moved;
    }
  }
  EXPECT_NEAR(moved, 2000, 200);
}

TEST(RendezvousTest, AddingAMemberTakesOnlyForItself) {
  const std::vector<uint64_t> three = Members(3);
  const std::vector<uint64_t> four = Members(4);
  int moved = 0;
  for (int i = 0; i < 10000; ++i) {
    const uint64_t before = three[RendezvousOwner(Key(i), three)];
    const uint64_t after = four[RendezvousOwner(Key(i), four)];
    if (before != after) {
      EXPECT_EQ(after, four[3]) << "key " << i;
      ++moved;
    }
  }
  EXPECT_NEAR(moved, 2500, 250);
}

TEST(RendezvousTest, SharesAreBalancedAndOrderDoesNotMatter) {
  std::vector<uint64_t> members = Members(5);
  std::vector<int> share(5);
  std::vector<uint64_t> reversed(members.rbegin(), members.rend());
  for (int i = 0; i < 10000; ++i) {
    const size_t owner = RendezvousOwner(Key(i), members);
    ++share[owner];
    EXPECT_EQ(reversed[RendezvousOwner(Key(i), reversed)], members[owner]);
  }
  for (int s : share) {
    EXPECT_NEAR(s, 2000, 200);  // about 5 standard deviations
  }
  EXPECT_EQ(RendezvousOwner(Key(0), {}), 0u);
}

TEST(RendezvousTest, TargetKeyCoversTheSpec) {
  server::HealthCheckSpec a;
  server::HealthCheckSpec b = a;
  b.http_path = "/health";
  EXPECT_EQ(server::FleetTargetKey("10.0.0.1:80", a),
            server::FleetTargetKey("10.0.0.1:80", a));
  EXPECT_NE(server::FleetTargetKey("10.0.0.1:80", a),
            server::FleetTargetKey("10.0.0.1:80", b));
  EXPECT_NE(server::FleetTargetKey("10.0.0.1:80", a),
            server::FleetTargetKey("10.0.0.1:81", a));
}

TEST(FleetRecordsTest, MemberValueHasTheDocumentedFormat) {
  const std::string v =
      server::fleet::EncodeMember({.id = "ab12",
                                   .address = "127.0.0.1:50051",
                                   .start_time = "2026-12-01T10:00:00.000Z",
                                   .targets_owned = 7});
  EXPECT_EQ(v,
            "{\"id\":\"ab12\",\"address\":\"127.0.0.1:50051\",\"start_time\":"
            "\"2026-12-01T10:00:00.000Z\",\"targets_owned\":7}");
  auto parsed = server::fleet::ParseMember(v);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->targets_owned, 7u);
  EXPECT_EQ(parsed->address, "127.0.0.1:50051");
  EXPECT_FALSE(server::fleet::ParseMember("{\"address\":\"x\"}").ok());
  EXPECT_FALSE(server::fleet::ParseMember("not json").ok());
}

TEST(FleetRecordsTest, HealthValueRoundTrips) {
  server::fleet::HealthRecord h;
  h.owner = "r1";
  h.address = "10.0.0.1:80";
  h.counters.state = HealthState::kUnhealthy;
  h.counters.consecutive_failures = 3;
  h.reason = "connect: connection refused";
  auto parsed = server::fleet::ParseHealth(server::fleet::EncodeHealth(h));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->counters.state, HealthState::kUnhealthy);
  EXPECT_EQ(parsed->counters.consecutive_failures, 3u);
  EXPECT_EQ(parsed->reason, h.reason);
  EXPECT_FALSE(server::fleet::ParseHealth("{\"state\":\"bogus\"}").ok());
  const std::string key = server::fleet::HealthKey("/p/", 0xabcULL);
  EXPECT_EQ(key, "/p/health/0000000000000abc");
  EXPECT_EQ(server::fleet::ParseHealthKey("/p/health/", key), 0xabcULL);
  EXPECT_FALSE(server::fleet::ParseHealthKey("/p/health/", "/p/health/zz"));
}

}  // namespace
}  // namespace aside
