// DNS answers decoded into addresses and SRV records
// (server/discovery/dns_answer.h), from answers built byte by byte.
#include "server/discovery/dns_answer.h"

#include <ares.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace aside::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// One name in DNS wire form; each label as given (it may hold any bytes).
std::string Name(const std::vector<std::string>& labels) {
  std::string out;
  for (const std::string& l : labels) {
    out += static_cast<char>(l.size());
    out += l;
  }
  return out + '\0';
}

std::string U16(int v) {
  return {static_cast<char>(v >> 8), static_cast<char>(v & 0xff)};
}

// A response to one question of `type` with `answers` (type, rdata), each
// owned by the question's name.
std::string Message(int type,
                    const std::vector<std::pair<int, std::string>>& answers) {
  std::string m = U16(0x1234) + U16(0x8180) + U16(1) +
                  U16(static_cast<int>(answers.size())) + U16(0) + U16(0);
  m += Name({"_grpc", "_tcp", "web", "example"}) + U16(type) + U16(1);
  for (const auto& [t, rdata] : answers) {
    m += std::string("\xc0\x0c", 2) + U16(t) + U16(1) +
         std::string("\0\0\0\x3c", 4) + U16(static_cast<int>(rdata.size())) +
         rdata;
  }
  return m;
}

std::string Srv(int priority, int port, const std::string& target) {
  return U16(priority) + U16(5) + U16(port) + target;
}

SrvAnswer DecodeSrv(const std::string& m) {
  return DecodeSrvAnswer(reinterpret_cast<const unsigned char*>(m.data()),
                         static_cast<int>(m.size()));
}

TEST(DnsAnswerTest, SrvTargetsAreLowerCaseWithoutTheFinalDot) {
  const SrvAnswer a =
      DecodeSrv(Message(33, {{33, Srv(10, 8080, Name({"A", "Example"}))},
                             {33, Srv(20, 0, Name({"b", "example"}))}}));
  ASSERT_EQ(a.rc, ARES_SUCCESS);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[0].target, "a.example");
  EXPECT_EQ(a.records[0].port, 8080);
  EXPECT_EQ(a.records[0].priority, 10);
  EXPECT_EQ(a.records[1].target, "b.example");
  EXPECT_EQ(a.invalid_targets, 0);
}

TEST(DnsAnswerTest, SrvTargetsThatAreNotHostNamesAreDropped) {
  // A dot and NUL bytes inside a label: c-ares escapes them ("ex\000pl\."),
  // and such a name must not become a backend.
  const SrvAnswer mixed = DecodeSrv(
      Message(33, {{33, Srv(10, 8080, Name({"a", std::string("ex\0pl.", 6)}))},
                   {33, Srv(10, 8080, Name({"good", "example"}))}}));
  ASSERT_EQ(mixed.rc, ARES_SUCCESS);
  ASSERT_EQ(mixed.records.size(), 1u);
  EXPECT_EQ(mixed.records[0].target, "good.example");
  EXPECT_EQ(mixed.invalid_targets, 1);
  // Only bad targets: a bad response, not an empty success.
  const SrvAnswer bad = DecodeSrv(
      Message(33, {{33, Srv(10, 8080, Name({"sp ace", "example"}))}}));
  EXPECT_EQ(bad.rc, ARES_EBADRESP);
  EXPECT_THAT(bad.records, IsEmpty());
  // "." means no service here: not an error.
  const SrvAnswer none = DecodeSrv(Message(33, {{33, Srv(0, 0, Name({}))}}));
  EXPECT_EQ(none.rc, ARES_SUCCESS);
  EXPECT_THAT(none.records, IsEmpty());
  EXPECT_EQ(none.invalid_targets, 0);
}

TEST(DnsAnswerTest, AddressesAndBrokenAnswers) {
  const std::string m = Message(1, {{1, std::string("\x0a\x00\x00\x01", 4)},
                                    {1, std::string("\x0a\x00\x00\x02", 4)}});
  const IpAnswer a =
      DecodeIpAnswer(true, reinterpret_cast<const unsigned char*>(m.data()),
                     static_cast<int>(m.size()));
  ASSERT_EQ(a.rc, ARES_SUCCESS);
  std::vector<std::string> hosts;
  for (const Address& ip : a.ips) {
    EXPECT_EQ(ip.kind, Address::Kind::kIpv4);
    hosts.push_back(ip.host);
  }
  EXPECT_THAT(hosts, ElementsAre("10.0.0.1", "10.0.0.2"));
  // Cut short: an error code and no addresses.
  const IpAnswer cut =
      DecodeIpAnswer(true, reinterpret_cast<const unsigned char*>(m.data()),
                     static_cast<int>(m.size()) - 3);
  EXPECT_NE(cut.rc, ARES_SUCCESS);
  EXPECT_THAT(cut.ips, IsEmpty());
}

}  // namespace
}  // namespace aside::server
