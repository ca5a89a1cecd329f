// Reconnect backoff for the stub's streams (Watch and ReportLoad), as in
// gRPC's connection-backoff spec: the first retry waits `initial`, each
// further one `multiplier` times longer up to `max`, and every wait is
// spread by +-`jitter` so that a fleet of stubs does not reconnect in step
// after a server restart.
#ifndef ASIDE_CLIENT_BACKOFF_H_
#define ASIDE_CLIENT_BACKOFF_H_

#include <functional>

#include "absl/time/time.h"

namespace aside {

struct BackoffOptions {
  absl::Duration initial = absl::Seconds(1);
  double multiplier = 1.6;
  absl::Duration max = absl::Seconds(120);
  // Fraction 0..1: a wait of d becomes uniform in [d(1-j), d(1+j)].
  double jitter = 0.2;
};

// Not thread-safe: each stream's retry loop owns one. Next() costs a
// multiplication and one draw of the random source.
class Backoff {
 public:
  // `uniform01` returns a uniform double in [0, 1); tests inject a fixed
  // sequence. Null means a per-object generator seeded from the OS.
  explicit Backoff(BackoffOptions options,
                   std::function<double()> uniform01 = nullptr);

  // The wait before the next attempt; advances the sequence. The unjittered
  // waits are initial, initial*m, initial*m^2, ... capped at max.
  absl::Duration Next();
  // After a successful attempt: the next wait is `initial` again.
  void Reset() { current_ = options_.initial; }

  const BackoffOptions& options() const { return options_; }

 private:
  BackoffOptions options_;
  std::function<double()> uniform01_;
  absl::Duration current_;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_BACKOFF_H_
