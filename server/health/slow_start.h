// Slow start: a backend that became ready at t0 gets a share of its weight
// that ramps linearly from 10 % to 100 % over the group's slow-start window
// (DESIGN.md §3), so a new or recovered backend is not flooded while its
// caches are cold.
//
//   effective = round(weight x clamp((now - t0) / window, 0.1, 1))
//   at least 1 while weight > 0 (a ramping backend is never drained by
//   rounding); weight 0 stays 0; window 0 (off) gives the weight unchanged.
//
// Pure functions of their arguments (monotonic nanoseconds from lib/clock.h):
// thread-safe, O(1). Groups call them while building a table.
#ifndef ASIDE_SERVER_HEALTH_SLOW_START_H_
#define ASIDE_SERVER_HEALTH_SLOW_START_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"

namespace aside::server {

// The floor of the ramp: a ready backend starts at 10 % of its weight.
inline constexpr double kSlowStartMinFactor = 0.1;
// Rebuild ticks per window while some member ramps (see
// NextSlowStartRebuild): 10 steps of 10 %.
inline constexpr int kSlowStartSteps = 10;

// The ramp factor in [0.1, 1] for a backend ready since `ready_since_nanos`
// (1 when the window is zero or the ramp is over; also 1 for a start time in
// the future, which only a clock mix-up produces).
double SlowStartFactor(int64_t ready_since_nanos, int64_t now_nanos,
                       absl::Duration window);

// The effective weight of a backend with `weight` ready since
// `ready_since_nanos`.
uint32_t SlowStartWeight(uint32_t weight, int64_t ready_since_nanos,
                         int64_t now_nanos, absl::Duration window);

// When a group holding this member must rebuild its table next so that the
// member's effective weight follows the ramp: the next multiple of
// window / 10 after t0 that is later than `now`, or nullopt when the ramp is
// over (now >= t0 + window), the window is zero or t0 lies in the future. A
// group schedules one rebuild at the earliest of its members' ticks.
std::optional<int64_t> NextSlowStartRebuild(int64_t ready_since_nanos,
                                            int64_t now_nanos,
                                            absl::Duration window);

}  // namespace aside::server

#endif  // ASIDE_SERVER_HEALTH_SLOW_START_H_
