// Pick cost of each policy against the floor of a relaxed atomic increment
// measured in the same binary.
#include <benchmark/benchmark.h>

#include <array>
#include <atomic>

#include "lib/table.h"
#include "tests/testing/tables.h"

namespace aside {
namespace {

// The floor: one shared relaxed atomic increment (what a round-robin
// position costs at the least).
std::atomic<uint64_t> g_counter{0};

void BM_FloorAtomicIncrement(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        g_counter.fetch_add(1, std::memory_order_relaxed));
  }
}
BENCHMARK(BM_FloorAtomicIncrement)->Threads(1)->Threads(2);

TableConstPtr MakeBenchTable(PolicyKind kind, size_t n) {
  PolicyConfig policy;
  policy.kind = kind;
  testing::TableOptions options;
  for (size_t i = 0; i < n; ++i) {
    options.weights.push_back(static_cast<uint32_t>(1 + i % 7));
  }
  return *Table::Create(testing::MakeTableSpec(policy, options), nullptr,
                        nullptr);
}

void BM_Pick(benchmark::State& state, PolicyKind kind) {
  static TableConstPtr table;
  if (state.thread_index() == 0) {
    table = MakeBenchTable(kind, static_cast<size_t>(state.range(0)));
  }
  std::array<uint32_t, 1> out;
  PickRequest request;
  request.key = "user-12345";
  for (auto _ : state) {
    benchmark::DoNotOptimize(table->Pick(request, absl::MakeSpan(out)));
  }
  if (state.thread_index() == 0) {
    state.counters["backends"] = static_cast<double>(state.range(0));
  }
}
BENCHMARK_CAPTURE(BM_Pick, round_robin, PolicyKind::kRoundRobin)
    ->RangeMultiplier(10)->Range(10, 10000)->Threads(1)->Threads(2);
BENCHMARK_CAPTURE(BM_Pick, weighted_round_robin,
                  PolicyKind::kWeightedRoundRobin)
    ->RangeMultiplier(10)->Range(10, 10000)->Threads(1)->Threads(2);

}  // namespace
}  // namespace aside

BENCHMARK_MAIN();
