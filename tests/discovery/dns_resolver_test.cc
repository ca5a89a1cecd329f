// Unit tests of the parts of DNS discovery that need no server: server
// address parsing, spec checks, jitter, outcome names, bad options.
#include "server/discovery/dns_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "server/discovery/dns_discovery.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseDnsServerTest, AcceptsIpsWithAndWithoutPorts) {
  ASSERT_OK_AND_ASSIGN(Address v4, ParseDnsServer("127.0.0.1:5353"));
  EXPECT_EQ(v4.ToString(), "127.0.0.1:5353");
  ASSERT_OK_AND_ASSIGN(Address v4_default, ParseDnsServer("127.0.0.1"));
  EXPECT_EQ(v4_default.ToString(), "127.0.0.1:53");
  ASSERT_OK_AND_ASSIGN(Address v6, ParseDnsServer("[::1]:5353"));
  EXPECT_EQ(v6.kind, Address::Kind::kIpv6);
  EXPECT_EQ(v6.ToString(), "[::1]:5353");
  ASSERT_OK_AND_ASSIGN(Address v6_bare, ParseDnsServer("0:0::1"));
  EXPECT_EQ(v6_bare.ToString(), "[::1]:53");
  ASSERT_OK_AND_ASSIGN(Address v6_brackets, ParseDnsServer("[fd00::53]"));
  EXPECT_EQ(v6_brackets.ToString(), "[fd00::53]:53");
}

TEST(ParseDnsServerTest, RefusesHostNamesAndBadPorts) {
  EXPECT_THAT(ParseDnsServer("dns.example:53"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("must be an IP address")));
  EXPECT_THAT(
      ParseDnsServer("127.0.0.1:0"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")));
  EXPECT_THAT(ParseDnsServer("127.0.0.1:99999"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ParseDnsServer(""),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(ParseDnsServer("[::1"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(DnsResolverTest, RefusesBadOptions) {
  DnsResolverOptions options;
  options.servers = {"127.0.0.1:5353", "resolver.local:53"};
  EXPECT_THAT(DnsResolver::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("resolver.local")));
  options.servers = {"127.0.0.1:5353"};
  options.tries = 0;
  EXPECT_THAT(
      DnsResolver::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns tries")));
  options.tries = 2;
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(
      DnsResolver::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns timeout")));
}

TEST(DnsResolverTest, DestroyingCancelsPendingResolutions) {
  DnsResolverOptions options;
  // Nothing listens on port 9 of this loopback address in the sandbox, and
  // no query is processed: destruction comes first.
  options.servers = {"127.0.0.1:9"};
  ASSERT_OK_AND_ASSIGN(auto resolver, DnsResolver::Create(options));
  std::vector<DnsResult> results;
  resolver->ResolveHost("web.test", 80,
                        [&](DnsResult r) { results.push_back(std::move(r)); });
  resolver->ResolveSrv("_http._tcp.web.test", 0,
                       [&](DnsResult r) { results.push_back(std::move(r)); });
  EXPECT_EQ(resolver->pending(), 2u);
  resolver.reset();
  ASSERT_EQ(results.size(), 2u);
  for (const DnsResult& r : results) {
    EXPECT_EQ(r.outcome, DnsOutcome::kCancelled);
    EXPECT_THAT(r.status,
                StatusIs(absl::StatusCode::kCancelled, HasSubstr("cancelled")));
  }
}

TEST(DnsOutcomeTest, NamesAreMetricLabels) {
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kOk), "ok");
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kNxdomain), "nxdomain");
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kTimeout), "timeout");
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kServfail), "servfail");
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kRefused), "refused");
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kConnectionRefused),
            "connection_refused");
  EXPECT_EQ(DnsOutcomeName(DnsOutcome::kBadResponse), "bad_response");
}

TEST(JitteredIntervalTest, StaysWithinTheJitterBand) {
  const absl::Duration interval = absl::Seconds(10);
  EXPECT_EQ(JitteredInterval(interval, 0.1, 0.0), absl::Seconds(9));
  EXPECT_EQ(JitteredInterval(interval, 0.1, 0.5), absl::Seconds(10));
  EXPECT_EQ(JitteredInterval(interval, 0.1, 0.75), absl::Seconds(10.5));
  EXPECT_LT(JitteredInterval(interval, 0.1, 0.999999), absl::Seconds(11));
  EXPECT_EQ(JitteredInterval(interval, 0.0, 0.9), interval);
}

TEST(ValidateDnsWatchTest, FollowsValidateDnsWithAConfigurableMinimum) {
  DnsSpec spec;
  spec.name = "web.test";
  spec.port = 80;
  spec.interval = absl::Milliseconds(200);
  EXPECT_OK(ValidateDnsWatch(spec, absl::Milliseconds(100)));
  EXPECT_THAT(ValidateDnsWatch(spec, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dns.interval: 200ms out of range 1s..1h")));
  spec.interval = absl::Hours(2);
  EXPECT_THAT(
      ValidateDnsWatch(spec, absl::Seconds(1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns.interval")));
  spec.interval = absl::Seconds(5);

  DnsSpec no_port = spec;
  no_port.port = 0;
  EXPECT_THAT(ValidateDnsWatch(no_port, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dns.port: 0 out of range 1..65535")));
  no_port.srv = true;  // SRV records carry the port
  EXPECT_OK(ValidateDnsWatch(no_port, absl::Seconds(1)));

  DnsSpec heavy = spec;
  heavy.weight = kMaxWeight + 1;
  EXPECT_THAT(
      ValidateDnsWatch(heavy, absl::Seconds(1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns.weight")));
  for (const char* name : {"", "web test", "web\n.test"}) {
    DnsSpec bad = spec;
    bad.name = name;
    EXPECT_THAT(
        ValidateDnsWatch(bad, absl::Seconds(1)),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns.name")))
        << name;
  }
}

TEST(DnsDiscoveryTest, RefusesBadOptionsAndSpecs) {
  prometheus::Registry registry;
  DnsDiscoveryOptions options;
  options.servers = {"not-an-ip:53"};
  EXPECT_THAT(
      DnsDiscovery::Create(options, registry),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not-an-ip")));
  options.servers = {"127.0.0.1:9"};
  options.jitter = 0.9;
  EXPECT_THAT(
      DnsDiscovery::Create(options, registry),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("jitter")));
  options.jitter = 0.1;
  options.max_in_flight = 0;
  EXPECT_THAT(
      DnsDiscovery::Create(options, registry),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_in_flight")));
  options.max_in_flight = 64;
  ASSERT_OK_AND_ASSIGN(auto discovery, DnsDiscovery::Create(options, registry));
  DnsSpec spec;
  spec.name = "web.test";
  spec.port = 0;
  EXPECT_THAT(
      discovery->Watch("web", spec, [](const auto&) {}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dns.port")));
  spec.port = 80;
  EXPECT_THAT(
      discovery->Watch("web", spec, nullptr),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("callback")));
  EXPECT_TRUE(discovery->List().empty());
  // Unknown ids are ignored.
  discovery->Unwatch(12345);
  discovery->ResolveNow(12345);
  EXPECT_FALSE(discovery->Status(12345).has_value());
}

}  // namespace
}  // namespace aside::server
