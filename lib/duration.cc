#include "lib/duration.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace aside {

absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view text) {
  absl::Duration d;
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty()) {
    return absl::InvalidArgumentError("empty duration");
  }
  if (s == "0") {
    return absl::ZeroDuration();
  }
  if (s.find_first_not_of("0123456789.") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "duration '", s, "' needs a unit (ms, s, m, h), e.g. 500ms or 5s"));
  }
  if (!absl::ParseDuration(s, &d) || s.front() == '-' || s.front() == '+') {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid duration '", s, "' (expected e.g. 500ms, 5s, 1m, 1h30m)"));
  }
  if (d == absl::InfiniteDuration() || d > absl::Hours(24 * 365 * 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration '", s, "' is too long"));
  }
  return d;
}

}  // namespace aside
