#include "server/rebuild_scheduler.h"

#include <chrono>
#include <vector>

#include "absl/time/clock.h"
#include "server/group_registry.h"

namespace aside::server {

RebuildScheduler::RebuildScheduler() {
  thread_ = std::thread([this] { Run(); });
}

RebuildScheduler::~RebuildScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void RebuildScheduler::Schedule(const std::shared_ptr<Group>& group,
                                absl::Duration delay) {
  const absl::Time due = absl::Now() + delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = pending_.try_emplace(group.get(), Pending{group, due});
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

void RebuildScheduler::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [key, p] : pending_) {
      next = std::min(next, p.due);
    }
    const absl::Time now = absl::Now();
    if (next > now) {
      if (next == absl::InfiniteFuture()) {
        changed_.wait(lock);
      } else {
        changed_.wait_for(lock, absl::ToChronoNanoseconds(next - now));
      }
      continue;
    }
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
    lock.unlock();
    for (const auto& g : due) {
      g->Rebuild();
    }
    lock.lock();
    rebuilds_ += due.size();
  }
}

}  // namespace aside::server
