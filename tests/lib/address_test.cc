#include "lib/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

TEST(AddressTest, ParsesIpv4) {
  ASSERT_OK_AND_ASSIGN(Address a, ParseAddress("10.0.0.7:8080"));
  EXPECT_EQ(a.kind, Address::Kind::kIpv4);
  EXPECT_EQ(a.host, "10.0.0.7");
  EXPECT_EQ(a.port, 8080);
  EXPECT_EQ(a.ToString(), "10.0.0.7:8080");
}

TEST(AddressTest, CanonicalisesIpv6) {
  ASSERT_OK_AND_ASSIGN(std::string a, CanonicalAddress("[0:0::1]:80"));
  EXPECT_EQ(a, "[::1]:80");
}

TEST(AddressTest, LowercasesHostnames) {
  ASSERT_OK_AND_ASSIGN(Address a, ParseAddress("Payments.SVC:443"));
  EXPECT_EQ(a.kind, Address::Kind::kHostname);
  EXPECT_EQ(a.ToString(), "payments.svc:443");
}

TEST(AddressTest, RejectsBadInput) {
  EXPECT_THAT(ParseAddress(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(ParseAddress("10.0.0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("missing ':port'")));
  EXPECT_THAT(ParseAddress("10.0.0.1:70000"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out of range 1..65535")));
  EXPECT_THAT(
      ParseAddress("10.0.0.1:0"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")));
  EXPECT_THAT(
      ParseAddress("10.0.0.1:-5"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid port")));
  EXPECT_THAT(
      ParseAddress("300.1.1.1:80"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid host")));
  EXPECT_THAT(
      ParseAddress("::1:80"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[addr]:port")));
  EXPECT_THAT(
      ParseAddress("[::1:80"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing ']'")));
  EXPECT_THAT(
      ParseAddress("bad host:80"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid host")));
  EXPECT_THAT(
      ParseAddress("-x.example:80"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid host")));
}

}  // namespace
}  // namespace aside
