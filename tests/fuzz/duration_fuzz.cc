// Durations as the config file and asidectl take them (lib/duration.h).
#include <cstddef>
#include <cstdint>

#include "lib/duration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<absl::Duration> d = aside::ParseDurationText(text);
  if (d.ok() && *d < absl::ZeroDuration()) {
    __builtin_trap();  // documented as non-negative
  }
  return 0;
}
