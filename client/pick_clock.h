// The stub's time stamps for picks and completions on the system clock.
//
// Where the CPU's time stamp counter is invariant (constant_tsc and
// nonstop_tsc in /proc/cpuinfo) and the kernel itself keeps time with it
// (clocksource "tsc"), picks and completions read it directly (RDTSC, no
// vDSO call), converted to nanoseconds with a scale calibrated once
// against CLOCK_MONOTONIC over ~10 ms (CalibratePickTsc, at the first
// Client::Create). Both ends of every call are then exact, whatever the
// policy. The scale's error is a few parts per million (a few µs per
// second of latency; bench/client/tsc_accuracy.cc measures it), and the
// TSC is not slewed by NTP as CLOCK_MONOTONIC is, so the two drift apart
// by up to the slew rate (at most 500 ppm) over time: stamps are only ever
// compared with stamps from the same source, except the load models'
// decay of a new backend's default RTT (tau 10 s), which such drift does
// not move measurably.
//
// Elsewhere (no usable TSC):
// An exact monotonic read costs a vDSO clock_gettime (on a KVM guest with
// kvm-clock, a pvclock read around RDTSC: 30-50 ns, the largest part of a
// pick and its Done). A pick whose table's policy does not read latency
// (everything but p2c `peak_ewma` and least_time) takes its start stamp
// from CLOCK_MONOTONIC_COARSE instead (a few ns: a read of the time the
// kernel stored at its last tick), raised to the latest exact read this
// thread made (usually the previous call's Done). The stamp is never after
// the true start, so a latency measured from it is never short; it is
// long by at most min(one scheduler tick, the time since this thread's
// last exact read): for a thread that picks right after a Done, the gap
// between the two; at worst one tick (4 ms with CONFIG_HZ=250, 1 ms with
// 1000). Such latencies feed only the load reports' sums; the load
// models' estimates are fed by exactly timed requests alone (a policy that
// reads them always gets an exact start stamp), so the estimates of a
// group that does not read them stay as they were (cold, should its
// policy change to one that does: they fill from the first completions).
#ifndef ASIDE_CLIENT_PICK_CLOCK_H_
#define ASIDE_CLIENT_PICK_CLOCK_H_

#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <algorithm>
#include <cstdint>

namespace aside::client_internal {

__extension__ typedef unsigned __int128 TscWide;

// TSC ticks to CLOCK_MONOTONIC nanoseconds: base_nanos + (tsc - base_tsc)
// * mult / 2^32. Written once by CalibratePickTsc before any Client picks.
struct TscScale {
  bool usable = false;
  uint64_t base_tsc = 0;
  int64_t base_nanos = 0;
  uint64_t mult = 0;  // nanoseconds per tick, 32.32 fixed point
};
inline TscScale g_pick_tsc;

// Calibrates g_pick_tsc once per process (later calls return at once);
// leaves it unusable where the TSC is not a safe clock. Thread-safe.
void CalibratePickTsc();

// Now from the TSC (g_pick_tsc.usable).
inline int64_t TscNanos() noexcept {
#if defined(__x86_64__)
  const uint64_t ticks = __rdtsc() - g_pick_tsc.base_tsc;
  return g_pick_tsc.base_nanos +
         static_cast<int64_t>((static_cast<TscWide>(ticks) * g_pick_tsc.mult) >>
                              32);
#else
  return 0;
#endif
}

// This thread's latest ExactNanos().
inline thread_local int64_t t_latest_exact_nanos = 0;

inline int64_t TimespecNanos(const timespec& ts) noexcept {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 +
         static_cast<int64_t>(ts.tv_nsec);
}

// CLOCK_MONOTONIC (what std::chrono::steady_clock and SystemClock read),
// remembered as this thread's latest exact read.
inline int64_t ExactNanos() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = TimespecNanos(ts);
  t_latest_exact_nanos = now;
  return now;
}

// A lower bound on ExactNanos(), within one tick of it (above).
inline int64_t CoarseNanos() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::max(TimespecNanos(ts), t_latest_exact_nanos);
}

}  // namespace aside::client_internal

#endif  // ASIDE_CLIENT_PICK_CLOCK_H_
