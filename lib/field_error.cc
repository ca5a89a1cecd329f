#include "lib/field_error.h"

#include <cmath>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/optional.h"

namespace aside {
namespace {

constexpr absl::string_view kFieldPathUrl = "type.aside.dev/aside.FieldPath";

}  // namespace

absl::Status FieldError(absl::StatusCode code, absl::string_view path,
                        absl::string_view message) {
  absl::Status status(code, absl::StrCat(path, ": ", message));
  status.SetPayload(kFieldPathUrl, absl::Cord(path));
  return status;
}

std::optional<std::string> ErrorFieldPath(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kFieldPathUrl);
  if (!payload) {
    return std::nullopt;
  }
  return std::string(*payload);
}

std::string JoinFieldPath(absl::string_view field, absl::string_view key) {
  if (field.empty()) {
    return std::string(key);
  }
  if (key.empty()) {
    return std::string(field);
  }
  return absl::StrCat(field, absl::StartsWith(key, "[") ? "" : ".", key);
}

absl::Status PrefixFieldPath(absl::string_view prefix, absl::Status status) {
  if (status.ok() || prefix.empty()) {
    return status;
  }
  std::optional<std::string> path = ErrorFieldPath(status);
  std::string message(status.message());
  std::string new_path;
  if (path && absl::StartsWith(message, absl::StrCat(*path, ": "))) {
    new_path = JoinFieldPath(prefix, *path);
    message = absl::StrCat(new_path, message.substr(path->size()));
  } else if (path) {
    new_path = JoinFieldPath(prefix, *path);
    message = absl::StrCat(prefix, ": ", message);
  } else {
    new_path = std::string(prefix);
    message = absl::StrCat(prefix, ": ", message);
  }
  absl::Status out(status.code(), message);
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    if (url != kFieldPathUrl) {
      out.SetPayload(url, payload);
    }
  });
  out.SetPayload(kFieldPathUrl, absl::Cord(new_path));
  return out;
}

absl::Status CheckDuration(absl::string_view field, absl::Duration value,
                           absl::Duration low, absl::Duration high) {
  if (value < low || value > high) {
    return InvalidField(
        field, absl::StrCat(absl::FormatDuration(value), " out of range ",
                            absl::FormatDuration(low), "..",
                            absl::FormatDuration(high)));
  }
  return absl::OkStatus();
}

absl::Status CheckNumber(absl::string_view field, double value,
                         Range<double> range) {
  if (!std::isfinite(value) || !range.Contains(value)) {
    return InvalidField(field, absl::StrCat(value, " out of range ", range.min,
                                            "..", range.max));
  }
  return absl::OkStatus();
}

absl::Status CheckInteger(absl::string_view field, uint64_t value,
                          Range<uint64_t> range) {
  if (!range.Contains(value)) {
    return InvalidField(field, absl::StrCat(value, " out of range ", range.min,
                                            "..", range.max));
  }
  return absl::OkStatus();
}

}  // namespace aside
