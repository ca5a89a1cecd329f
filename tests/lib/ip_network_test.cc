#include "lib/ip_network.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace aside {
namespace {

using ::testing::HasSubstr;

std::vector<IpNetwork> Networks(std::vector<std::string> texts) {
  std::vector<IpNetwork> out;
  for (const std::string& t : texts) {
    absl::StatusOr<IpNetwork> n = ParseNetwork(t);
    EXPECT_TRUE(n.ok()) << t << ": " << n.status();
    if (n.ok()) {
      out.push_back(*n);
    }
  }
  return out;
}

TEST(NetworksTest, AddressesInsideAndOutside) {
  const std::vector<IpNetwork> n =
      Networks({"10.0.0.0/8", "192.168.4.0/22", "127.0.0.1", "fd00::/8"});
  EXPECT_TRUE(InNetworks(n, "10.1.2.3"));
  EXPECT_TRUE(InNetworks(n, "192.168.7.255"));
  EXPECT_FALSE(InNetworks(n, "192.168.8.0"));
  EXPECT_TRUE(InNetworks(n, "127.0.0.1"));
  EXPECT_FALSE(InNetworks(n, "127.0.0.2"));
  EXPECT_TRUE(InNetworks(n, "fd12:3456::1"));
  EXPECT_FALSE(InNetworks(n, "fe80::1"));
  // An IPv4 peer seen through an IPv6 socket is its IPv4 address.
  EXPECT_TRUE(InNetworks(n, "::ffff:10.9.9.9"));
  EXPECT_FALSE(InNetworks(n, "::ffff:11.9.9.9"));
  // Not addresses: never trusted.
  EXPECT_FALSE(InNetworks(n, "localhost"));
  EXPECT_FALSE(InNetworks(n, ""));
  EXPECT_FALSE(InNetworks({}, "10.0.0.1"));
}

TEST(NetworksTest, TheWholeSpaceAndOneHost) {
  EXPECT_TRUE(InNetworks(Networks({"0.0.0.0/0"}), "203.0.113.9"));
  EXPECT_FALSE(InNetworks(Networks({"0.0.0.0/0"}), "::1"));
  EXPECT_TRUE(InNetworks(Networks({"::1/128"}), "::1"));
}

TEST(NetworksTest, BadNetworksAreNamed) {
  EXPECT_THAT(ParseNetwork("10.0.0.1/8").status().message(),
              HasSubstr("host bits set"));
  EXPECT_THAT(ParseNetwork("10.0.0.0/33").status().message(),
              HasSubstr("0..32"));
  EXPECT_THAT(ParseNetwork("fd00::/129").status().message(),
              HasSubstr("0..128"));
  EXPECT_THAT(ParseNetwork("example.com/8").status().message(),
              HasSubstr("not an IPv4 or IPv6 address"));
  EXPECT_THAT(ParseNetwork("10.0.0.0/x").status().message(),
              HasSubstr("prefix length"));
}

}  // namespace
}  // namespace aside
