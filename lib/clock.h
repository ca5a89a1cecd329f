// Time sources. Everything in lib/ that needs time takes it as an argument or
// through a Clock, so tests can drive time with FakeClock.
#ifndef ASIDE_LIB_CLOCK_H_
#define ASIDE_LIB_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace aside {

// Monotonic nanoseconds since an arbitrary epoch (steady_clock).
inline int64_t MonotonicNanos() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A source of monotonic time. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic nanoseconds; never goes backwards.
  virtual int64_t NowNanos() const noexcept = 0;
  // Wall-clock time (for token expiries and timestamps shown to people).
  virtual absl::Time WallNow() const noexcept = 0;
};

// The real clocks.
class SystemClock final : public Clock {
 public:
  int64_t NowNanos() const noexcept override { return MonotonicNanos(); }
  absl::Time WallNow() const noexcept override { return absl::Now(); }
  // The process-wide instance.
  static SystemClock& Get() noexcept;
};

// A clock tests move by hand. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_nanos = 1'000'000'000,
                     absl::Time wall = absl::FromUnixSeconds(1'800'000'000))
      : nanos_(start_nanos), wall_start_(wall), start_(start_nanos) {}
  int64_t NowNanos() const noexcept override {
    return nanos_.load(std::memory_order_acquire);
  }
  absl::Time WallNow() const noexcept override {
    return wall_start_ + absl::Nanoseconds(NowNanos() - start_);
  }
  void Advance(absl::Duration d) noexcept {
    nanos_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t> nanos_;
  absl::Time wall_start_;
  int64_t start_;
};

}  // namespace aside

#endif  // ASIDE_LIB_CLOCK_H_
