// The stub's local pick against its floors, in the same run:
// - BM_RelaxedIncrement: one relaxed fetch_add on a shared counter, the
//   floor every pick pays at least once (the round-robin position);
// - BM_SnapshotCellAcquire: atomic<shared_ptr>::load, what a pick would
//   cost if it pinned the table through SnapshotCell (not lock-free on
//   libstdc++ 12);
// - BM_ClientPick / BM_ClientPickDone: aside::ClientGroup::Pick (and Done)
//   on a group whose table came over a real Watch stream, against
//   BM_TableSelectorPick*, the lib selector alone on the same table (the
//   target: Pick + Done within 2x of it).
// - BM_TscNow against BM_ClockNow: the stub's time stamp where the TSC is
//   safe (client/pick_clock.h) against a vDSO CLOCK_MONOTONIC read;
//   BM_TscAccuracy/<ms>: a TSC-derived duration against CLOCK_MONOTONIC's
//   over the same interval (counters err_ns, the largest difference over
//   the iterations, and err_ppm, that over the interval).
// Allocations are counted with a replaced global operator new and
// reported per pick (counter allocs_per_op); the steady-state pick path
// must not allocate.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/batch_percentiles.h"
#include "client/client.h"
#include "client/pick_clock.h"
#include "lib/snapshot_cell.h"
#include "tests/client/fake_lookaside.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    return p;
  }
  std::abort();  // a benchmark out of memory has nothing to measure
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace aside {
namespace {

struct Fixture {
  testing::FakeServer fake;
  std::unique_ptr<Client> client;

  Fixture() {
    fake.Start();
    for (const char* policy : {"rr", "wrr", "peak"}) {
      v1::GroupUpdate u;
      u.set_group(policy);
      u.set_generation(1);
      u.set_server_id("bench");
      if (std::string(policy) == "rr") {
        u.mutable_full()->mutable_policy()->mutable_round_robin();
      } else if (std::string(policy) == "wrr") {
        u.mutable_full()->mutable_policy()->mutable_weighted_round_robin();
      } else {
        u.mutable_full()->mutable_policy()->mutable_p2c()->set_load(
            v1::P2c::PEAK_EWMA);
      }
      for (int i = 0; i < 10; ++i) {
        v1::TableBackend* b = u.mutable_full()->add_backends();
        b->mutable_backend()->set_address(absl::StrCat("127.0.0.1:", 9000 + i));
        b->set_effective_weight(static_cast<uint32_t>(100 * (1 + i % 3)));
        b->set_ready(true);
        b->set_health(v1::HEALTH_STATE_HEALTHY);
      }
      fake.service.Push(u);
    }
    fake.service.Push(SwapUpdate(1));
    ClientOptions options;
    options.targets = {fake.target()};
    options.groups = {"rr", "wrr", "peak", "swap"};
    options.report_interval = absl::ZeroDuration();
    client = *Client::Create(options);
    client->Group("rr")->WaitForGeneration(1, absl::Seconds(10));
    client->Group("wrr")->WaitForGeneration(1, absl::Seconds(10));
    client->Group("peak")->WaitForGeneration(1, absl::Seconds(10));
    client->Group("swap")->WaitForGeneration(1, absl::Seconds(10));
  }

  // A full table of group "swap" (round robin, 10 backends) whose weights
  // change with the generation, so that every update is a real change.
  static v1::GroupUpdate SwapUpdate(uint64_t generation) {
    v1::GroupUpdate u;
    u.set_group("swap");
    u.set_generation(generation);
    u.set_server_id("bench");
    u.mutable_full()->mutable_policy()->mutable_round_robin();
    for (int i = 0; i < 10; ++i) {
      v1::TableBackend* b = u.mutable_full()->add_backends();
      b->mutable_backend()->set_address(absl::StrCat("127.0.0.1:", 9100 + i));
      b->set_effective_weight(static_cast<uint32_t>(
          100 + (generation + static_cast<uint64_t>(i)) % 7));
      b->set_ready(true);
      b->set_health(v1::HEALTH_STATE_HEALTHY);
    }
    return u;
  }
  uint64_t swap_generation = 1;
};

Fixture& Get() {
  static Fixture* f = new Fixture();
  return *f;
}

std::atomic<uint64_t> g_counter{0};

void BM_RelaxedIncrement(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_counter.fetch_add(1, std::memory_order_relaxed));
  }
}
BENCHMARK(BM_RelaxedIncrement)->Threads(1)->Threads(2);

SnapshotCell<int>& Cell() {
  static auto* cell = new SnapshotCell<int>(std::make_shared<const int>(7));
  return *cell;
}

