// The per-event rate limit of LogThrottled: a burst, then the rest left out
// and counted, and the next line written says how many.
#include "server/base/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace aside::server {
namespace {

uint64_t Suppressed(const std::string& event) {
  for (const auto& [name, total] : LogSuppressed()) {
    if (name == event) {
      return total;
    }
  }
  return 0;
}

// An event name no earlier run of a test in this process used: budgets and
// counts are per event for the whole process (--gtest_repeat runs a test
// again in the same one).
std::string Fresh(absl::string_view event) {
  static int runs = 0;
  return absl::StrCat(event, ".", ++runs);
}

TEST(LogThrottledTest, WritesABurstThenCountsWhatItLeavesOut) {
  const std::string flood = Fresh("test.flood");
  const std::string other = Fresh("test.other");
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) {
    LogThrottled(LogLevel::kWarn, flood, {{"i", std::to_string(i)}});
  }
  const std::string written = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (char c : written) {
    lines += c == '\n' ? 1 : 0;
  }
  // The burst, and at most one more per second the loop took.
  EXPECT_GE(lines, static_cast<size_t>(kThrottleBurst));
  EXPECT_LE(lines, static_cast<size_t>(kThrottleBurst) + 5);
  EXPECT_EQ(Suppressed(flood), 1000 - lines);
  // Other events have their own budget.
  ::testing::internal::CaptureStderr();
  LogThrottled(LogLevel::kWarn, other);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              ::testing::HasSubstr("event=" + other));
  EXPECT_EQ(Suppressed(other), 0u);
}

TEST(LogThrottledTest, TheNextLineWrittenSaysHowManyWereLeftOut) {
  const std::string gap = Fresh("test.gap");
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kThrottleBurst + 7; ++i) {
    LogThrottled(LogLevel::kWarn, gap);
  }
  (void)::testing::internal::GetCapturedStderr();
  ::testing::internal::CaptureStderr();
  // One token comes back within a second (bounded: 3 s).
  std::string line;
  for (int i = 0; i < 300 && line.empty(); ++i) {
    LogThrottled(LogLevel::kWarn, gap);
    line = ::testing::internal::GetCapturedStderr();
    if (line.empty()) {
      absl::SleepFor(absl::Milliseconds(10));
      ::testing::internal::CaptureStderr();
    }
  }
  EXPECT_THAT(line, ::testing::HasSubstr("suppressed="));
}

}  // namespace
}  // namespace aside::server
