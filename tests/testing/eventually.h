// Polls a condition until it holds or a deadline passes: for end-to-end
// tests whose subject (another process, etcd) has no event to wait on.
#ifndef ASIDE_TESTS_TESTING_EVENTUALLY_H_
#define ASIDE_TESTS_TESTING_EVENTUALLY_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace aside::testing {

// Calls `done` every 20 ms until it returns true (true) or `timeout` passed
// (the value of one last call).
template <typename F>
bool Eventually(F done, absl::Duration timeout = absl::Seconds(15)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

}  // namespace aside::testing

#endif  // ASIDE_TESTS_TESTING_EVENTUALLY_H_
