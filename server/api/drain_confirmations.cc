#include "server/api/drain_confirmations.h"

#include <algorithm>
#include <tuple>
#include <utility>

namespace aside::server {

const char* DrainConfirmations::EdgeName(Edge edge) {
  switch (edge) {
    case Edge::kWatch:
      return "watch";
    case Edge::kXds:
      return "xds";
    case Edge::kGrpclb:
      return "grpclb";
  }
  return "unknown";
}

void DrainConfirmations::CollectLocked(
    const GroupState& state, uint64_t from, uint64_t to,
    std::vector<std::shared_ptr<Waiter>>* out) {
  for (const std::shared_ptr<Waiter>& w : state.waiters) {
    const uint64_t g = w->generation();
    if (g > from && g <= to) {
      out->push_back(w);
    }
  }
}

void DrainConfirmations::EraseIfEmptyLocked(const std::string& group) {
  auto it = groups_.find(group);
  if (it != groups_.end() && it->second.subs.empty() &&
      it->second.waiters.empty()) {
    groups_.erase(it);
  }
}

void DrainConfirmations::Subscribe(const std::string& group, uint64_t id,
                                   Subscriber who) {
  aside::MutexLock lock(&mu_);
  Sub& sub = groups_[group].subs[id];
  sub.who = std::move(who);
}

void DrainConfirmations::Unsubscribe(const std::string& group, uint64_t id) {
  std::vector<std::shared_ptr<Waiter>> tell;
  {
    aside::MutexLock lock(&mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) {
      return;
    }
    auto sub = it->second.subs.find(id);
    if (sub == it->second.subs.end()) {
      return;
    }
    // A subscriber that leaves no longer holds any wait up.
    CollectLocked(it->second, sub->second.confirmed, UINT64_MAX, &tell);
    it->second.subs.erase(sub);
    EraseIfEmptyLocked(group);
  }
  for (const std::shared_ptr<Waiter>& w : tell) {
    w->Changed();
  }
}

void DrainConfirmations::Confirm(const std::string& group, uint64_t id,
                                 uint64_t generation) {
  std::vector<std::shared_ptr<Waiter>> tell;
  {
    aside::MutexLock lock(&mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) {
      return;
    }
    auto sub = it->second.subs.find(id);
    if (sub == it->second.subs.end() || sub->second.confirmed >= generation) {
      return;
    }
    CollectLocked(it->second, sub->second.confirmed, generation, &tell);
    sub->second.confirmed = generation;
  }
  for (const std::shared_ptr<Waiter>& w : tell) {
    w->Changed();
  }
}

std::vector<DrainConfirmations::Pending> DrainConfirmations::PendingFor(
    const std::string& group, uint64_t generation) const {
  std::vector<Pending> out;
  aside::MutexLock lock(&mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    return out;
  }
  for (const auto& [id, sub] : it->second.subs) {
    if (sub.confirmed < generation) {
      out.push_back({sub.who, sub.confirmed});
    }
  }
  std::sort(out.begin(), out.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.who.edge, a.who.peer, a.who.name) <
           std::tie(b.who.edge, b.who.peer, b.who.name);
  });
  return out;
}

size_t DrainConfirmations::PendingCount(const std::string& group,
                                        uint64_t generation) const {
  aside::MutexLock lock(&mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    return 0;
  }
  size_t n = 0;
  for (const auto& [id, sub] : it->second.subs) {
    n += sub.confirmed < generation ? 1 : 0;
  }
  return n;
}

size_t DrainConfirmations::subscribers(const std::string& group) const {
  aside::MutexLock lock(&mu_);
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : it->second.subs.size();
}

void DrainConfirmations::AddWaiter(const std::string& group,
                                   std::shared_ptr<Waiter> waiter) {
  aside::MutexLock lock(&mu_);
  groups_[group].waiters.push_back(std::move(waiter));
  waiters_.fetch_add(1, std::memory_order_relaxed);
}

void DrainConfirmations::RemoveWaiter(const std::string& group,
                                      const Waiter* waiter) {
  std::shared_ptr<Waiter> last;  // released after the lock
  aside::MutexLock lock(&mu_);
  auto it = groups_.find(group);
  if (it == groups_.end()) {
    return;
  }
  auto& waiters = it->second.waiters;
  for (auto w = waiters.begin(); w != waiters.end(); ++w) {
    if (w->get() == waiter) {
      last = std::move(*w);
      waiters.erase(w);
      waiters_.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  }
  EraseIfEmptyLocked(group);
}

void DrainConfirmations::Touch(const std::string& group) {
  if (waiters_.load(std::memory_order_relaxed) == 0) {
    return;
  }
  std::vector<std::shared_ptr<Waiter>> tell;
  {
    aside::MutexLock lock(&mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) {
      return;
    }
    tell = it->second.waiters;
  }
  for (const std::shared_ptr<Waiter>& w : tell) {
    w->Changed();
  }
}

}  // namespace aside::server
