// GoogleTest helpers for absl::Status and absl::StatusOr.
#ifndef ASIDE_TESTS_TESTING_STATUS_MATCHERS_H_
#define ASIDE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace aside::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// Matches a Status or StatusOr with the given code and a message matching
// `message_matcher`.
MATCHER_P2(StatusIs, code, message_matcher, "") {
  const absl::Status& s = GetStatus(arg);
  if (s.code() != code) {
    *result_listener << "code is " << absl::StatusCodeToString(s.code()) << " ("
                     << s.message() << ")";
    return false;
  }
  return ::testing::ExplainMatchResult(
      message_matcher, std::string(s.message()), result_listener);
}

}  // namespace aside::testing

#define ASIDE_STATUS_MATCHERS_CONCAT_(a, b) a##b
#define ASIDE_STATUS_MATCHERS_CONCAT(a, b) ASIDE_STATUS_MATCHERS_CONCAT_(a, b)

#define EXPECT_OK(expr) \
  EXPECT_TRUE((expr).ok()) << ::aside::testing::GetStatus(expr)
#define ASSERT_OK(expr) \
  ASSERT_TRUE((expr).ok()) << ::aside::testing::GetStatus(expr)

// ASSERT_OK_AND_ASSIGN(auto x, MakeX());
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                              \
  auto ASIDE_STATUS_MATCHERS_CONCAT(statusor_, __LINE__) = (rexpr);   \
  ASSERT_TRUE(ASIDE_STATUS_MATCHERS_CONCAT(statusor_, __LINE__).ok()) \
      << ASIDE_STATUS_MATCHERS_CONCAT(statusor_, __LINE__).status();  \
  lhs = *std::move(ASIDE_STATUS_MATCHERS_CONCAT(statusor_, __LINE__))

#endif  // ASIDE_TESTS_TESTING_STATUS_MATCHERS_H_
