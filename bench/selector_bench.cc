// Pick cost of every policy, load recording, ring and table builds, and
// disruption, each against a floor measured in the same binary: a relaxed
// atomic increment for picks and completions, std::sort of as many ring
// points for the ketama build. Allocations are counted by replacing the
// global operator new: every pick benchmark reports allocs_per_pick.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/batch_percentiles.h"
#include "lib/clock.h"
#include "lib/load/backend_load.h"
#include "lib/load/load_tracker.h"
#include "lib/policies/ketama.h"
#include "lib/policies/locality.h"
#include "lib/policies/maglev.h"
#include "lib/random.h"
#include "lib/snapshot_cell.h"
#include "lib/sync.h"
#include "lib/table.h"
#include "tests/testing/tables.h"

// The replacement operators below pair malloc with free; GCC, seeing both
// inlined, mistakes the pairing for new/free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {
// Per thread, so that a benchmark thread counts only its own allocations.
thread_local uint64_t t_allocations = 0;
}  // namespace

void* operator new(size_t size) {
  ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    return p;
  }
  throw std::bad_alloc();
}
void* operator new[](size_t size) { return operator new(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](size_t size, const std::nothrow_t& t) noexcept {
  return operator new(size, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace aside {
namespace {

// ---------------------------------------------------------------- floors

// One shared relaxed atomic increment (what a round-robin position costs at
// the least; contended with 2 threads).
std::atomic<uint64_t> g_counter{0};

void BM_FloorAtomicIncrement(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_counter.fetch_add(1, std::memory_order_relaxed));
  }
}
BENCHMARK(BM_FloorAtomicIncrement)->Threads(1)->Threads(2);

// A monotonic clock read (what a pick pays when the caller does not pass
// now_nanos to a time-dependent policy).
void BM_FloorClockRead(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(MonotonicNanos());
  }
}
BENCHMARK(BM_FloorClockRead);

// std::sort of as many 8-byte ring points as the ketama build makes.
void BM_FloorSortRingPoints(benchmark::State& state) {
  FastRng rng(1);
  std::vector<uint64_t> points(static_cast<size_t>(state.range(0)));
  for (uint64_t& p : points) {
    p = rng.Next();
  }
  std::vector<uint64_t> work;
  for (auto _ : state) {
    state.PauseTiming();
    work = points;
    state.ResumeTiming();
    std::sort(work.begin(), work.end());
    benchmark::DoNotOptimize(work.data());
  }
}
BENCHMARK(BM_FloorSortRingPoints)
    ->Arg(1000 * 160)
    ->Unit(benchmark::kMicrosecond);

// ----------------------------------------------------------------- picks

const std::vector<std::string>& Keys() {
  static const auto* keys = [] {
    auto* k = new std::vector<std::string>();
    FastRng rng(2);
    for (int i = 0; i < 4096; ++i) {
      k->push_back(absl::StrCat("user-", rng.Below(100000000)));
    }
    return k;
  }();
  return *keys;
}

PolicyConfig Policy(PolicyKind kind) {
  PolicyConfig c;
  c.kind = kind;
  return c;
}

TableConstPtr MakeBenchTable(const PolicyConfig& policy, size_t n) {
  TableSpec spec;
  spec.group = "bench";
  spec.policy = policy;
  spec.session_key =
      std::make_shared<const std::string>("0123456789abcdef0123456789abcdef");
  const char* zones[] = {"a", "b", "c"};
  for (size_t i = 0; i < n; ++i) {
    Member m;
    m.backend.address = testing::TestAddress(i);
    m.weight = static_cast<uint32_t>(1 + i % 7);
    m.backend.weight = m.weight;
    m.backend.locality = {"r", zones[i % 3], ""};
    spec.members.push_back(std::move(m));
  }
  auto t = Table::Create(std::move(spec), nullptr, nullptr);
  if (!t.ok()) {
    std::abort();
  }
  return *t;
}

const absl::Time kBenchWallTime = absl::FromUnixSeconds(1'800'000'000);

struct PickCase {
  std::string name;
  PolicyConfig policy;
  bool with_token = false;  // sticky: present a valid token
};

// A table per (case, size), built once and shared by the benchmark's
// threads (each thread fetches it before its timed loop).
struct BenchTable {
  TableConstPtr table;
  SessionToken token;
};
const BenchTable& TableFor(const std::string& name, const PickCase& pick_case,
                           size_t n) {
  static aside::Mutex mu;
  static auto* tables =
      new std::map<std::string, std::unique_ptr<BenchTable>>();
  aside::MutexLock lock(&mu);
  std::unique_ptr<BenchTable>& entry = (*tables)[absl::StrCat(name, "/", n)];
  if (entry == nullptr) {
    entry = std::make_unique<BenchTable>();
    entry->table = MakeBenchTable(pick_case.policy, n);
    if (pick_case.with_token) {
      std::array<uint32_t, 1> out;
      PickRequest first;
      first.wall_now = kBenchWallTime;
      first.issued_token = &entry->token;
      entry->table->Pick(first, absl::MakeSpan(out));
    }
  }
  return *entry;
}

void BM_Pick(benchmark::State& state, const PickCase& pick_case) {
  const BenchTable& bench =
      TableFor(pick_case.name, pick_case, static_cast<size_t>(state.range(0)));
  const Table& table = *bench.table;
  const std::vector<std::string>& keys = Keys();
  const Locality caller{"r", "a", ""};
  std::array<uint32_t, 1> out;
  PickRequest request;
  request.caller = &caller;
  request.now_nanos = 1'000'000'000;  // injected: no clock read per pick
  request.wall_now = kBenchWallTime;
  SessionToken issued;  // sticky: where a new session's token goes
  request.issued_token = &issued;
  if (pick_case.with_token) {
    request.session_token = bench.token.view();
  }
  size_t k = static_cast<size_t>(state.thread_index()) * 97;
  const uint64_t allocs_before = t_allocations;
  for (auto _ : state) {
    request.key = keys[k++ & 4095];
    benchmark::DoNotOptimize(table.Pick(request, absl::MakeSpan(out)));
  }
  const uint64_t allocs = t_allocations - allocs_before;
  state.counters["allocs_per_pick"] = benchmark::Counter(
      static_cast<double>(allocs), benchmark::Counter::kAvgIterations);
}

#define ASIDE_PICK_BENCH(name, ...)                              \
  BENCHMARK_CAPTURE(BM_Pick, name, PickCase{#name, __VA_ARGS__}) \
      ->RangeMultiplier(10)                                      \
      ->Range(10, 10000)                                         \
      ->Threads(1)                                               \
      ->Threads(2)

PolicyConfig P2cPeak() {
  PolicyConfig c = Policy(PolicyKind::kP2c);
  c.p2c.load = P2cParams::Load::kPeakEwma;
  return c;
}
PolicyConfig LeastTimeFirstByte() {
  PolicyConfig c = Policy(PolicyKind::kLeastTime);
  c.least_time.metric = LeastTimeParams::Metric::kFirstByte;
  return c;
}
PolicyConfig StickyHash() {
  PolicyConfig c = Policy(PolicyKind::kSticky);
  return c;
}

ASIDE_PICK_BENCH(round_robin, Policy(PolicyKind::kRoundRobin));
ASIDE_PICK_BENCH(weighted_round_robin, Policy(PolicyKind::kWeightedRoundRobin));
ASIDE_PICK_BENCH(random, Policy(PolicyKind::kRandom));
ASIDE_PICK_BENCH(hash, Policy(PolicyKind::kHash));
ASIDE_PICK_BENCH(ketama, Policy(PolicyKind::kKetama));
ASIDE_PICK_BENCH(maglev, Policy(PolicyKind::kMaglev));
ASIDE_PICK_BENCH(ring_hash, Policy(PolicyKind::kRingHash));
ASIDE_PICK_BENCH(p2c_pending, Policy(PolicyKind::kP2c));
ASIDE_PICK_BENCH(p2c_peak_ewma, P2cPeak());
ASIDE_PICK_BENCH(least_time, Policy(PolicyKind::kLeastTime));
ASIDE_PICK_BENCH(least_time_first_byte, LeastTimeFirstByte());
ASIDE_PICK_BENCH(sticky_new_session, StickyHash());
ASIDE_PICK_BENCH(sticky_with_token, StickyHash(), true);
ASIDE_PICK_BENCH(locality, Policy(PolicyKind::kLocality));

// ----------------------------------------------------------- completions

void BM_RecordCompletion(benchmark::State& state, LoadModel model) {
  static BackendLoad load;
  Completion c;
  c.latency_nanos = 12'000'000;
  c.first_byte_nanos = 3'000'000;
  int64_t now = 1'000'000'000;
  const uint64_t allocs_before = t_allocations;
  for (auto _ : state) {
    load.Start();
    c.now_nanos = (now += 1000);
    load.Finish(c, model);
  }
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(t_allocations - allocs_before),
                         benchmark::Counter::kAvgIterations);
}
// Finish alone (what the caller pays when a request completes; Start() is
// paid when it begins). Without a matching Start() the in-flight count goes
// negative, which costs the same.
void BM_FinishOnly(benchmark::State& state, LoadModel model) {
  static BackendLoad load;
  Completion c;
  c.latency_nanos = 12'000'000;
  c.first_byte_nanos = 3'000'000;
  int64_t now = 1'000'000'000;
  const uint64_t allocs_before = t_allocations;
  for (auto _ : state) {
    c.now_nanos = (now += 1000);
    load.Finish(c, model);
  }
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(t_allocations - allocs_before),
                         benchmark::Counter::kAvgIterations);
}

LoadModel PeakEwmaModel() {
  PolicyConfig c = P2cPeak();
  return LoadModel::For(c);
}
LoadModel PendingModel() { return LoadModel::For(Policy(PolicyKind::kP2c)); }
LoadModel LeastTimeModel() {
  return LoadModel::For(Policy(PolicyKind::kLeastTime));
}
BENCHMARK_CAPTURE(BM_RecordCompletion, peak_ewma, PeakEwmaModel())
    ->Threads(1)
    ->Threads(2);
BENCHMARK_CAPTURE(BM_RecordCompletion, pending, PendingModel())
    ->Threads(1)
    ->Threads(2);
BENCHMARK_CAPTURE(BM_RecordCompletion, least_time, LeastTimeModel())
    ->Threads(1)
    ->Threads(2);
BENCHMARK_CAPTURE(BM_FinishOnly, peak_ewma, PeakEwmaModel())
    ->Threads(1)
    ->Threads(2);
BENCHMARK_CAPTURE(BM_FinishOnly, pending, PendingModel())
    ->Threads(1)
    ->Threads(2);

// -------------------------------------------------------------- snapshots

// Acquiring the current table (what a pick pays before Table::Pick).
void BM_SnapshotAcquire(benchmark::State& state) {
  static SnapshotCell<Table> cell(
      MakeBenchTable(Policy(PolicyKind::kRoundRobin), 10));
  for (auto _ : state) {
    benchmark::DoNotOptimize(cell.Acquire());
  }
}
BENCHMARK(BM_SnapshotAcquire)->Threads(1)->Threads(2);

// Publishing a new snapshot (the pointer swap and the release of the
// previous one; the table itself is prebuilt).
void BM_SnapshotPublish(benchmark::State& state) {
  const TableConstPtr a = MakeBenchTable(Policy(PolicyKind::kRoundRobin), 10);
  const TableConstPtr b = MakeBenchTable(Policy(PolicyKind::kRoundRobin), 10);
  SnapshotCell<Table> cell(a);
  bool flip = false;
  for (auto _ : state) {
    cell.Publish((flip = !flip) ? b : a);
  }
}
BENCHMARK(BM_SnapshotPublish);

// The server's pick path (acquire the group's current table, pick round
// robin over 100 backends) timed in batches of kBatch picks, so that the
// tail is visible: counters p50_ns and p99_ns are per pick, from the batch
// times. range(0): 0 = no writer (steady state); 1 = a writer thread
// publishes a new table every 100 us; 2 = back to back. The writer takes the
// machine's second core; the ratio of p99_ns to the steady run's is the
// DESIGN.md target (picks during a snapshot swap, p99 <= 1.2x).
void BM_PickDuringSwap(benchmark::State& state) {
  constexpr int kBatch = 16;
  const TableConstPtr a = MakeBenchTable(Policy(PolicyKind::kRoundRobin), 100);
  const TableConstPtr b = MakeBenchTable(Policy(PolicyKind::kRoundRobin), 100);
  SnapshotCell<Table> cell(a);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> swaps{0};
  std::thread writer;
  if (state.range(0) != 0) {
    const bool paced = state.range(0) == 1;
    writer = std::thread([&] {
      bool flip = false;
      int64_t next = MonotonicNanos();
      while (!stop.load(std::memory_order_relaxed)) {
        if (paced) {
          next += 100'000;
          while (MonotonicNanos() < next &&
                 !stop.load(std::memory_order_relaxed)) {
            std::this_thread::yield();
          }
        }
        cell.Publish((flip = !flip) ? b : a);
        swaps.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::vector<int64_t> batches;
  batches.reserve(1 << 20);
  std::array<uint32_t, 1> out;
  PickRequest request;
  const int64_t began = MonotonicNanos();
  for (auto _ : state) {
    const int64_t t0 = MonotonicNanos();
    for (int j = 0; j < kBatch; ++j) {
      TableConstPtr table = cell.Acquire();
      benchmark::DoNotOptimize(table->Pick(request, absl::MakeSpan(out)));
    }
    if (batches.size() < batches.capacity()) {
      batches.push_back(MonotonicNanos() - t0);
    }
  }
  const int64_t elapsed = MonotonicNanos() - began;
  stop.store(true);
  if (writer.joinable()) {
    writer.join();
  }
  aside::bench::SetBatchPercentiles(state, batches, kBatch);
  state.counters["swaps_per_s"] =
      static_cast<double>(swaps.load()) * 1e9 /
      static_cast<double>(std::max<int64_t>(elapsed, 1));
  state.SetItemsProcessed(state.iterations() * kBatch);
}
// A fixed minimum time, whatever --benchmark_min_time says: the tail needs
// enough batches and the writer enough swaps.
BENCHMARK(BM_PickDuringSwap)->Arg(0)->Arg(1)->Arg(2)->MinTime(0.3);

// ---------------------------------------------------------------- builds

std::vector<std::string> Addresses(size_t n) {
  std::vector<std::string> a;
  for (size_t i = 0; i < n; ++i) {
    a.push_back(testing::TestAddress(i));
  }
  return a;
}

void BM_KetamaBuild(benchmark::State& state) {
  const std::vector<std::string> addresses =
      Addresses(static_cast<size_t>(state.range(0)));
  std::vector<KetamaNode> nodes;
  for (const std::string& a : addresses) {
    nodes.push_back({a, 1});
  }
  for (auto _ : state) {
    auto ring = KetamaRing::Build(nodes, 160);
    benchmark::DoNotOptimize(ring->get());
  }
  state.counters["points"] = static_cast<double>(nodes.size() * 160);
}
BENCHMARK(BM_KetamaBuild)->Arg(1000)->Unit(benchmark::kMicrosecond);

// One backend added to a ring of 1000 (the previous ring reused by merge).
void BM_KetamaOneBackendChange(benchmark::State& state) {
  const std::vector<std::string> addresses = Addresses(1001);
  std::vector<KetamaNode> before;
  std::vector<KetamaNode> after;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (i != 500) {
      before.push_back({addresses[i], 1});
    }
    after.push_back({addresses[i], 1});
  }
  auto ring = KetamaRing::Build(before, 160);
  for (auto _ : state) {
    auto updated = KetamaRing::Update(**ring, before, after, 160);
    benchmark::DoNotOptimize(updated->get());
  }
}
BENCHMARK(BM_KetamaOneBackendChange)->Unit(benchmark::kMicrosecond);

void BM_MaglevBuild(benchmark::State& state) {
  const std::vector<std::string> addresses =
      Addresses(static_cast<size_t>(state.range(0)));
  std::vector<MaglevNode> nodes;
  for (const std::string& a : addresses) {
    nodes.push_back({a, 1});
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(MaglevPopulate(nodes, 65537).data());
  }
}
BENCHMARK(BM_MaglevBuild)->Arg(1000)->Unit(benchmark::kMicrosecond);

// A whole table build (validate, sort the members, derive eligibility,
// build the selector) per policy, over range(0) backends of weights 1..7:
// what a rebuild costs the control plane off the request path.
void BM_TableBuild(benchmark::State& state, PolicyConfig policy) {
  const size_t n = static_cast<size_t>(state.range(0));
  TableSpec spec;
  spec.group = "build";
  spec.policy = std::move(policy);
  for (size_t i = 0; i < n; ++i) {
    Member m;
    m.backend.address = testing::TestAddress(i);
    m.weight = static_cast<uint32_t>(1 + i % 7);
    m.backend.weight = m.weight;
    spec.members.push_back(std::move(m));
  }
  LoadTracker loads;
  for (auto _ : state) {
    state.PauseTiming();
    TableSpec copy = spec;
    state.ResumeTiming();
    auto table = Table::Create(std::move(copy), nullptr, &loads);
    benchmark::DoNotOptimize(table->get());
  }
}
#define ASIDE_TABLE_BUILD_BENCH(name, ...)            \
  BENCHMARK_CAPTURE(BM_TableBuild, name, __VA_ARGS__) \
      ->Arg(1000)                                     \
      ->Arg(10000)                                    \
      ->Unit(benchmark::kMicrosecond)
ASIDE_TABLE_BUILD_BENCH(round_robin, Policy(PolicyKind::kRoundRobin));
ASIDE_TABLE_BUILD_BENCH(weighted_round_robin,
                        Policy(PolicyKind::kWeightedRoundRobin));
ASIDE_TABLE_BUILD_BENCH(random, Policy(PolicyKind::kRandom));
ASIDE_TABLE_BUILD_BENCH(hash, Policy(PolicyKind::kHash));
ASIDE_TABLE_BUILD_BENCH(ketama, Policy(PolicyKind::kKetama));
ASIDE_TABLE_BUILD_BENCH(maglev, Policy(PolicyKind::kMaglev));
ASIDE_TABLE_BUILD_BENCH(ring_hash, Policy(PolicyKind::kRingHash));
ASIDE_TABLE_BUILD_BENCH(p2c_peak_ewma, P2cPeak());
ASIDE_TABLE_BUILD_BENCH(least_time, Policy(PolicyKind::kLeastTime));

// ------------------------------------------------------------ disruption

// Keys whose first choice changes when one of N = range(0) backends is added
// (arg 1) or removed (arg 0), against the ideal 1/(N+1) or 1/N.
void BM_Disruption(benchmark::State& state, PolicyKind kind) {
  const size_t n = static_cast<size_t>(state.range(0));
  const bool add = state.range(1) == 1;
  PolicyConfig policy = Policy(kind);
  auto make = [&](size_t count) {
    TableSpec spec;
    spec.group = "d";
    spec.policy = policy;
    for (size_t i = 0; i < count; ++i) {
      Member m;
      m.backend.address = testing::TestAddress(i);
      m.weight = 1;
      spec.members.push_back(std::move(m));
    }
    return *Table::Create(std::move(spec), nullptr, nullptr);
  };
  TableConstPtr before = make(n);
  TableConstPtr after = make(add ? n + 1 : n - 1);
  double moved = 0;
  constexpr int kKeys = 100000;
  for (auto _ : state) {
    moved = 0;
    std::array<uint32_t, 1> a;
    std::array<uint32_t, 1> b;
    for (int i = 0; i < kKeys; ++i) {
      const std::string key = absl::StrCat("key-", i);
      PickRequest r;
      r.key = key;
      before->Pick(r, absl::MakeSpan(a));
      after->Pick(r, absl::MakeSpan(b));
      moved += before->member(a[0]).backend.address !=
                       after->member(b[0]).backend.address
                   ? 1
                   : 0;
    }
  }
  state.counters["moved_pct"] = 100.0 * moved / kKeys;
  state.counters["ideal_pct"] = 100.0 / static_cast<double>(add ? n + 1 : n);
}
BENCHMARK_CAPTURE(BM_Disruption, hash, PolicyKind::kHash)
    ->Args({100, 1})
    ->Args({100, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Disruption, ketama, PolicyKind::kKetama)
    ->Args({100, 1})
    ->Args({100, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Disruption, maglev, PolicyKind::kMaglev)
    ->Args({100, 1})
    ->Args({100, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Disruption, ring_hash, PolicyKind::kRingHash)
    ->Args({100, 1})
    ->Args({100, 0})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace aside

BENCHMARK_MAIN();
