// The per-event rate limit of LogThrottled: a burst, then the rest left out
// and counted, and the next line written says how many.
#include "server/base/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

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

TEST(LogThrottledTest, WritesABurstThenCountsWhatItLeavesOut) {
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 1000; ++i) {
    LogThrottled(LogLevel::kWarn, "test.flood", {{"i", std::to_string(i)}});
  }
  const std::string written = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (char c : written) {
    lines += c == '\n' ? 1 : 0;
  }
  // The burst, and at most one more per second the loop took.
  EXPECT_GE(lines, static_cast<size_t>(kThrottleBurst));
  EXPECT_LE(lines, static_cast<size_t>(kThrottleBurst) + 5);
  EXPECT_EQ(Suppressed("test.flood"), 1000 - lines);
  // Other events have their own budget.
  ::testing::internal::CaptureStderr();
  LogThrottled(LogLevel::kWarn, "test.other");
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              ::testing::HasSubstr("event=test.other"));
  EXPECT_EQ(Suppressed("test.other"), 0u);
}

TEST(LogThrottledTest, TheNextLineWrittenSaysHowManyWereLeftOut) {
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < kThrottleBurst + 7; ++i) {
    LogThrottled(LogLevel::kWarn, "test.gap");
  }
  (void)::testing::internal::GetCapturedStderr();
  ::testing::internal::CaptureStderr();
  // One token comes back within a second (bounded: 3 s).
  std::string line;
  for (int i = 0; i < 300 && line.empty(); ++i) {
    LogThrottled(LogLevel::kWarn, "test.gap");
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
