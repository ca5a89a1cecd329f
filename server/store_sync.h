// Keeps the GroupRegistry's store-owned groups equal to what the Store holds
// (server/store.h), whichever store runs: the snapshot at start, the change
// feed after it (in revision order), a fresh snapshot after a resync; and
// Admin writes, which go to the store first and are applied here once it
// committed them.
//
// Revisions. For every stored name it remembers the revision last applied
// (deletions included), and applies a change only when it is newer: the
// change feed and the Admin thread that wrote a change may both deliver it,
// in either order, and an older one never overwrites a newer one. Admin
// writes are conditioned on that revision, so a replica whose view is behind
// gets ABORTED instead of overwriting a change it has not seen.
//
// Generations (store.h): with a store whose generations derive from
// revisions, a change at revision R publishes the group at R << 20 on every
// replica, and its removal carries R << 20.
//
// Groups the config file declares win over stored groups of the same name
// (logged as state.group_shadowed). A stored definition that does not
// convert or validate is logged (store.bad_value) and counted
// (aside_store_errors_total{kind="bad_value"}); the group keeps its last
// good definition.
//
// Threads: any thread; mu_ serialises applications (it is taken before the
// registry's and the groups' locks, never after).
#ifndef ASIDE_SERVER_STORE_SYNC_H_
#define ASIDE_SERVER_STORE_SYNC_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/sync.h"
#include "server/group_registry.h"
#include "server/metrics.h"
#include "server/store.h"

namespace aside::server {

class StoreSync {
 public:
  // `metrics` may be null.
  StoreSync(Store* store, GroupRegistry* groups, Metrics* metrics);

  Store& store() { return *store_; }

  // Applies the snapshot a server starts from. With `strict` a group that
  // does not load fails the start (naming the store); otherwise it is
  // logged and counted.
  absl::Status ApplyInitial(const StoreSnapshot& snapshot, bool strict);
  // Starts following the store's changes after `revision` (nullopt: no
  // snapshot was applied; the store loads one when it answers).
  void Follow(std::optional<int64_t> revision);
  void StopFollowing();

  // The feed (public for tests): a snapshot replaces every stored group.
  void ApplySnapshot(const StoreSnapshot& snapshot);
  void ApplyChanges(const std::vector<StoreChange>& changes);

  // Admin writes: `spec` is validated and store-owned. Writes it to the
  // store conditioned on the revision this replica last applied, then
  // applies it. Returns the group as published (ABORTED, UNAVAILABLE or the
  // apply error otherwise; on error nothing changed here).
  absl::StatusOr<GroupPtr> Put(GroupSpec spec);
  // Deletes a store-owned group the same way; returns the generation of the
  // removal.
  absl::StatusOr<uint64_t> Delete(const std::string& name);

  // The revision last applied for `name` (0: none, or deleted).
  int64_t revision(const std::string& name) const;

 private:
  struct Applied {
    int64_t revision = 0;
    bool present = false;
  };
  // Applies one change if it is newer than what was applied for its name.
  absl::Status ApplyLocked(const StoreChange& change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t GenerationFor(int64_t revision) const;
  void BadValue(const std::string& name, int64_t revision,
                absl::string_view error);

  Store* const store_;
  GroupRegistry* const groups_;
  Metrics* const metrics_;
  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, Applied> applied_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_SYNC_H_
