// Waiting on the stub's injected Clock (ClientOptions::clock). The stub's
// schedule (reconnect backoff, report intervals, wait_for_table) is counted
// on that clock, so a test that injects a FakeClock decides when each of
// them is due by advancing it, instead of sleeping and hoping.
#ifndef ASIDE_CLIENT_CLOCK_WAIT_H_
#define ASIDE_CLIENT_CLOCK_WAIT_H_

#include <algorithm>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"

namespace aside::client_internal {

// A clock other than the system clock cannot wake a waiter when it moves
// (FakeClock is advanced by hand and has no waiters list), so waits on it
// look at it again after at most this much real time.
inline constexpr absl::Duration kClockRecheck = absl::Milliseconds(2);

// With `mu` held: waits until `condition()` holds or `clock` reaches
// `deadline_nanos`, whichever comes first; returns whether the condition
// holds. On the system clock this is one wait until the deadline (woken
// early when the condition changes under `mu`); on any other clock, a wait
// in kClockRecheck slices that ends when that clock passes the deadline.
template <typename Condition>
bool AwaitUntil(aside::Mutex& mu, Condition condition, const Clock& clock,
                int64_t deadline_nanos) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const bool system = dynamic_cast<const SystemClock*>(&clock) != nullptr;
  while (!condition()) {
    const int64_t now = clock.NowNanos();
    if (now >= deadline_nanos) {
      return false;
    }
    absl::Duration wait = absl::Nanoseconds(deadline_nanos - now);
    if (!system) {
      wait = std::min(wait, kClockRecheck);
    }
    mu.AwaitWithTimeout(condition, wait);
  }
  return true;
}

}  // namespace aside::client_internal

#endif  // ASIDE_CLIENT_CLOCK_WAIT_H_
