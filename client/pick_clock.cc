#include "client/pick_clock.h"

#include <fstream>
#include <mutex>
#include <sstream>
#include <string>

namespace aside::client_internal {

namespace {

#if defined(__x86_64__)
// Whether the kernel reports an invariant TSC and keeps time with it.
bool TscIsSafe() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool flags_ok = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      line += ' ';
      flags_ok = line.find(" constant_tsc ") != std::string::npos &&
                 line.find(" nonstop_tsc ") != std::string::npos;
      break;
    }
  }
  if (!flags_ok) {
    return false;
  }
  std::ifstream source(
      "/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  source >> name;
  return name == "tsc";
}

// A (TSC, CLOCK_MONOTONIC) pair read as close together as possible: the
// tightest of a few tries, the TSC taken midway.
void Pair(uint64_t* tsc, int64_t* nanos) {
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    const uint64_t before = __rdtsc();
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const uint64_t after = __rdtsc();
    if (after - before < best) {
      best = after - before;
      *tsc = before + (after - before) / 2;
      *nanos = TimespecNanos(ts);
    }
  }
}

void Calibrate() {
  if (!TscIsSafe()) {
    return;
  }
  uint64_t tsc0 = 0;
  uint64_t tsc1 = 0;
  int64_t nanos0 = 0;
  int64_t nanos1 = 0;
  Pair(&tsc0, &nanos0);
  timespec pause{0, 10'000'000};  // the calibration interval, not a wait
  while (nanosleep(&pause, &pause) != 0) {
  }
  Pair(&tsc1, &nanos1);
  if (tsc1 <= tsc0 || nanos1 <= nanos0) {
    return;
  }
  const TscWide mult =
      (static_cast<TscWide>(nanos1 - nanos0) << 32) / (tsc1 - tsc0);
  // A TSC between 100 MHz and 20 GHz, or it is not one.
  if (mult > (uint64_t{10} << 32) || mult < (uint64_t{1} << 32) / 20) {
    return;
  }
  g_pick_tsc.base_tsc = tsc1;
  g_pick_tsc.base_nanos = nanos1;
  g_pick_tsc.mult = static_cast<uint64_t>(mult);
  g_pick_tsc.usable = true;
}
#endif

}  // namespace

void CalibratePickTsc() {
#if defined(__x86_64__)
  static std::once_flag once;
  std::call_once(once, Calibrate);
#endif
}

}  // namespace aside::client_internal
