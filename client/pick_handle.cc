#include "client/pick_handle.h"

#include <algorithm>

#include "lib/load/orca_report.h"

namespace aside {

namespace client_internal {

namespace {
std::atomic<uint64_t> next_thread_id{1};
thread_local uint64_t t_thread_id = 0;
}  // namespace

uint64_t CurrentThreadId() noexcept {
  if (t_thread_id == 0) [[unlikely]] {
    t_thread_id = next_thread_id.fetch_add(1, std::memory_order_relaxed);
  }
  return t_thread_id;
}

void ReleaseHold(SnapshotHold* hold) noexcept {
  // t_thread_id, not CurrentThreadId(): a thread without an id owns no
  // hold.
  if (hold->owner_thread == t_thread_id && !hold->retired) [[likely]] {
    ++hold->returned;
    return;
  }
  if (hold->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    delete hold;
  }
}

void RetireHold(SnapshotHold* hold) noexcept {
  hold->retired = true;
  const int64_t outstanding =
      static_cast<int64_t>(hold->taken - hold->returned);
  if (hold->pending.fetch_add(outstanding, std::memory_order_acq_rel) +
          outstanding ==
      0) {
    delete hold;
  }
}

CounterTotals BackendStats::Totals() const {
  CounterTotals t = SumCounterSlot(slot);
  // The shared gap before the latencies it was taken from, as above.
  t.first_byte_gap_sum_nanos +=
      first_byte_gap_sum_nanos.load(std::memory_order_acquire);
  t.latency_sum_nanos += latency_sum_nanos.load(std::memory_order_relaxed);
  t.failures += failures.load(std::memory_order_relaxed);
  const uint64_t finished = requests.load(std::memory_order_relaxed);
  t.requests += finished;
  t.in_flight +=
      static_cast<int64_t>(started.load(std::memory_order_relaxed) - finished);
  return t;
}

}  // namespace client_internal

PickHandle& PickHandle::operator=(PickHandle&& other) noexcept {
  if (this != &other) {
    if (member_ != nullptr && !done_) {
      Record(false, Now() - start_nanos_);
    }
    if (hold_ != nullptr) {
      client_internal::ReleaseHold(hold_);
    }
    hold_ = other.hold_;
    member_ = other.member_;
    stats_ = other.stats_;
    clock_ = other.clock_;
    start_nanos_ = other.start_nanos_;
    first_byte_nanos_ = other.first_byte_nanos_;
    exact_start_ = other.exact_start_;
    shared_in_flight_ = other.shared_in_flight_;
    done_ = other.done_;
    other.hold_ = nullptr;
    other.member_ = nullptr;
    other.stats_ = nullptr;
    other.done_ = true;
  }
  return *this;
}

PickHandle::~PickHandle() {
  if (member_ != nullptr && !done_) {
    Record(false, Now() - start_nanos_);
  }
  if (hold_ != nullptr) {
    client_internal::ReleaseHold(hold_);
  }
}

uint64_t PickHandle::generation() const {
  return hold_ != nullptr && hold_->snapshot->table
             ? hold_->snapshot->table->generation()
             : 0;
}

bool PickHandle::from_fallback() const {
  return hold_ != nullptr && hold_->snapshot->fallback;
}

bool PickHandle::from_cache() const {
  return hold_ != nullptr && hold_->snapshot->from_cache;
}

void PickHandle::FirstByte() noexcept {
  if (member_ == nullptr || done_ || first_byte_nanos_ >= 0) {
    return;
  }
  first_byte_nanos_ = std::max<int64_t>(Now() - start_nanos_, 0);
}

void PickHandle::Done(bool ok) noexcept {
  if (member_ == nullptr || done_) {
    return;
  }
  Record(ok, Now() - start_nanos_);
}

bool PickHandle::RecordBackendMetrics(absl::string_view serialized) noexcept {
  // The bound of the load report's Utilization message (lookaside.proto),
  // which the server enforces: a report beyond it is dropped here rather
  // than cost the observation it would travel with.
  constexpr double kMaxUtilization = 10;
  if (stats_ == nullptr) {
    return false;
  }
  const std::optional<OrcaLoad> load = ParseOrcaLoadReport(serialized);
  if (!load || load->cpu_utilization > kMaxUtilization ||
      load->application_utilization > kMaxUtilization) {
    return false;
  }
  if (load->rif >= 0 && member_ != nullptr) {
    // The backend's own requests in flight and latency (prequal): without
    // a latency of its own, the stub's estimate stands in.
    member_->load->Report(
        static_cast<uint32_t>(std::min(load->rif, 1e9)),
        load->latency_ms >= 0
            ? load->latency_ms * 1e6
            : member_->load->LastByteEwma(hold_->snapshot->table->load_model()),
        Now(),
        // The backend answered this call before it counted its requests in
        // flight; until Done this process still counts it as its own.
        /*own_excluded=*/!done_ && shared_in_flight_ ? 1 : 0);
  }
  aside::MutexLock lock(&stats_->orca_mu);
  stats_->orca = *load;
  ++stats_->orca_reports;
  return true;
}

void PickHandle::Record(bool ok, int64_t latency_nanos) noexcept {
  latency_nanos = std::max<int64_t>(latency_nanos, 0);
  // The policies' load models (in-flight, peak-EWMA, least-time EWMA).
  Completion completion;
  completion.now_nanos = start_nanos_ + latency_nanos;
  completion.latency_nanos = latency_nanos;
  completion.first_byte_nanos = first_byte_nanos_ >= 0
                                    ? std::min(first_byte_nanos_, latency_nanos)
                                    : latency_nanos;
  completion.ok = ok;
  if (exact_start_) {
    const LoadModel& model = hold_->snapshot->table->load_model();
    if (shared_in_flight_) {
      member_->load->Finish(completion, model);
    } else {
      member_->load->Observe(completion, model);
    }
  } else if (shared_in_flight_) {
    member_->load->Finish(ok);
  }
  const uint64_t latency = static_cast<uint64_t>(latency_nanos);
  const uint64_t gap =
      static_cast<uint64_t>(latency_nanos - completion.first_byte_nanos);
  client_internal::SlotCounters* own =
      stats_->slot != client_internal::kNoCounterSlot
          ? client_internal::LocalCounters(stats_->slot)
          : nullptr;
  if (own != nullptr) [[likely]] {
    using client_internal::OwnAdd;
    OwnAdd(own->requests, 1);
    OwnAdd(own->latency_sum_nanos, latency);
    if (gap != 0) {
      OwnAdd(own->first_byte_gap_sum_nanos, gap, std::memory_order_release);
    }
    if (!ok) {
      OwnAdd(own->failures, 1);
    }
  } else {
    stats_->requests.fetch_add(1, std::memory_order_relaxed);
    stats_->latency_sum_nanos.fetch_add(latency, std::memory_order_relaxed);
    if (gap != 0) {
      stats_->first_byte_gap_sum_nanos.fetch_add(gap,
                                                 std::memory_order_release);
    }
    if (!ok) {
      stats_->failures.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (ok) {
    if (stats_->consecutive_failures.load(std::memory_order_relaxed) != 0) {
      stats_->consecutive_failures.store(0, std::memory_order_relaxed);
    }
    if (stats_->ejected_until_nanos.load(std::memory_order_relaxed) != 0) {
      stats_->ejected_until_nanos.store(0, std::memory_order_relaxed);
    }
  } else {
    const uint32_t consecutive =
        stats_->consecutive_failures.fetch_add(1, std::memory_order_relaxed) +
        1;
    if (stats_->eject_after_failures != 0 &&
        consecutive >= stats_->eject_after_failures) {
      stats_->ejected_until_nanos.store(
          completion.now_nanos + stats_->eject_nanos,
          std::memory_order_relaxed);
    }
  }
  done_ = true;
}

}  // namespace aside
