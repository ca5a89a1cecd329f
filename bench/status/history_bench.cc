// The status page's history at fleet size: the heap it holds for 1000
// groups x 10 backends (bytes per tracked series, measured with glibc's
// allocator statistics, so map nodes and strings count too) and the cost
// of one sample over all of them. bench/README.md, "Status page history".
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/status/history.h"

namespace aside::server {
namespace {

std::vector<HistoryGroupInput> Fleet(size_t groups, size_t backends,
                                     uint64_t tick) {
  std::vector<HistoryGroupInput> out(groups);
  for (size_t g = 0; g < groups; ++g) {
    HistoryGroupInput& in = out[g];
    in.name = absl::StrCat("group-", g);
    in.picks = tick * 100;
    in.total = in.ready = static_cast<uint32_t>(backends);
    for (size_t b = 0; b < backends; ++b) {
      HistoryBackendInput bi;
      bi.address = absl::StrCat("10.", g / 250, ".", g % 250, ".", b, ":8080");
      bi.effective_weight = 100;
      bi.health = HealthState::kHealthy;
      bi.ready = bi.eligible = true;
      bi.picks = tick * 10;
      bi.reported = true;
      bi.requests_per_second = 10;
      bi.latency_ms = 3;
      bi.window_requests = 100;
      in.backends.push_back(std::move(bi));
    }
  }
  return out;
}

size_t HeapInUse() { return mallinfo2().uordblks; }

// Memory: a full window (180 samples) of 1000 groups x `range(0)`
// backends. The counters are per series (groups + backends).
void BM_HistoryMemory(benchmark::State& state) {
  const size_t groups = 1000;
  const size_t backends = static_cast<size_t>(state.range(0));
  FakeClock clock;
  std::vector<std::vector<HistoryGroupInput>> inputs;
  inputs.push_back(Fleet(groups, backends, 0));
  inputs.push_back(Fleet(groups, backends, 1));
  for (auto _ : state) {
    const size_t before = HeapInUse();
    auto history = std::make_unique<StatusHistory>(
        HistorySources{}, HistoryOptions{.clock = &clock});
    for (int i = 0; i < 180; ++i) {
      clock.Advance(absl::Seconds(5));
      history->Record(inputs[i % 2]);
    }
    const size_t after = HeapInUse();
    const StatusHistory::Stats s = history->stats();
    const double series = static_cast<double>(s.groups + s.backends);
    state.counters["series"] = series;
    state.counters["heap_bytes"] = static_cast<double>(after - before);
    state.counters["bytes_per_series"] =
        static_cast<double>(after - before) / series;
    state.counters["ring_bytes_per_series"] =
        static_cast<double>(s.ring_bytes) / series;
    benchmark::DoNotOptimize(history);
  }
}
BENCHMARK(BM_HistoryMemory)
    ->Arg(10)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// One sample of 1000 groups x 10 backends once every series is tracked:
// the time per series.
void BM_HistoryRecord(benchmark::State& state) {
  FakeClock clock;
  StatusHistory history({}, {.clock = &clock});
  const std::vector<HistoryGroupInput> a = Fleet(1000, 10, 0);
  const std::vector<HistoryGroupInput> b = Fleet(1000, 10, 1);
  history.Record(a);
  bool odd = false;
  for (auto _ : state) {
    clock.Advance(absl::Seconds(5));
    history.Record(odd ? a : b);
    odd = !odd;
  }
  state.counters["ns_per_series"] =
      benchmark::Counter(11000, benchmark::Counter::kIsIterationInvariantRate |
                                    benchmark::Counter::kInvert);
}
BENCHMARK(BM_HistoryRecord)->Unit(benchmark::kMillisecond);

// Serving one group's history with its backends (the page's request for
// a group) and every group's without (the overview).
void BM_HistoryJson(benchmark::State& state) {
  FakeClock clock;
  StatusHistory history({}, {.clock = &clock});
  const std::vector<HistoryGroupInput> in = Fleet(1000, 10, 0);
  for (int i = 0; i < 180; ++i) {
    clock.Advance(absl::Seconds(5));
    history.Record(in);
  }
  const bool all = state.range(0) == 1;
  size_t bytes = 0;
  for (auto _ : state) {
    std::string json =
        all ? history.Json("", false) : history.Json("group-7", true);
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  state.counters["json_bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_HistoryJson)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace aside::server

BENCHMARK_MAIN();
