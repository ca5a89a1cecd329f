#include "server/store/group_commit.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace aside::server {

std::vector<GroupCommitter::Pending*> GroupCommitter::TakeBatchLocked() {
  std::vector<Pending*> batch;
  absl::flat_hash_set<std::string> names;
  size_t bytes = 0;
  for (auto it = queue_.begin();
       it != queue_.end() && batch.size() < kMaxBatch;) {
    Pending* p = *it;
    if (!batch.empty() && bytes + p->bytes > kMaxBatchBytes) {
      break;
    }
    if (!names.insert(p->write.name).second) {
      // A second write to a group already in the batch: it (and so every
      // later write to that group) waits for the next commit.
      ++it;
      continue;
    }
    bytes += p->bytes;
    batch.push_back(p);
    it = queue_.erase(it);
  }
  return batch;
}

absl::StatusOr<int64_t> GroupCommitter::Commit(StoreWrite write) {
  Pending mine;
  mine.bytes =
      write.name.size() +
      (write.definition.has_value() ? write.definition->ByteSizeLong() : 0);
  mine.write = std::move(write);
  mu_.Lock();
  queue_.push_back(&mine);
  for (;;) {
    mu_.Await([&] {
      mu_.AssertHeld();
      return mine.result.has_value() || !committing_;
    });
    if (mine.result.has_value()) {
      break;
    }
    // No commit in flight: this writer makes the next one, for everything
    // queued (its own write is in it unless the queue holds more than one
    // batch, or an earlier write to the same group; then it goes again).
    std::vector<Pending*> batch = TakeBatchLocked();
    committing_ = true;
    ++stats_.commits;
    stats_.writes += batch.size();
    stats_.largest_batch = std::max(stats_.largest_batch, batch.size());
    mu_.Unlock();
    if (writes_per_commit_ != nullptr) {
      writes_per_commit_->Observe(static_cast<double>(batch.size()));
    }
    std::vector<StoreWrite> writes;
    writes.reserve(batch.size());
    for (Pending* p : batch) {
      writes.push_back(std::move(p->write));  // its writer is waiting
    }
    std::vector<absl::StatusOr<int64_t>> results = store_->Commit(writes);
    mu_.Lock();
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->result =
          i < results.size()
              ? std::move(results[i])
              : absl::InternalError("store commit returned too few results");
    }
    committing_ = false;
  }
  absl::StatusOr<int64_t> out = *std::move(mine.result);
  mu_.Unlock();
  return out;
}

GroupCommitter::Stats GroupCommitter::stats() const {
  aside::MutexLock lock(&mu_);
  Stats out = stats_;
  out.queued = queue_.size();
  return out;
}

}  // namespace aside::server
