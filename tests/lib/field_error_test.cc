#include "lib/field_error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lib/backend.h"
#include "lib/policy_config.h"

namespace aside {
namespace {

TEST(FieldErrorTest, CarriesThePathInTheMessageAndAsData) {
  absl::Status s = InvalidField("backends[2].weight", "20000 out of range");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "backends[2].weight: 20000 out of range");
  EXPECT_EQ(ErrorFieldPath(s), "backends[2].weight");
  EXPECT_EQ(ErrorFieldPath(absl::InvalidArgumentError("x: y")), std::nullopt);
  EXPECT_EQ(ErrorFieldPath(absl::OkStatus()), std::nullopt);
}

TEST(FieldErrorTest, PrefixingNestsMessageAndPath) {
  absl::Status s = PrefixFieldPath(
      "group",
      FieldError(absl::StatusCode::kResourceExhausted, "backends", "too many"));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "group.backends: too many");
  EXPECT_EQ(ErrorFieldPath(s), "group.backends");

  s = PrefixFieldPath("group.aliases", InvalidField("[3]", "empty"));
  EXPECT_EQ(s.message(), "group.aliases[3]: empty");
  EXPECT_EQ(ErrorFieldPath(s), "group.aliases[3]");

  // A status without a path gets the prefix as its path.
  s = PrefixFieldPath("dns", absl::InvalidArgumentError("no answer"));
  EXPECT_EQ(s.message(), "dns: no answer");
  EXPECT_EQ(ErrorFieldPath(s), "dns");

  EXPECT_TRUE(PrefixFieldPath("group", absl::OkStatus()).ok());
  EXPECT_EQ(ErrorFieldPath(PrefixFieldPath("", InvalidField("a", "b"))), "a");
}

TEST(FieldErrorTest, ValidatorsOfLibReportPaths) {
  Backend b{.address = "10.0.0.1:80", .weight = 20000};
  absl::Status s = ValidateBackend("backends[1]", b, false);
  EXPECT_EQ(s.message(), "backends[1].weight: 20000 out of range 0..10000");
  EXPECT_EQ(ErrorFieldPath(s), "backends[1].weight");

  PolicyConfig p;
  p.kind = PolicyKind::kMaglev;
  p.maglev.table_size = 1000;
  s = ValidatePolicy("policy", p);
  EXPECT_EQ(s.message(), "policy.maglev.table_size: 1000 is not a prime");
  EXPECT_EQ(ErrorFieldPath(s), "policy.maglev.table_size");
}

TEST(FieldErrorTest, RangeChecks) {
  EXPECT_TRUE(CheckNumber("jitter", 0.5, {0, 0.5}).ok());
  EXPECT_EQ(CheckNumber("jitter", 0.9, {0, 0.5}).message(),
            "jitter: 0.9 out of range 0..0.5");
  EXPECT_FALSE(CheckNumber("jitter", std::nan(""), {0, 0.5}).ok());
  EXPECT_EQ(CheckDuration("interval", absl::Milliseconds(5),
                          absl::Milliseconds(100), absl::Hours(1))
                .message(),
            "interval: 5ms out of range 100ms..1h");
  EXPECT_EQ(ErrorFieldPath(CheckInteger("rise", 0, {1, 100})), "rise");
}

}  // namespace
}  // namespace aside
