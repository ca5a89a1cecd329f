// Keeps the GroupRegistry's store-owned groups equal to what the Store holds
// (server/store/store.h), whichever store runs: the snapshot at start, the
// change feed after it (in revision order), a fresh snapshot after a resync;
// and Admin writes, which go to the store first and are applied here once it
// committed them.
//
// Revisions. For every stored name it remembers the revision last applied
// (deletions included), and applies a change only when it is newer: the
// change feed and the Admin thread that wrote a change may both deliver it,
// in either order, and an older one never overwrites a newer one. Beside
// each revision it keeps the definition stored at it, so that an Admin
// read-modify-write (Mutate) takes the two as one pair and conditions its
// write on the very revision it read.
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
// Writes go through a GroupCommitter (server/store/group_commit.h): Admin
// writes made at the same time, to different groups, share one store
// commit, and each is applied and answered once its own commit returned.
//
// Writes to one group fold. Mutate serialises the read-modify-writes of
// each name: while one is in flight, later ones wait in arrival order, and
// when it returns the next waiter leads a round for everyone waiting. A
// round runs the first waiting edit on the group as stored, then, when
// that edit commutes (kRetryOnConflict, no expected_revision, not a
// delete), every commuting edit queued behind it, each on the result of
// the one before, and writes the result once: one definition, one
// commit, one generation for all of them. Each is answered once that
// commit returned, with its revision and the group as published. A round
// stops before an edit that does not commute (it leads the next round,
// alone), and an edit that fails or deletes on the folded value waits for
// the next round, where it runs first on the group as stored: so a
// refusal (NOT_FOUND, ALREADY_EXISTS, a limit) is always true of a stored
// version, never of a value only folding produced. Edits of one round were
// all waiting at once, so any order of them is one a caller could have
// seen; the history of stored versions stays linearisable, with several
// acknowledged writes at one revision.
//
// Threads: any thread; mu_ serialises applications (it is taken before the
// registry's and the groups' locks, never after); fold_mu_ guards who waits
// and who leads, and is never held while a round runs.
#ifndef ASIDE_SERVER_STORE_STORE_SYNC_H_
#define ASIDE_SERVER_STORE_STORE_SYNC_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "lib/sync.h"
#include "server/base/metrics.h"
#include "server/groups/group_registry.h"
#include "server/store/group_commit.h"
#include "server/store/store.h"

namespace aside::server {

class StoreSync {
 public:
  // `metrics` may be null.
  StoreSync(Store* store, GroupRegistry* groups, Metrics* metrics);

  Store& store() { return *store_; }
  const GroupCommitter& committer() const { return committer_; }

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

  // Admin writes are read-modify-writes of one stored group. `edit` gets
  // the group's definition as stored at one revision (nullptr: absent) and
  // returns the new definition, validated and store-owned (nullopt: delete
  // the group), or an error to answer with. The write is conditioned on
  // exactly the revision `edit` read, so it is never applied over a value it
  // did not read:
  //   - the first read is this replica's view; when `edit` refuses it with
  //     NOT_FOUND or ALREADY_EXISTS, or `expected_revision` is newer, the
  //     group is read from the store itself and `edit` runs again, so a
  //     write made through another replica is seen, not contradicted;
  //   - when the conditional write loses (the store moved on), with
  //     kRetryOnConflict `edit` runs again on the value read from the
  //     store, at most kMaxWriteAttempts times in all; with kAbortOnConflict
  //     (or after the last attempt) the answer is ABORTED naming the
  //     revision;
  //   - `expected_revision` (0: none) is the caller's own precondition: the
  //     write is made only on the definition stored at that revision,
  //     ABORTED otherwise.
  // `edit` may run more than once, on another thread (the round's leader,
  // while this caller waits), and must not have side effects. The result
  // is the group as published (null after a delete), the generation (of a
  // delete) and the store revision of the write; an edit folded with
  // others (see the file comment) shares both with them.
  enum class OnConflict { kRetryOnConflict, kAbortOnConflict };
  static constexpr int kMaxWriteAttempts = 8;
  using Edit = std::function<absl::StatusOr<std::optional<GroupSpec>>(
      const GroupSpec* current)>;
  struct Written {
    GroupPtr group;
    // The definition this write committed (the group may already serve a
    // later one, written through another replica meanwhile).
    std::shared_ptr<const GroupSpec> spec;
    uint64_t generation = 0;
    int64_t revision = 0;
  };
  absl::StatusOr<Written> Mutate(const std::string& name,
                                 int64_t expected_revision,
                                 OnConflict on_conflict, const Edit& edit);

