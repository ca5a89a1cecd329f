// Who counts as one peer on the public ports, how the connection caps
// count, and the connection budget left by the open-file limit
// (server/net/peer_admission.h, server/net/connection_gate.h).
#include "server/net/peer_admission.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/un.h>

#include <string>

#include "server/net/connection_gate.h"

namespace aside::server {
namespace {

std::string Key4(const char* ip) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &a.sin_addr);
  return PeerKey(reinterpret_cast<const sockaddr*>(&a), sizeof(a));
}

std::string Key6(const char* ip) {
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  inet_pton(AF_INET6, ip, &a.sin6_addr);
  return PeerKey(reinterpret_cast<const sockaddr*>(&a), sizeof(a));
}

TEST(PeerKeyTest, Ipv4IsTheAddress) {
  EXPECT_EQ(Key4("10.1.2.3"), "10.1.2.3");
  EXPECT_NE(Key4("10.1.2.3"), Key4("10.1.2.4"));
}

TEST(PeerKeyTest, Ipv6IsGroupedBySlash64) {
  EXPECT_EQ(Key6("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(Key6("2001:db8:1:2:aaaa::1"), Key6("2001:db8:1:2:ffff:1:2:3"));
  EXPECT_NE(Key6("2001:db8:1:2::1"), Key6("2001:db8:1:3::1"));
  EXPECT_EQ(Key6("::1"), "::/64");
}

TEST(PeerKeyTest, V4MappedIsIpv4) {
  EXPECT_EQ(Key6("::ffff:127.0.0.2"), "127.0.0.2");
  EXPECT_EQ(Key6("::ffff:127.0.0.2"), Key4("127.0.0.2"));
}

TEST(PeerKeyTest, OtherFamiliesAreUncapped) {
  sockaddr_un u{};
  u.sun_family = AF_UNIX;
  EXPECT_EQ(PeerKey(reinterpret_cast<const sockaddr*>(&u), sizeof(u)), "");
  // Too short for its family.
  sockaddr_in a{};
  a.sin_family = AF_INET;
  EXPECT_EQ(PeerKey(reinterpret_cast<const sockaddr*>(&a), 4), "");
}

TEST(PeerAdmissionTest, PerPeerCapCountsEachPeer) {
  PeerAdmission admission(/*max_total=*/100, /*max_per_peer=*/2);
  admission.Add("a");
  EXPECT_EQ(admission.Check("a"), PeerAdmission::Refusal::kNone);
  admission.Add("a");
  EXPECT_EQ(admission.Check("a"), PeerAdmission::Refusal::kPerPeer);
  EXPECT_EQ(admission.Check("b"), PeerAdmission::Refusal::kNone);
  admission.Remove("a");
  EXPECT_EQ(admission.Check("a"), PeerAdmission::Refusal::kNone);
  EXPECT_EQ(admission.of("a"), 1u);
  EXPECT_EQ(admission.total(), 1u);
  admission.Remove("a");
  EXPECT_EQ(admission.of("a"), 0u);
  EXPECT_EQ(admission.total(), 0u);
}

TEST(PeerAdmissionTest, TotalCapComesFirst) {
  PeerAdmission admission(/*max_total=*/3, /*max_per_peer=*/2);
  admission.Add("a");
  admission.Add("a");
  admission.Add("b");
  EXPECT_EQ(admission.Check("a"), PeerAdmission::Refusal::kTotal);
  EXPECT_EQ(admission.Check("c"), PeerAdmission::Refusal::kTotal);
  admission.Remove("b");
  EXPECT_EQ(admission.Check("a"), PeerAdmission::Refusal::kPerPeer);
  EXPECT_EQ(admission.Check("c"), PeerAdmission::Refusal::kNone);
}

TEST(PeerAdmissionTest, ZeroIsNoCapAndEmptyKeysHaveNoPeerCap) {
  PeerAdmission admission(/*max_total=*/0, /*max_per_peer=*/0);
  for (int i = 0; i < 1000; ++i) {
    admission.Add("a");
  }
  EXPECT_EQ(admission.Check("a"), PeerAdmission::Refusal::kNone);
  PeerAdmission unix_socket(/*max_total=*/10, /*max_per_peer=*/1);
  unix_socket.Add("");
  unix_socket.Add("");
  EXPECT_EQ(unix_socket.Check(""), PeerAdmission::Refusal::kNone);
  EXPECT_EQ(unix_socket.total(), 2u);
}

TEST(ConnectionBudgetTest, FileLimitLessTheReserve) {
  // max(64, limit / 8) descriptors stay for everything else.
  EXPECT_EQ(ConnectionBudgetFor(0, 1024).max_connections, 1024u - 128u);
  EXPECT_EQ(ConnectionBudgetFor(0, 256).max_connections, 256u - 64u);
  EXPECT_EQ(ConnectionBudgetFor(0, 1 << 20).max_connections,
            (1u << 20) - (1u << 17));
  EXPECT_EQ(ConnectionBudgetFor(0, 10).max_connections, 1u);
  EXPECT_FALSE(ConnectionBudgetFor(0, 1024).lowered);
}

TEST(ConnectionBudgetTest, AConfiguredCapAboveTheBudgetIsLowered) {
  EXPECT_EQ(ConnectionBudgetFor(500, 1024).max_connections, 500u);
  EXPECT_FALSE(ConnectionBudgetFor(500, 1024).lowered);
  const ConnectionBudget b = ConnectionBudgetFor(5000, 1024);
  EXPECT_EQ(b.max_connections, 896u);
  EXPECT_TRUE(b.lowered);
}

}  // namespace
}  // namespace aside::server
