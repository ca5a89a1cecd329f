// The group schema: its validators report field paths as data, and the
// health registry and DNS discovery apply its rules with their own floors.
#include "server/schema/group_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "server/schema/group_spec_proto.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

GroupSpec Web() {
  GroupSpec g;
  g.name = "web";
  g.backends = {Backend{.address = "10.0.0.1:80"},
                Backend{.address = "10.0.0.2:80"}};
  return g;
}

TEST(GroupSpecTest, ErrorsCarryTheirFieldPath) {
  GroupSpec g = Web();
  g.health_check.jitter = 0.9;
  absl::Status s = ValidateGroupSpec(g);
  EXPECT_EQ(s.message(), "health_check.jitter: 0.9 out of range 0..0.5");
  EXPECT_EQ(ErrorFieldPath(s), "health_check.jitter");

  g = Web();
  g.backends[1].address = "10.0.0.1:80";
  s = ValidateGroupSpec(g);
  EXPECT_EQ(ErrorFieldPath(s), "backends[1].address");
  EXPECT_THAT(s.message(), HasSubstr("listed twice (also backends[0])"));

  g = Web();
  g.name = "Web";
  EXPECT_EQ(ErrorFieldPath(ValidateGroupSpec(g)), "name");
}

TEST(GroupSpecTest, EachBackendErrorNamesItsBackendAndField) {
  // The error is on the last of several backends, after valid ones.
  struct Case {
    std::function<void(Backend&)> spoil;
    std::string path;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](Backend& b) { b.address = "no port"; }, "backends[2].address", ""},
      {[](Backend& b) { b.address = "db.local:80"; }, "backends[2].address",
       "is a host name"},
      {[](Backend& b) { b.weight = 10001; }, "backends[2].weight",
       "10001 out of range 0..10000"},
      {[](Backend& b) { b.locality.zone = std::string(300, 'z'); },
       "backends[2].locality", "a field is longer than"},
      {[](Backend& b) { b.metadata[""] = "v"; }, "backends[2].metadata",
       "key '' must be 1.."},
      {[](Backend& b) { b.metadata["k"] = std::string(5000, 'v'); },
       "backends[2].metadata['k']", "value longer than"},
      {[](Backend& b) { b.address = "10.0.0.2:80"; }, "backends[2].address",
       "listed twice (also backends[1])"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path + " " + c.message);
    GroupSpec g = Web();
    g.backends.push_back(Backend{.address = "10.0.0.3:80"});
    c.spoil(g.backends[2]);
    absl::Status s = ValidateGroupSpec(g);
    EXPECT_EQ(ErrorFieldPath(s), c.path);
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_THAT(s.message(), HasSubstr(c.path + ": "));
  }
  // Valid backends come out canonical.
  GroupSpec g = Web();
  g.backends.push_back(Backend{.address = "[::1]:80"});
  ASSERT_TRUE(ValidateGroupSpec(g).ok());
  EXPECT_EQ(g.backends[2].address, "[::1]:80");
}

TEST(GroupSpecTest, AdminPrefixesThePath) {
  v1::Group pb;
  pb.set_name("web");
  pb.add_backends()->set_address("10.0.0.1:80");
  pb.mutable_health_check()->set_jitter(0.9);
  absl::StatusOr<GroupSpec> spec = GroupSpecFromProto("group", pb);
  EXPECT_THAT(spec, StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("group.health_check.jitter: 0.9 out "
                                       "of range 0..0.5")));
  EXPECT_EQ(ErrorFieldPath(spec.status()), "group.health_check.jitter");
  spec = GroupSpecFromProto("", pb);
  EXPECT_EQ(ErrorFieldPath(spec.status()), "health_check.jitter");
}

TEST(GroupSpecTest, ProbeSpecsMayBeFasterThanGroupsButNotOutOfRange) {
  HealthCheckSpec fast;
  fast.interval = absl::Milliseconds(5);
  fast.timeout = absl::Seconds(2);
  EXPECT_OK(ValidateProbeSpec("health_check", fast));
  EXPECT_THAT(ValidateHealthCheck("health_check", fast),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("health_check.interval: 5ms out of range")));
  fast.jitter = 0.6;
  EXPECT_EQ(ErrorFieldPath(ValidateProbeSpec("health_check", fast)),
            "health_check.jitter");
}

TEST(GroupSpecTest, DnsIntervalFloorIsTheCallers) {
  DnsSpec dns{
      .name = "web.test", .port = 80, .interval = absl::Milliseconds(200)};
  EXPECT_THAT(ValidateDns("dns", dns),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dns.interval: 200ms out of range 1s..1h")));
  EXPECT_OK(ValidateDns("dns", dns, absl::Milliseconds(100)));
}

TEST(GroupSpecTest, KindNamesRoundTrip) {
  for (auto kind :
       {HealthCheckSpec::Kind::kTcp, HealthCheckSpec::Kind::kHttp,
        HealthCheckSpec::Kind::kGrpc, HealthCheckSpec::Kind::kNone}) {
    EXPECT_EQ(HealthCheckKindFromName(HealthCheckKindName(kind)), kind);
  }
  EXPECT_EQ(HealthCheckKindFromName("udp"), std::nullopt);
}

}  // namespace
}  // namespace aside::server
