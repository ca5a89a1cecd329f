#include "lib/policy_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

TEST(PolicyConfigTest, NamesRoundTrip) {
  for (int i = 0; i < kPolicyKindCount; ++i) {
    const auto kind = static_cast<PolicyKind>(i);
    ASSERT_OK_AND_ASSIGN(PolicyKind parsed, ParsePolicyName(PolicyName(kind)));
    EXPECT_EQ(parsed, kind);
  }
}

TEST(PolicyConfigTest, UnknownNameListsKnownOnes) {
  EXPECT_THAT(ParsePolicyName("least_conn"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("known: round_robin, weighted_round_robin")));
}

TEST(PolicyConfigTest, DefaultsAreValid) {
  for (int i = 0; i < kPolicyKindCount; ++i) {
    PolicyConfig c;
    c.kind = static_cast<PolicyKind>(i);
    EXPECT_OK(ValidatePolicy("policy", c)) << c.name();
  }
}

TEST(PolicyConfigTest, RejectsOutOfRangeParametersNamingTheField) {
  PolicyConfig c;
  c.kind = PolicyKind::kKetama;
  c.ketama.points_per_weight = 0;
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.ketama.points_per_weight: 0")));
  c = {};
  c.kind = PolicyKind::kMaglev;
  c.maglev.table_size = 65536;
  EXPECT_THAT(
      ValidatePolicy("policy", c),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a prime")));
  c.maglev.table_size = 5000012;
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out of range 101..5000011")));
  c = {};
  c.kind = PolicyKind::kRingHash;
  c.ring_hash.max_ring_size = 8192;
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.ring_hash.max_ring_size: 8192 out of "
                                 "range 1..4096")));
  c.ring_hash.max_ring_size = 512;
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.ring_hash.min_ring_size: 1024 is "
                                 "larger than max_ring_size 512")));
  c = {};
  c.kind = PolicyKind::kLeastTime;
  c.least_time.alpha = 0;
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.least_time.alpha")));
  c.least_time.alpha = std::nan("");
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.least_time.alpha")));
  c = {};
  c.kind = PolicyKind::kP2c;
  c.p2c.decay = absl::ZeroDuration();
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.p2c.decay")));
}

TEST(PolicyConfigTest, RejectsNestedCompositePolicies) {
  PolicyConfig inner;
  inner.kind = PolicyKind::kSticky;
  PolicyConfig c;
  c.kind = PolicyKind::kLocality;
  c.child = std::make_shared<PolicyConfig>(inner);
  EXPECT_THAT(ValidatePolicy("policy", c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("policy.locality.child: policy 'sticky' "
                                 "cannot be nested")));
}

TEST(PolicyConfigTest, EqualityComparesOnlyTheKindsParameters) {
  PolicyConfig a;
  PolicyConfig b;
  b.ketama.points_per_weight = 7;  // not meaningful for round_robin
  EXPECT_EQ(a, b);
  a.kind = b.kind = PolicyKind::kKetama;
  EXPECT_NE(a, b);
}

TEST(PolicyConfigTest, IsPrime) {
  EXPECT_TRUE(IsPrime(65537));
  EXPECT_TRUE(IsPrime(5000011));
  EXPECT_FALSE(IsPrime(65535));
  EXPECT_FALSE(IsPrime(1));
}

}  // namespace
}  // namespace aside
