// Latency samples and their percentiles for the load tools.
#ifndef ASIDE_BENCH_LOAD_LATENCY_H_
#define ASIDE_BENCH_LOAD_LATENCY_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace aside::bench {

class Samples {
 public:
  void Add(int64_t nanos) { values_.push_back(nanos); }
  size_t size() const { return values_.size(); }
  void Merge(const Samples& other) {
    values_.insert(values_.end(), other.values_.begin(), other.values_.end());
  }
  // Percentile p in [0, 100], in microseconds (nearest rank).
  double PercentileMicros(double p) {
    if (values_.empty()) {
      return 0;
    }
    std::sort(values_.begin(), values_.end());
    size_t rank =
        static_cast<size_t>(p / 100.0 * static_cast<double>(values_.size()));
    rank = std::min(rank, values_.size() - 1);
    return static_cast<double>(values_[rank]) / 1000.0;
  }
  double MaxMicros() {
    return values_.empty() ? 0
                           : static_cast<double>(*std::max_element(
                                 values_.begin(), values_.end())) /
                                 1000.0;
  }

 private:
  std::vector<int64_t> values_;
};

// CPU time (user + system) a process's live threads have used, in
// seconds, from /proc (schedstat, nanosecond resolution).
double ProcessCpuSeconds(int pid);

// The same for the process's live threads named `name` (their comm, e.g.
// "aside-publish"): what one thread of a known role spent.
double ThreadCpuSeconds(int pid, const std::string& name);

}  // namespace aside::bench

#endif  // ASIDE_BENCH_LOAD_LATENCY_H_
