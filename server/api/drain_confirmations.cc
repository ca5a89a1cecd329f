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

DrainConfirmations::SubscriptionPtr DrainConfirmations::Subscribe(
    const std::string& group, Subscriber who) {
  aside::MutexLock lock(&mu_);
  GroupState& state = groups_[group];
  const uint64_t id = ++next_id_;
  Sub& sub = state.subs[id];
  sub.who = std::move(who);
  sub.handle =
      SubscriptionPtr(new Subscription(this, group, id, state.waiting));
  return sub.handle;
}

void DrainConfirmations::Unsubscribe(const Subscription& handle) {
  std::vector<std::shared_ptr<Waiter>> tell;
  {
    aside::MutexLock lock(&mu_);
    auto it = groups_.find(handle.group_);
    if (it == groups_.end()) {
      return;
    }
    auto sub = it->second.subs.find(handle.id_);
    if (sub == it->second.subs.end()) {
      return;
    }
    // A subscriber that leaves no longer holds any wait up. A Confirm
    // racing with this may have stored a generation whose waiters it has
    // not told yet; it tells them without finding the subscriber (Reached).
    CollectLocked(it->second, handle.confirmed(), UINT64_MAX, &tell);
    it->second.subs.erase(sub);
    EraseIfEmptyLocked(handle.group_);
  }
  for (const std::shared_ptr<Waiter>& w : tell) {
    w->Changed();
  }
}

void DrainConfirmations::Subscription::Confirm(uint64_t generation) {
  uint64_t old = confirmed_.load(std::memory_order_relaxed);
  do {
    if (old >= generation) {
      return;
    }
  } while (!confirmed_.compare_exchange_weak(
      old, generation, std::memory_order_seq_cst, std::memory_order_relaxed));
  // Stored before this read, and AddWaiter counts before its waiter looks:
  // a waiter this misses sees the generation just stored.
  if (waiting_->load(std::memory_order_seq_cst) == 0) {
    return;
  }
  owner_->Reached(group_, old, generation);
}

void DrainConfirmations::Reached(const std::string& group, uint64_t from,
                                 uint64_t to) {
  std::vector<std::shared_ptr<Waiter>> tell;
  {
    aside::MutexLock lock(&mu_);
    // Whether or not the subscriber is still there: one that left told
    // the waiters above what it had confirmed then, which may include
    // this generation (Unsubscribe).
    auto it = groups_.find(group);
    if (it == groups_.end()) {
      return;
    }
    CollectLocked(it->second, from, to, &tell);
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
    const uint64_t confirmed = sub.handle->confirmed();
    if (confirmed < generation) {
      out.push_back({sub.who, confirmed});
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
    n += sub.handle->confirmed() < generation ? 1 : 0;
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
  GroupState& state = groups_[group];
  state.waiters.push_back(std::move(waiter));
  // Before the waiter first looks (PendingCount, after this returns): a
  // Confirm that stores after that look sees this count and tells it.
  state.waiting->fetch_add(1, std::memory_order_seq_cst);
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
      it->second.waiting->fetch_sub(1, std::memory_order_seq_cst);
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
