#include "client/backoff.h"

#include <algorithm>
#include <memory>
#include <random>

namespace aside {

Backoff::Backoff(BackoffOptions options, std::function<double()> uniform01)
    : options_(options),
      uniform01_(std::move(uniform01)),
      current_(options.initial) {
  if (!uniform01_) {
    auto engine = std::make_shared<std::mt19937_64>(std::random_device{}());
    uniform01_ = [engine] {
      return std::uniform_real_distribution<double>(0.0, 1.0)(*engine);
    };
  }
  options_.jitter = std::clamp(options_.jitter, 0.0, 1.0);
  options_.multiplier = std::max(options_.multiplier, 1.0);
}

absl::Duration Backoff::Next() {
  const absl::Duration base = std::min(current_, options_.max);
  current_ = std::min(base * options_.multiplier, options_.max);
  const double spread = options_.jitter * (2.0 * uniform01_() - 1.0);
  return std::max(absl::ZeroDuration(), base * (1.0 + spread));
}

}  // namespace aside