  // The revision last applied for `name` (0: none, or deleted).
  int64_t revision(const std::string& name) const;

  struct FoldStats {
    uint64_t rounds = 0;  // rounds that wrote (or tried to)
    uint64_t folded = 0;  // edits written in a round after its first
    size_t waiting = 0;   // Mutate calls waiting for a round now
  };
  FoldStats fold_stats() const;

  // Most edits one round folds into one write.
  static constexpr size_t kMaxFold = 256;

 private:
  // One Mutate call, waiting for (or in) a round.
  struct Pending {
    int64_t expected_revision = 0;
    OnConflict on_conflict = OnConflict::kAbortOnConflict;
    const Edit* edit = nullptr;
    std::optional<absl::StatusOr<Written>> result;
    // May run on the result of another edit (see the file comment).
    bool commutes() const {
      return on_conflict == OnConflict::kRetryOnConflict &&
             expected_revision == 0;
    }
  };
  // The calls of one name: waiting in arrival order, and whether a round
  // is running.
  struct Folding {
    std::deque<Pending*> queue;
    bool running = false;
    size_t callers = 0;  // inside Mutate for this name
  };
  // Runs one round for `round` (a prefix of the queue): the answers of
  // those it wrote or refused (always the first); the others have none and
  // wait for the next round.
  std::vector<std::optional<absl::StatusOr<Written>>> RunRound(
      const std::string& name, const std::vector<Pending*>& round);
  struct Applied {
    int64_t revision = 0;
    bool present = false;
    // The definition stored at `revision`, as validated (the last good one
    // after a bad value); null when absent or never converted.
    std::shared_ptr<const GroupSpec> spec;
  };
  // A definition and the store revision it was read at.
  struct Read {
    std::shared_ptr<const GroupSpec> spec;
    int64_t revision = 0;
  };
  Read ReadLocal(const std::string& name) const;
  absl::StatusOr<Read> ReadFromStore(const std::string& name) const;
  // Writes `next` (nullopt: a delete) conditioned on `expected` and applies
  // it here once committed.
  absl::StatusOr<Written> Write(const std::string& name,
                                std::optional<GroupSpec> next,
                                int64_t expected);
  // Applies one change if it is newer than what was applied for its name.
  // `validated`: the definition as this process validated it before
  // writing it (an Admin write), used instead of converting the stored one
  // again.
  absl::Status ApplyLocked(const StoreChange& change,
                           const GroupSpec* validated = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t GenerationFor(int64_t revision) const;
  void BadValue(const std::string& name, int64_t revision,
                absl::string_view error);

  Store* const store_;
  GroupCommitter committer_;
  GroupRegistry* const groups_;
  Metrics* const metrics_;
  mutable aside::Mutex mu_;
  absl::flat_hash_map<std::string, Applied> applied_ ABSL_GUARDED_BY(mu_);
  mutable aside::Mutex fold_mu_;
  // Stable addresses: a waiter's condition refers to its name's entry.
  absl::node_hash_map<std::string, Folding> folding_ ABSL_GUARDED_BY(fold_mu_);
  FoldStats fold_stats_ ABSL_GUARDED_BY(fold_mu_);
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_STORE_SYNC_H_
