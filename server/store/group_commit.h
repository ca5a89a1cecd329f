// Group commit: concurrent writes to the store share one commit.
//
// A writer hands its write to Commit() and blocks until the store committed
// it (or refused it). While no commit is in flight, the writer makes one at
// once with whatever is queued, its own write included: a lone writer waits
// for nothing but its own commit (no timer, no added latency). While a
// commit is in flight, arriving writes queue; when it returns, one of the
// queued writers takes everything queued (up to kMaxBatch writes and about
// kMaxBatchBytes of definitions) into the next Store::Commit. So a batch is
// as large as the store is slow, and the store sees one transaction where it
// saw one per write.
//
// Each write keeps its own answer: Store::Commit decides every write on its
// own (a write whose condition fails is ABORTED, the others commit), and a
// writer returns only once the commit holding its write returned, so an
// acknowledged write is as durable as one committed alone. Two writes to one
// group never share a batch (the later one waits for the next): a batch
// holds distinct keys, as one etcd Txn must, and their order is kept.
// (Admin writes of one group fold before they get here: StoreSync::Mutate
// makes them one write.)
//
// Threads: Commit from any thread; the store is called by one writer at a
// time, without mu_ held.
#ifndef ASIDE_SERVER_STORE_GROUP_COMMIT_H_
#define ASIDE_SERVER_STORE_GROUP_COMMIT_H_

#include <prometheus/histogram.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "lib/sync.h"
#include "server/store/store.h"

namespace aside::server {

class GroupCommitter {
 public:
  // etcd's default --max-txn-ops is 128.
  static constexpr size_t kMaxBatch = 128;
  // Below etcd's default --max-request-bytes (1.5 MiB) with room for keys
  // and framing; a single larger write still goes (alone).
  static constexpr size_t kMaxBatchBytes = size_t{1} << 20;

  // `writes_per_commit` (may be null) observes each commit's batch size.
  explicit GroupCommitter(Store* store,
                          prometheus::Histogram* writes_per_commit = nullptr)
      : store_(store), writes_per_commit_(writes_per_commit) {}
  GroupCommitter(const GroupCommitter&) = delete;
  GroupCommitter& operator=(const GroupCommitter&) = delete;

  // Commits `write` (in a batch with others when they arrive meanwhile) and
  // returns what Store::Commit answered for it.
  absl::StatusOr<int64_t> Commit(StoreWrite write);

  struct Stats {
    uint64_t commits = 0;  // Store::Commit calls
    uint64_t writes = 0;   // writes they carried
    size_t largest_batch = 0;
    size_t queued = 0;  // writes waiting for a commit now
  };
  Stats stats() const;

 private:
  struct Pending {
    StoreWrite write;
    size_t bytes = 0;
    std::optional<absl::StatusOr<int64_t>> result;
  };
  // Takes the next batch off the queue: queued order, distinct names,
  // within the bounds; never empty while the queue is not.
  std::vector<Pending*> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* const store_;
  prometheus::Histogram* const writes_per_commit_;
  mutable aside::Mutex mu_;
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mu_);
  bool committing_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_GROUP_COMMIT_H_
