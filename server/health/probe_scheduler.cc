#include "server/health/probe_scheduler.h"

#include <algorithm>

namespace aside::server::health_internal {

int64_t ProbeScheduler::TickFor(int64_t interval_nanos) {
  return std::clamp<int64_t>(interval_nanos / 100, kMinTickNanos,
                             kMaxTickNanos);
}

ProbeScheduler::ProbeScheduler(uint32_t max_in_flight, uint64_t seed)
    : max_in_flight_(std::max<uint32_t>(1, max_in_flight)), rng_(seed) {}

void ProbeScheduler::Add(uint64_t id, const Timing& timing, int64_t now,
                         Actions& out) {
  auto slot = std::make_shared<Slot>();
  slot->id = id;
  slot->timing = timing;
  slot->tick = TickFor(timing.interval);
  if (timing.track_timeout) {
    slot->timeouts = &timeout_lists_[{timing.timeout, slot->tick}];
  }
  slots_[id] = slot;
  StartOrQueue(slot, now, out);
}

void ProbeScheduler::Remove(uint64_t id) {
  auto it = slots_.find(id);
  if (it == slots_.end()) {
    return;
  }
  Slot& slot = *it->second;
  slot.removed = true;
  UnlinkTimeout(slot);
  if (!slot.in_flight) {
    slots_.erase(it);
  }
}

void ProbeScheduler::Finished(uint64_t id, int64_t now, Actions& out) {
  auto it = slots_.find(id);
  if (it == slots_.end() || !it->second->in_flight) {
    return;
  }
  std::shared_ptr<Slot> slot = it->second;
  slot->in_flight = false;
  --in_flight_;
  UnlinkTimeout(*slot);
  if (slot->removed) {
    slots_.erase(it);
  } else {
    ScheduleNext(slot);
  }
  DrainQueue(now, out);
}

void ProbeScheduler::Poll(int64_t now, Actions& out) {
  while (!calendar_.empty() && calendar_.begin()->first <= now) {
    std::vector<ScheduleEntry> bucket = std::move(calendar_.begin()->second);
    calendar_.erase(calendar_.begin());
    for (ScheduleEntry& entry : bucket) {
      if (!entry.slot->removed && entry.seq == entry.slot->schedule_seq) {
        StartOrQueue(entry.slot, now, out);
      }
    }
    bucket.clear();
    if (spare_buckets_.size() < 16) {
      spare_buckets_.push_back(std::move(bucket));
    }
  }
  for (auto& [key, list] : timeout_lists_) {
    while (list.head != nullptr && TimeoutDue(*list.head) <= now) {
      Slot& slot = *list.head;
      UnlinkTimeout(slot);
      out.timed_out.push_back(slot.id);
    }
  }
}

void ProbeScheduler::Clear() {
  for (auto& [key, list] : timeout_lists_) {
    while (list.head != nullptr) {
      UnlinkTimeout(*list.head);
    }
  }
  for (auto& [id, slot] : slots_) {
    slot->removed = true;
  }
  slots_.clear();
  waiting_.clear();
  calendar_.clear();
  in_flight_ = 0;
}

int64_t ProbeScheduler::NextWake() const {
  int64_t next = calendar_.empty() ? kNever : calendar_.begin()->first;
  for (const auto& [key, list] : timeout_lists_) {
    if (list.head != nullptr) {
      next = std::min(next, TimeoutDue(*list.head));
    }
  }
  return next;
}

int64_t ProbeScheduler::started(uint64_t id) const {
  auto it = slots_.find(id);
  return it == slots_.end() ? -1 : it->second->started;
}

void ProbeScheduler::StartOrQueue(const std::shared_ptr<Slot>& slot,
                                  int64_t now, Actions& out) {
  if (slot->removed || slot->in_flight || slot->queued) {
    return;
  }
  if (in_flight_ < max_in_flight_ && waiting_.empty()) {
    Start(*slot, now, out);
  } else {
    slot->queued = true;
    waiting_.push_back(slot);
  }
}

void ProbeScheduler::Start(Slot& slot, int64_t now, Actions& out) {
  slot.in_flight = true;
  ++in_flight_;
  slot.started = now;
  if (slot.timeouts != nullptr) {
    LinkTimeout(slot);
  }
  out.start.push_back(slot.id);
}

void ProbeScheduler::DrainQueue(int64_t now, Actions& out) {
  while (in_flight_ < max_in_flight_ && !waiting_.empty()) {
    std::shared_ptr<Slot> slot = std::move(waiting_.front());
    waiting_.pop_front();
    slot->queued = false;
    if (!slot->removed) {
      Start(*slot, now, out);
    }
  }
}

void ProbeScheduler::ScheduleNext(const std::shared_ptr<Slot>& slot) {
  double factor = 1.0;
  if (slot->timing.jitter > 0) {
    std::uniform_real_distribution<double> jitter(-slot->timing.jitter,
                                                  slot->timing.jitter);
    factor += jitter(rng_);
  }
  const int64_t interval =
      static_cast<int64_t>(static_cast<double>(slot->timing.interval) * factor);
  const int64_t due =
      RoundUpToTick(slot->started + std::max<int64_t>(interval, 1), slot->tick);
  auto [it, inserted] = calendar_.try_emplace(due);
  if (inserted && !spare_buckets_.empty()) {
    it->second.swap(spare_buckets_.back());  // reuse its capacity
    spare_buckets_.pop_back();
  }
  it->second.push_back({++slot->schedule_seq, slot});
}

void ProbeScheduler::LinkTimeout(Slot& slot) {
  TimeoutList& list = *slot.timeouts;
  slot.timeout_prev = list.tail;
  slot.timeout_next = nullptr;
  (list.tail != nullptr ? list.tail->timeout_next : list.head) = &slot;
  list.tail = &slot;
  slot.timeout_linked = true;
}

void ProbeScheduler::UnlinkTimeout(Slot& slot) {
  if (!slot.timeout_linked) {
    return;
  }
  TimeoutList& list = *slot.timeouts;
  (slot.timeout_prev != nullptr ? slot.timeout_prev->timeout_next : list.head) =
      slot.timeout_next;
  (slot.timeout_next != nullptr ? slot.timeout_next->timeout_prev : list.tail) =
      slot.timeout_prev;
  slot.timeout_prev = slot.timeout_next = nullptr;
  slot.timeout_linked = false;
}

}  // namespace aside::server::health_internal
