// Percentiles of per-item time from timed batches: benchmarks that time
// picks in batches of `batch` (one clock read per batch, not per pick)
// and want p50/p99/p99.9 per pick.
#ifndef ASIDE_BENCH_BATCH_PERCENTILES_H_
#define ASIDE_BENCH_BATCH_PERCENTILES_H_

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace aside::bench {

// Sorts `batches` (nanoseconds per batch) and sets the counters p50_ns,
// p99_ns and p999_ns of `state` to the nanoseconds per item.
inline void SetBatchPercentiles(benchmark::State& state,
                                std::vector<int64_t>& batches, int batch) {
  std::sort(batches.begin(), batches.end());
  auto per_item = [&](double p) {
    if (batches.empty()) {
      return 0.0;
    }
    const size_t rank =
        std::min(batches.size() - 1,
                 static_cast<size_t>(p * static_cast<double>(batches.size())));
    return static_cast<double>(batches[rank]) / batch;
  };
  state.counters["p50_ns"] = per_item(0.50);
  state.counters["p99_ns"] = per_item(0.99);
  state.counters["p999_ns"] = per_item(0.999);
}

}  // namespace aside::bench

#endif  // ASIDE_BENCH_BATCH_PERCENTILES_H_