void BM_SnapshotCellAcquire(benchmark::State& state) {
  SnapshotCell<int>& cell = Cell();
  for (auto _ : state) {
    std::shared_ptr<const int> p = cell.Acquire();
    benchmark::DoNotOptimize(*p);
  }
}
BENCHMARK(BM_SnapshotCellAcquire)->Threads(1)->Threads(2);

// The two parts of a stub pick that are not the stub's own: the lib/
// selector on the same table, and one read of the clock (a pick and its
// Done read it once each, for the latency).
void BM_TableSelectorPick(benchmark::State& state) {
  TableConstPtr table = Get().client->Group("rr")->table();
  uint32_t index = 0;
  for (auto _ : state) {
    PickRequest request;
    benchmark::DoNotOptimize(
        table->Pick(request, absl::Span<uint32_t>(&index, 1)));
  }
}
BENCHMARK(BM_TableSelectorPick)->Threads(1)->Threads(2);

void BM_ClockNow(benchmark::State& state) {
  const Clock& clock = SystemClock::Get();
  for (auto _ : state) {
    benchmark::DoNotOptimize(clock.NowNanos());
  }
}
BENCHMARK(BM_ClockNow)->Threads(1)->Threads(2);

void BM_TscNow(benchmark::State& state) {
  client_internal::CalibratePickTsc();
  if (!client_internal::g_pick_tsc.usable) {
    state.SkipWithError("no safe TSC on this machine");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(client_internal::TscNanos());
  }
}
BENCHMARK(BM_TscNow)->Threads(1)->Threads(2);

// What an exactly timed pick cannot go below: the selector on the rr table
// and the two time stamps a latency needs (start and Done).
void BM_SelectorPickTwoStamps(benchmark::State& state) {
  client_internal::CalibratePickTsc();
  if (!client_internal::g_pick_tsc.usable) {
    state.SkipWithError("no safe TSC on this machine");
    return;
  }
  TableConstPtr table = Get().client->Group("rr")->table();
  uint32_t index = 0;
  for (auto _ : state) {
    const int64_t start = client_internal::TscNanos();
    PickRequest request;
    benchmark::DoNotOptimize(
        table->Pick(request, absl::Span<uint32_t>(&index, 1)));
    benchmark::DoNotOptimize(client_internal::TscNanos() - start);
  }
}
BENCHMARK(BM_SelectorPickTwoStamps)->Threads(1)->Threads(2);

// A (TSC, CLOCK_MONOTONIC) reading taken as close together as possible:
// the tightest bracket of a few tries, so that a preemption between the
// reads does not count as clock error.
std::pair<int64_t, int64_t> ClockPair() {
  int64_t best = INT64_MAX;
  std::pair<int64_t, int64_t> pair;
  for (int i = 0; i < 8; ++i) {
    const int64_t before = client_internal::TscNanos();
    const int64_t mono = MonotonicNanos();
    const int64_t after = client_internal::TscNanos();
    if (after - before < best) {
      best = after - before;
      pair = {before + (after - before) / 2, mono};
    }
  }
  return pair;
}

// Each iteration sleeps range(0) ms and compares the two clocks' idea of
// how long that took.
void BM_TscAccuracy(benchmark::State& state) {
  client_internal::CalibratePickTsc();
  if (!client_internal::g_pick_tsc.usable) {
    state.SkipWithError("no safe TSC on this machine");
    return;
  }
  const auto interval = std::chrono::milliseconds(state.range(0));
  int64_t worst = 0;
  for (auto _ : state) {
    const auto [tsc0, mono0] = ClockPair();
    std::this_thread::sleep_for(interval);
    const auto [tsc1, mono1] = ClockPair();
    const int64_t err = (tsc1 - tsc0) - (mono1 - mono0);
    if (std::abs(err) > std::abs(worst)) {
      worst = err;
    }
  }
  state.counters["err_ns"] = static_cast<double>(worst);
  state.counters["err_ppm"] =
      1e6 * static_cast<double>(worst) /
      static_cast<double>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(interval)
              .count());
}
BENCHMARK(BM_TscAccuracy)
    ->Arg(1)
    ->Arg(10)
    ->Arg(100)
    ->Iterations(5)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TscAccuracy)
    ->Arg(1000)
    ->Iterations(2)
    ->Unit(benchmark::kMillisecond);

