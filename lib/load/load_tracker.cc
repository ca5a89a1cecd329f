#include "lib/load/load_tracker.h"

namespace aside {

std::shared_ptr<BackendLoad> LoadTracker::GetOrCreate(
    absl::string_view address) {
  aside::MutexLock lock(&mu_);
  auto [it, inserted] = loads_.try_emplace(address);
  if (inserted) {
    it->second = std::make_shared<BackendLoad>(
        clock_ != nullptr ? clock_->NowNanos() : 0);
  }
  return it->second;
}

void LoadTracker::Prune() {
  aside::MutexLock lock(&mu_);
  absl::erase_if(
      loads_, [](const auto& entry) { return entry.second.use_count() == 1; });
}

size_t LoadTracker::size() const {
  aside::MutexLock lock(&mu_);
  return loads_.size();
}

}  // namespace aside
