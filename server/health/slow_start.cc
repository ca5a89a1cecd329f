#include "server/health/slow_start.h"

#include <algorithm>
#include <cmath>

namespace aside::server {

double SlowStartFactor(int64_t ready_since_nanos, int64_t now_nanos,
                       absl::Duration window) {
  const int64_t window_nanos = absl::ToInt64Nanoseconds(window);
  if (window_nanos <= 0 || now_nanos < ready_since_nanos) {
    return 1.0;
  }
  const double elapsed = static_cast<double>(now_nanos - ready_since_nanos);
  return std::clamp(elapsed / static_cast<double>(window_nanos),
                    kSlowStartMinFactor, 1.0);
}

uint32_t SlowStartWeight(uint32_t weight, int64_t ready_since_nanos,
                         int64_t now_nanos, absl::Duration window) {
  if (weight == 0) {
    return 0;
  }
  const double factor = SlowStartFactor(ready_since_nanos, now_nanos, window);
  if (factor >= 1.0) {
    return weight;
  }
  const double scaled = std::round(static_cast<double>(weight) * factor);
  return std::clamp<uint32_t>(static_cast<uint32_t>(scaled), 1, weight);
}

std::optional<int64_t> NextSlowStartRebuild(int64_t ready_since_nanos,
                                            int64_t now_nanos,
                                            absl::Duration window) {
  const int64_t window_nanos = absl::ToInt64Nanoseconds(window);
  if (window_nanos <= 0 || now_nanos >= ready_since_nanos + window_nanos) {
    return std::nullopt;
  }
  if (now_nanos < ready_since_nanos) {
    return std::nullopt;  // SlowStartFactor is 1: nothing ramps
  }
  const int64_t step = std::max<int64_t>(1, window_nanos / kSlowStartSteps);
  const int64_t steps_done = (now_nanos - ready_since_nanos) / step + 1;
  return std::min(ready_since_nanos + steps_done * step,
                  ready_since_nanos + window_nanos);
}

}  // namespace aside::server