void PickLoop(benchmark::State& state, const char* group_name, bool done) {
  ClientGroup* group = Get().client->Group(group_name);
  // Warm the thread's cache outside the timed region.
  { auto warm = group->Pick(); }
  const uint64_t before = g_allocations.load();
  int64_t failures = 0;
  for (auto _ : state) {
    absl::StatusOr<PickHandle> pick = group->Pick();
    if (!pick.ok()) {
      ++failures;
      continue;
    }
    benchmark::DoNotOptimize(pick->address().data());
    if (done) {
      pick->Done(true);
    }
  }
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(g_allocations.load() - before),
                         benchmark::Counter::kAvgIterations);
  state.counters["failures"] = static_cast<double>(failures);
}

void BM_ClientPickRoundRobin(benchmark::State& state) {
  PickLoop(state, "rr", /*done=*/false);
}
BENCHMARK(BM_ClientPickRoundRobin)->Threads(1)->Threads(2);

void BM_ClientPickDoneRoundRobin(benchmark::State& state) {
  PickLoop(state, "rr", /*done=*/true);
}
BENCHMARK(BM_ClientPickDoneRoundRobin)->Threads(1)->Threads(2);

void BM_ClientPickWeightedRoundRobin(benchmark::State& state) {
  PickLoop(state, "wrr", /*done=*/false);
}
BENCHMARK(BM_ClientPickWeightedRoundRobin)->Threads(1)->Threads(2);

void BM_ClientPickDoneWeightedRoundRobin(benchmark::State& state) {
  PickLoop(state, "wrr", /*done=*/true);
}
BENCHMARK(BM_ClientPickDoneWeightedRoundRobin)->Threads(1)->Threads(2);

// p2c peak_ewma reads latency, so its picks take an exact start stamp
// (client/pick_clock.h): two exact clock reads per pick and Done.
void BM_ClientPickDonePeakEwma(benchmark::State& state) {
  PickLoop(state, "peak", /*done=*/true);
}
BENCHMARK(BM_ClientPickDonePeakEwma)->Threads(1)->Threads(2);

// The lib selector of the same p2c peak_ewma table, given `now` as the
// stub gives it.
void BM_TableSelectorPickPeakEwma(benchmark::State& state) {
  TableConstPtr table = Get().client->Group("peak")->table();
  uint32_t index = 0;
  const int64_t now = MonotonicNanos();
  for (auto _ : state) {
    PickRequest request;
    request.now_nanos = now;
    benchmark::DoNotOptimize(
        table->Pick(request, absl::Span<uint32_t>(&index, 1)));
  }
}
BENCHMARK(BM_TableSelectorPickPeakEwma)->Threads(1)->Threads(2);

// Stub picks while the group's table changes, timed in batches of kBatch
// picks so that the tail shows: counters p50_ns and p99_ns are per pick.
// range(0): 0 = no updates (steady state); N = a thread pushes N full
// tables per second through the Watch stream, so the stub's watcher thread
// builds and publishes a table every 1/N s and every picking thread
// refreshes its cached snapshot after each one.
void BM_ClientPickDuringUpdates(benchmark::State& state) {
  constexpr int kBatch = 16;
  Fixture& f = Get();
  ClientGroup* group = f.client->Group("swap");
  const int64_t per_second = state.range(0);
  std::atomic<bool> stop{false};
  std::thread pusher;
  const uint64_t generation_before = group->generation();
  if (per_second > 0) {
    pusher = std::thread([&] {
      const auto period = std::chrono::nanoseconds(1'000'000'000 / per_second);
      auto next = std::chrono::steady_clock::now();
      while (!stop.load(std::memory_order_relaxed)) {
        next += period;
        std::this_thread::sleep_until(next);
        f.fake.service.Push(Fixture::SwapUpdate(++f.swap_generation));
      }
    });
  }
  { auto warm = group->Pick(); }
  std::vector<int64_t> batches;
  batches.reserve(1 << 20);
  const auto began = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int j = 0; j < kBatch; ++j) {
      absl::StatusOr<PickHandle> pick = group->Pick();
      benchmark::DoNotOptimize(pick.ok());
      if (pick.ok()) {
        pick->Done(true);
      }
    }
    if (batches.size() < batches.capacity()) {
      batches.push_back((std::chrono::steady_clock::now() - t0).count());
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
          .count();
  stop.store(true);
  if (pusher.joinable()) {
    pusher.join();
  }
  aside::bench::SetBatchPercentiles(state, batches, kBatch);
  state.counters["tables_per_s"] =
      static_cast<double>(group->generation() - generation_before) /
      std::max(seconds, 1e-9);
}
// A fixed minimum time, whatever --benchmark_min_time says: the tail needs
// enough batches and the group enough updates.
BENCHMARK(BM_ClientPickDuringUpdates)
    ->Arg(0)
    ->Arg(100)
    ->Arg(1000)
    ->MinTime(0.5);

}  // namespace
}  // namespace aside

BENCHMARK_MAIN();
