// Errors that name the input field they are about.
//
// A validator reports "backends[2].weight: 20000 out of range 0..10000": the
// message users read starts with the field path, and the path is also carried
// as data (a status payload), so that a caller can find the field in its own
// input (the config file maps it to a YAML line) without parsing the message
// back. Callers that nest a validated value under a prefix ("group" in the
// Admin API) prefix both with PrefixFieldPath.
//
// The range checks every validator uses live here too, so that each range is
// written once, where it is validated.
#ifndef ASIDE_LIB_FIELD_ERROR_H_
#define ASIDE_LIB_FIELD_ERROR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace aside {

// A status of `code` whose message is "path: message" and whose payload
// holds `path`.
absl::Status FieldError(absl::StatusCode code, absl::string_view path,
                        absl::string_view message);
inline absl::Status InvalidField(absl::string_view path,
                                 absl::string_view message) {
  return FieldError(absl::StatusCode::kInvalidArgument, path, message);
}

// The field path a status carries, if any.
std::optional<std::string> ErrorFieldPath(const absl::Status& status);

// Nests `status` under `prefix`: "weight: ..." with prefix "group.backends[1]"
// becomes "group.backends[1].weight: ..." (message and payload). A status
// without a path gets `prefix` as its path and "prefix: " before its message.
// An OK status or an empty prefix is returned unchanged.
absl::Status PrefixFieldPath(absl::string_view prefix, absl::Status status);

// "field.key", or "key" when `field` is empty.
std::string JoinFieldPath(absl::string_view field, absl::string_view key);

// An inclusive range. Validators own the ranges of their fields and publish
// them as constants next to the validator.
template <typename T>
struct Range {
  T min;
  T max;
  constexpr bool Contains(T v) const { return v >= min && v <= max; }
};

// `value` within [low, high], else "field: 5s out of range 1s..1h".
absl::Status CheckDuration(absl::string_view field, absl::Duration value,
                           absl::Duration low, absl::Duration high);
inline absl::Status CheckDuration(absl::string_view field, absl::Duration value,
                                  Range<absl::Duration> range) {
  return CheckDuration(field, value, range.min, range.max);
}

// `value` finite and within the range, else "field: 0.9 out of range 0..0.5".
absl::Status CheckNumber(absl::string_view field, double value,
                         Range<double> range);

// `value` within the range, else "field: 0 out of range 1..100".
absl::Status CheckInteger(absl::string_view field, uint64_t value,
                          Range<uint64_t> range);

}  // namespace aside

#endif  // ASIDE_LIB_FIELD_ERROR_H_
