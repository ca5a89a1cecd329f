#include "client/pick_handle.h"

#include <algorithm>

namespace aside {

PickHandle& PickHandle::operator=(PickHandle&& other) noexcept {
  if (this != &other) {
    if (member_ != nullptr && !done_) {
      Record(false, clock_->NowNanos() - start_nanos_);
    }
    keep_ = std::move(other.keep_);
    member_ = other.member_;
    stats_ = other.stats_;
    clock_ = other.clock_;
    start_nanos_ = other.start_nanos_;
    first_byte_nanos_ = other.first_byte_nanos_;
    done_ = other.done_;
    other.member_ = nullptr;
    other.stats_ = nullptr;
    other.done_ = true;
  }
  return *this;
}

PickHandle::~PickHandle() {
  if (member_ != nullptr && !done_) {
    Record(false, clock_->NowNanos() - start_nanos_);
  }
}

uint64_t PickHandle::generation() const {
  return keep_ && keep_->table ? keep_->table->generation() : 0;
}

bool PickHandle::from_fallback() const { return keep_ && keep_->fallback; }

void PickHandle::FirstByte() noexcept {
  if (member_ == nullptr || done_ || first_byte_nanos_ >= 0) {
    return;
  }
  first_byte_nanos_ = std::max<int64_t>(clock_->NowNanos() - start_nanos_, 0);
}

void PickHandle::Done(bool ok) noexcept {
  if (member_ == nullptr || done_) {
    return;
  }
  Record(ok, clock_->NowNanos() - start_nanos_);
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
  member_->load->Finish(completion, keep_->table->load_model());
  stats_->requests.fetch_add(1, std::memory_order_relaxed);
  stats_->latency_sum_nanos.fetch_add(static_cast<uint64_t>(latency_nanos),
                                      std::memory_order_relaxed);
  stats_->first_byte_sum_nanos.fetch_add(
      static_cast<uint64_t>(completion.first_byte_nanos),
      std::memory_order_relaxed);
  if (ok) {
    if (stats_->consecutive_failures.load(std::memory_order_relaxed) != 0) {
      stats_->consecutive_failures.store(0, std::memory_order_relaxed);
    }
    if (stats_->ejected_until_nanos.load(std::memory_order_relaxed) != 0) {
      stats_->ejected_until_nanos.store(0, std::memory_order_relaxed);
    }
  } else {
    stats_->failures.fetch_add(1, std::memory_order_relaxed);
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
