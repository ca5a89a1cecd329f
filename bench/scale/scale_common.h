// Shared helpers of scale_bench (bench/README.md, "Scale"): timing, ranges
// over repetitions, table rows, and the test groups' backends.
#ifndef ASIDE_BENCH_SCALE_SCALE_COMMON_H_
#define ASIDE_BENCH_SCALE_SCALE_COMMON_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "lib/backend.h"
#include "server/schema/group_spec.h"

namespace aside::server::scale {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b);

// Min and max over repetitions.
struct Range {
  double lo = 1e300;
  double hi = -1e300;
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

std::string Fmt(const Range& r, const char* unit, double scale);

// Time per call of `fn`, repeated until at least `min_seconds` passed.
double TimePerCall(const std::function<void()>& fn, double min_seconds);

// Distinct IPv4 backends 10.x.y.z:port.
std::string Address(size_t i);
std::vector<Backend> MakeBackends(size_t n);
// A store-owned group of `n` backends, not probed.
GroupSpec MakeSpec(const std::string& name, size_t n);

// Heap bytes in use (allocated and not freed), including mmapped blocks.
double HeapBytes();

struct Row {
  std::string what;
  Range value;
  const char* unit;
  double scale;
  std::string floor_name;
  Range floor;
  Range ratio;
};
void Print(const Row& r);
void Header(const std::string& title);

// The parts.
void LargeGroup(size_t n, int reps, double min_seconds);
void ManyGroups(size_t groups, size_t backends, int reps);
void UpdateCost(const std::vector<size_t>& sizes, int reps, double min_seconds);
void LaggingSubscriber(const std::vector<size_t>& sizes);

}  // namespace aside::server::scale

#endif  // ASIDE_BENCH_SCALE_SCALE_COMMON_H_
