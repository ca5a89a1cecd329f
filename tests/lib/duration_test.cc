#include "lib/duration.h"

#include <gtest/gtest.h>

namespace aside {
namespace {

TEST(DurationTest, ParsesUnitsAndRejectsTheRest) {
  EXPECT_EQ(*ParseDurationText("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDurationText(" 5s "), absl::Seconds(5));
  EXPECT_EQ(*ParseDurationText("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDurationText("0"), absl::ZeroDuration());
  EXPECT_EQ(ParseDurationText("5").status().message(),
            "duration '5' needs a unit (ms, s, m, h), e.g. 500ms or 5s");
  EXPECT_FALSE(ParseDurationText("").ok());
  EXPECT_FALSE(ParseDurationText("-5s").ok());
  EXPECT_FALSE(ParseDurationText("+5s").ok());
  EXPECT_FALSE(ParseDurationText("inf").ok());
  EXPECT_FALSE(ParseDurationText("876600h1s").ok());
}

}  // namespace
}  // namespace aside
