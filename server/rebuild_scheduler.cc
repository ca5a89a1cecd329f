#include "server/rebuild_scheduler.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include "server/group_registry.h"

namespace aside::server {

RebuildScheduler::RebuildScheduler()
    : RebuildScheduler(&SystemClock::Get(), Mode::kThreaded) {}

RebuildScheduler::RebuildScheduler(const Clock* clock, Mode mode)
    : clock_(clock) {
  if (mode == Mode::kThreaded) {
    thread_ = std::thread([this] { Run(); });
  }
}

RebuildScheduler::~RebuildScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void RebuildScheduler::Schedule(const std::shared_ptr<Group>& group,
                                absl::Duration delay) {
  const int64_t now = clock_->NowNanos();
  const int64_t wait = std::max<int64_t>(0, absl::ToInt64Nanoseconds(delay));
  const int64_t due = wait >= std::numeric_limits<int64_t>::max() - now
                          ? std::numeric_limits<int64_t>::max()
                          : now + wait;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] =
        pending_.try_emplace(group.get(), Pending{group, due});
    if (!inserted) {
      if (due >= it->second.due) {
        return;  // folded into the rebuild already scheduled
      }
      it->second.due = due;
    }
  }
  changed_.notify_all();
}

uint64_t RebuildScheduler::rebuilds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rebuilds_;
}

std::optional<int64_t> RebuildScheduler::NextDue() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<int64_t> next;
  for (const auto& [key, p] : pending_) {
    if (!next || p.due < *next) {
      next = p.due;
    }
  }
  return next;
}

std::vector<std::shared_ptr<Group>> RebuildScheduler::TakeDueLocked(
    int64_t now) {
  std::vector<std::shared_ptr<Group>> due;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.due <= now) {
      if (auto g = it->second.group.lock()) {
        due.push_back(std::move(g));
      }
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  return due;
}

size_t RebuildScheduler::RunDue() {
  std::vector<std::shared_ptr<Group>> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    due = TakeDueLocked(clock_->NowNanos());
  }
  for (const auto& g : due) {
    g->Rebuild();
  }
  std::lock_guard<std::mutex> lock(mu_);
  rebuilds_ += due.size();
  return due.size();
}

void RebuildScheduler::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    int64_t next = std::numeric_limits<int64_t>::max();
    for (const auto& [key, p] : pending_) {
      next = std::min(next, p.due);
    }
    const int64_t now = clock_->NowNanos();
    if (next > now) {
      if (next == std::numeric_limits<int64_t>::max()) {
        changed_.wait(lock);
      } else {
        changed_.wait_for(lock, std::chrono::nanoseconds(next - now));
      }
      continue;
    }
    std::vector<std::shared_ptr<Group>> due = TakeDueLocked(now);
    lock.unlock();
    for (const auto& g : due) {
      g->Rebuild();
    }
    lock.lock();
    rebuilds_ += due.size();
  }
}

}  // namespace aside::server
