// Collects an aside::Client's log lines (ClientOptions::log) for tests, and
// lets a test wait for one: the stub's log is the event stream for changes
// that have no other signal (a group reported absent, a report skipped).
#ifndef ASIDE_TESTS_CLIENT_LOG_SINK_H_
#define ASIDE_TESTS_CLIENT_LOG_SINK_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/sync.h"

namespace aside::testing {

class LogSink {
 public:
  // The function to put in ClientOptions::log; the sink must outlive the
  // client.
  std::function<void(absl::string_view)> fn() {
    return [this](absl::string_view line) {
      aside::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    };
  }

  // Lines containing `needle` so far.
  int Count(absl::string_view needle) const {
    aside::MutexLock lock(&mu_);
    return CountLocked(needle);
  }

  // Waits (bounded) until at least `n` lines contain `needle`.
  bool Await(absl::string_view needle, int n = 1,
             absl::Duration timeout = absl::Seconds(10)) const {
    aside::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return CountLocked(needle) >= n;
    };
    return mu_.AwaitWithTimeout(aside::Cond(&enough), timeout);
  }

 private:
  int CountLocked(absl::string_view needle) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int count = 0;
    for (const std::string& line : lines_) {
      count += absl::StrContains(line, needle) ? 1 : 0;
    }
    return count;
  }

  mutable aside::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::testing

#endif  // ASIDE_TESTS_CLIENT_LOG_SINK_H_
