// aside::ClientGroup: one group a Client subscribed to, its local table
// and the lock-free pick path over it.
#ifndef ASIDE_CLIENT_CLIENT_GROUP_H_
#define ASIDE_CLIENT_CLIENT_GROUP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/pick_handle.h"
#include "client/table_cache.h"
#include "client/watched_table.h"
#include "lib/load/load_tracker.h"
#include "lib/snapshot_cell.h"
#include "lib/sync.h"
#include "lib/table.h"

namespace aside {

class Client;

// One subscribed group. Owned by its Client, valid for the Client's
// lifetime. Pick() is lock-free and allocation-free once the calling thread
// has seen the current table: a per-thread cache holds the table and is
// refreshed only when the group's version counter moves (one acquire load
// per pick), so picks never touch a shared reference count.
class ClientGroup {
 public:
  ClientGroup(const ClientGroup&) = delete;
  ClientGroup& operator=(const ClientGroup&) = delete;
  ~ClientGroup();

  const std::string& name() const { return name_; }

  // Picks a backend with the table's policy; `key` is for hash policies.
  // Errors: UNAVAILABLE when nothing can be picked (naming the group and its
  // counts) or when no table arrived within wait_for_table (on the client's
  // clock); NOT_FOUND (the code the server's GroupRemoved carries) while the
  // server reports the group absent and there is no table or fallback;
  // INVALID_ARGUMENT for an invalid group name.
  absl::StatusOr<aside::PickHandle> Pick(absl::string_view key = {});

  // The table picks use now (null: none yet; the fallback's has generation 0;
  // a cached table has the generation it was written with).
  TableConstPtr table() const;
  // True while picks use a table read from the table cache
  // (ClientOptions::cache_dir): no server's table has arrived yet.
  bool from_cache() const;
  // Generation of the last table received from a server (0: none).
  uint64_t generation() const {
    return generation_.load(std::memory_order_acquire);
  }
  // server_id of that table.
  std::string server_id() const;
  // Waits until generation() >= `generation`, for at most `timeout` of real
  // time (a bound on the caller's wait, not on the injected clock); true on
  // success.
  bool WaitForGeneration(uint64_t generation, absl::Duration timeout) const;
  // True while the server reports the group absent (unknown, or deleted);
  // a table held keeps serving. Cleared when its table arrives.
  bool removed() const;
  // Updates rejected by validation so far.
  uint64_t rejected_updates() const {
    return rejected_.load(std::memory_order_relaxed);
  }

 private:
  friend class Client;
  // `cached`: the group's usable cache file, if any; it serves from the
  // start when there is a fallback list or `cache_deadline_nanos` has
  // passed, else from ServeCache().
  ClientGroup(Client* client, std::string name, absl::Status name_status,
              std::vector<std::string> fallback, int64_t deadline_nanos,
              int64_t cache_deadline_nanos,
              std::optional<client_internal::CachedTable> cached);

  // The calling thread's hold on the current snapshot.
  client_internal::SnapshotHold* Local() const;
  client_internal::SnapshotHold* Refresh(uint64_t version) const;
  absl::StatusOr<aside::PickHandle> PickFrom(
      client_internal::SnapshotHold* hold, absl::string_view key);
  absl::StatusOr<aside::PickHandle> PickWithoutTable(absl::string_view key);
  // The first choice is locally ejected: another one, if any is not.
  static uint32_t AvoidEjected(const client_internal::GroupSnapshot& snapshot,
                               PickRequest request, uint32_t first,
                               int64_t now);

  // Watcher thread: publishes a table received from a server (picks use it
  // at once), then, once the stub is done with it, makes its generation
  // visible through generation() and WaitForGeneration.
  void PublishTable(TableConstPtr table, const std::string& server_id);
  void MarkGeneration(uint64_t generation);
  void Publish(std::shared_ptr<const client_internal::GroupSnapshot> next);
  // A snapshot of `table` (the fallback's or the cached one) with counters
  // for its members.
  std::shared_ptr<client_internal::GroupSnapshot> SnapshotLocked(
      TableConstPtr table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Any thread: publishes the cached table unless a server's table or the
  // cached one already is; true when it did. Takes the client's lock, then
  // mu_.
  bool ServeCache();
  // Whether a cached table waits to be served (cache_deadline_nanos_).
  bool CachePending() const;

  // The watcher thread: writes the table just applied to the cache file
  // when its generation or server differ from the last written.
  void WriteCache(const std::string& server_id);

  Client* const client_;
  const std::string name_;
  const absl::Status name_status_;
  const uint64_t id_;
  const int64_t deadline_nanos_;
  // The client's clock, or null for the system clock (read through
  // pick_clock.h).
  const Clock* const pick_clock_;

  // Pick path.
  std::atomic<uint64_t> version_{1};
  SnapshotCell<client_internal::GroupSnapshot> cell_;

  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> rejected_{0};
  LoadTracker loads_;
  TableConstPtr fallback_;
  std::vector<std::string> fallback_addresses_;
  // The table cache, fixed at creation: the table read from the file (null:
  // none usable), when it was written, its file, and why a file that
  // decoded was still unusable (its table failed Table::Create).
  const int64_t cache_deadline_nanos_;
  TableConstPtr cached_;
  absl::Time cache_written_;
  std::string cache_path_;
  absl::Status cache_error_;

  // Watcher thread only.
  WatchedTable watched_;
  bool need_full_ = false;
  // What the cache file holds, as far as this stub wrote it.
  uint64_t written_generation_ = 0;
  std::string written_server_id_;
  bool write_failing_ = false;

  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string,
                      std::shared_ptr<client_internal::BackendStats>>
      stats_ ABSL_GUARDED_BY(mu_);
  std::string server_id_ ABSL_GUARDED_BY(mu_);
  bool removed_ ABSL_GUARDED_BY(mu_) = false;
  // What picks fail with while the server reports the group absent and
  // there is neither a table nor a fallback (OK otherwise).
  absl::Status missing_ ABSL_GUARDED_BY(mu_);
  uint64_t published_version_ ABSL_GUARDED_BY(mu_) = 1;
  // A server's table was published (the cached one never is after that);
  // the cached table was published.
  bool from_server_ ABSL_GUARDED_BY(mu_) = false;
  bool cache_served_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace aside

#endif  // ASIDE_CLIENT_CLIENT_GROUP_H_
