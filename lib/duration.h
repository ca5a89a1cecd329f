// Durations as operators write them: "500ms", "5s", "1m", "1h30m".
#ifndef ASIDE_LIB_DURATION_H_
#define ASIDE_LIB_DURATION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace aside {

// Parses a non-negative duration with units (ms, s, m, h, and the other
// units of absl::ParseDuration); "0" alone needs none. A bare number, a
// sign, or more than 100 years is an error. Used for every duration read
// from text: the config file, group files, command-line flags.
absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view text);

}  // namespace aside

#endif  // ASIDE_LIB_DURATION_H_
