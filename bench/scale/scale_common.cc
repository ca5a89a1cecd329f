#include "bench/scale/scale_common.h"

#include <malloc.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aside::server::scale {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string Fmt(const Range& r, const char* unit, double scale) {
  return absl::StrFormat("%.3g–%.3g %s", r.lo * scale, r.hi * scale, unit);
}

double TimePerCall(const std::function<void()>& fn, double min_seconds) {
  int64_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++n;
    elapsed = Seconds(start, Clock::now());
  } while (elapsed < min_seconds);
  return elapsed / static_cast<double>(n);
}

std::string Address(size_t i) {
  return absl::StrCat("10.", (i >> 16) & 255, ".", (i >> 8) & 255, ".", i & 255,
                      ":", 8000 + i / (1 << 24));
}

std::vector<Backend> MakeBackends(size_t n) {
  std::vector<Backend> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].address = Address(i);
  }
  return out;
}

GroupSpec MakeSpec(const std::string& name, size_t n) {
  GroupSpec spec;
  spec.name = name;
  spec.backends = MakeBackends(n);
  spec.health_check.kind = HealthCheckSpec::Kind::kNone;
  spec.source = GroupSource::kStore;
  return spec;
}

double HeapBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

void Print(const Row& r) {
  std::printf("| %s | %s | %s %s | %s |\n", r.what.c_str(),
              Fmt(r.value, r.unit, r.scale).c_str(), r.floor_name.c_str(),
              Fmt(r.floor, r.unit, r.scale).c_str(),
              absl::StrFormat("%.3g–%.3g×", r.ratio.lo, r.ratio.hi).c_str());
  std::fflush(stdout);
}

void Header(const std::string& title) {
  std::printf(
      "\n### %s\n\n| figure | value (min–max) | floor | ratio |\n"
      "|---|---|---|---|\n",
      title.c_str());
}

}  // namespace aside::server::scale
