#include "server/groups/rebuild_scheduler.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "lib/thread_name.h"
#include "server/groups/group_registry.h"

namespace aside::server {

RebuildScheduler::RebuildScheduler()
    : RebuildScheduler(&SystemClock::Get(), Mode::kThreaded) {}

RebuildScheduler::RebuildScheduler(const Clock* clock, Mode mode)
    : clock_(clock) {
  if (mode == Mode::kThreaded) {
    thread_ = std::thread([this] {
      NameThisThread("aside-rebuild");
      Run();
    });
  }
}

RebuildScheduler::RebuildScheduler(EventLoop* loop)
    : clock_(&SystemClock::Get()) {
  timer_ = std::make_unique<LoopTimer>(loop, [this](bool /*due*/) {
    RunDue();
    if (const std::optional<int64_t> next = NextDue(); next.has_value()) {
      timer_->RunAfter(absl::Nanoseconds(*next - clock_->NowNanos()));
    }
  });
}

RebuildScheduler::~RebuildScheduler() {
  if (timer_ != nullptr) {
    timer_->Stop();
  }
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
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
    MutexLock lock(&mu_);
    auto [it, inserted] =
        pending_.try_emplace(group.get(), Pending{group, due});
    if (!inserted) {
      if (due >= it->second.due) {
        return;  // folded into the rebuild already scheduled
      }
      it->second.due = due;
    }
    ++schedule_changes_;  // wakes the thread if it sleeps past `due`
  }
  if (timer_ != nullptr) {
    timer_->RunAfter(absl::Nanoseconds(due - now));  // or earlier
  }
}

uint64_t RebuildScheduler::rebuilds() const {
  MutexLock lock(&mu_);
  return rebuilds_;
}

std::optional<int64_t> RebuildScheduler::NextDue() const {
  MutexLock lock(&mu_);
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
    MutexLock lock(&mu_);
    due = TakeDueLocked(clock_->NowNanos());
  }
  for (const auto& g : due) {
    g->Rebuild();
  }
  MutexLock lock(&mu_);
  rebuilds_ += due.size();
  return due.size();
}

void RebuildScheduler::Run() {
  mu_.Lock();
  while (!stop_) {
    int64_t next = std::numeric_limits<int64_t>::max();
    for (const auto& [key, p] : pending_) {
      next = std::min(next, p.due);
    }
    const int64_t now = clock_->NowNanos();
    if (next > now) {
      // Until the earliest rebuild is due, or a Schedule or the destructor
      // changes what to wait for.
      const uint64_t seen = schedule_changes_;
      auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || schedule_changes_ != seen;
      };
      if (next == std::numeric_limits<int64_t>::max()) {
        mu_.Await(Cond(&changed));
      } else {
        mu_.AwaitWithTimeout(Cond(&changed), absl::Nanoseconds(next - now));
      }
      continue;
    }
    std::vector<std::shared_ptr<Group>> due = TakeDueLocked(now);
    mu_.Unlock();
    for (const auto& g : due) {
      g->Rebuild();
    }
    mu_.Lock();
    rebuilds_ += due.size();
  }
  mu_.Unlock();
}

}  // namespace aside::server
