// Where Admin-created groups, the generation floor and the sticky session
// key live: one interface, two implementations (DESIGN.md §11).
//
//   sqlite (server/store/sqlite_store.h): one replica's file under the state
//     directory; the default. No revisions, no change feed.
//   etcd (server/store/etcd_store.h): one store for the whole fleet. Every
//   write is
//     a transaction conditioned on the revision the writer saw; every replica
//     follows the prefix in revision order; table generations of stored
//     groups derive from etcd revisions (GenerationForRevision), so they are
//     identical on every replica for the same store state.
//
// The rest of the server talks to this interface only (StoreSync applies
// what it returns to the GroupRegistry; AdminService writes through
// StoreSync), never to one implementation.
//
// Threads: every method may be called from any thread. Follow's handlers
// run on a thread of the store's, one call at a time, in revision order.
#ifndef ASIDE_SERVER_STORE_STORE_H_
#define ASIDE_SERVER_STORE_STORE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "aside/v1/admin.pb.h"

namespace aside::server {

// One stored group definition and the store revision that last wrote it (0
// for stores without revisions).
struct StoredGroup {
  v1::Group definition;
  int64_t revision = 0;
};

// One change to a stored group, at `revision`. Without a definition the
// group was deleted, or (bad_value) its stored value does not parse: then it
// keeps serving its last good definition, and the revision is still taken
// so that an Admin write can replace the bad value.
struct StoreChange {
  std::string name;
  std::optional<v1::Group> definition;
  int64_t revision = 0;
  bool bad_value = false;
};

struct StoreSnapshot {
  // Sorted by name.
  std::vector<StoredGroup> groups;
  // Names whose stored value does not parse, with their revisions (logged
  // and counted by the store; not served).
  std::vector<StoredGroup> bad;
  // Every generation handed out before is below this (stores without
  // revisions).
  uint64_t generation_floor = 0;
  // Empty when none is stored yet.
  std::string session_key;
  // The revision every group above was read at (0: no revisions).
  int64_t revision = 0;
};

// What metrics, logs and ListTargets say about the store.
// One write of a batch (Store::Commit): `definition` stored under its name,
// or, without one, `name` deleted; either on the condition PutGroup and
// DeleteGroup state for `expected_revision`.
struct StoreWrite {
  std::string name;
  std::optional<v1::Group> definition;
  int64_t expected_revision = 0;
};

struct StoreState {
  std::string type;      // "sqlite" or "etcd"
  std::string location;  // the database path, or the endpoints
  bool up = true;        // reachable (following its changes, for etcd)
  int64_t revision = 0;  // the last revision applied (0: none)
  std::string last_error;
  absl::Time last_error_at = absl::InfinitePast();
};

class Store {
 public:
  virtual ~Store() = default;

  // "sqlite" or "etcd".
  virtual std::string type() const = 0;
  // The database path or the endpoints, for logs and errors.
  virtual std::string location() const = 0;

  // Reads everything stored, as of one revision.
  virtual absl::StatusOr<StoreSnapshot> Load() = 0;

  // The group as stored now, read from the store itself (for etcd a
  // linearizable read, newer than anything the feed delivered before the
  // call): its definition and the revision that wrote it, or no definition
  // and revision 0 when it is absent. A value that does not parse comes
  // back as bad_value with its revision. For a read-modify-write whose
  // local view may be behind the store.
  virtual absl::StatusOr<StoreChange> ReadGroup(const std::string& name) = 0;

  // Writes a group definition if the group's stored revision is still
  // `expected_revision` (0: it must not exist). Returns the revision of the
  // write (0 for stores without revisions). ABORTED when another writer got
  // there first; UNAVAILABLE naming the store when it cannot be reached. On
  // success the write is durable.
  virtual absl::StatusOr<int64_t> PutGroup(const v1::Group& definition,
                                           int64_t expected_revision) = 0;
  // Deletes a group on the same condition.
  virtual absl::StatusOr<int64_t> DeleteGroup(const std::string& name,
                                              int64_t expected_revision) = 0;
  // Commits several writes to distinct groups together, as one store
  // transaction where the store has them (one SQLite transaction, one etcd
  // Txn), so that they cost one commit. Each write still succeeds or fails
  // on its own, all or nothing: one whose condition no longer holds is
  // ABORTED and changes nothing, and the others commit. Returns one result
  // per write, in order, as PutGroup or DeleteGroup would; every write
  // that succeeded is durable. The default makes them one at a time.
  virtual std::vector<absl::StatusOr<int64_t>> Commit(
      const std::vector<StoreWrite>& writes) {
    std::vector<absl::StatusOr<int64_t>> out;
    out.reserve(writes.size());
    for (const StoreWrite& w : writes) {
      out.push_back(w.definition.has_value()
                        ? PutGroup(*w.definition, w.expected_revision)
                        : DeleteGroup(w.name, w.expected_revision));
    }
    return out;
  }
  // Raises the generation floor (never lowers it); a no-op for stores whose
  // generations derive from revisions.
  virtual absl::Status RaiseGenerationFloor(uint64_t floor) = 0;
  // The fleet's session key: the stored one, or `proposed` once stored (the
  // first writer wins; every later caller gets the winner's).
  virtual absl::StatusOr<std::string> SessionKey(
      const std::string& proposed) = 0;

  // Whether stored groups take their generations from store revisions
  // (GenerationForRevision) rather than from the process's own counter.
  virtual bool revision_generations() const = 0;
  // Whether the server may start while the store is unreachable (it then
  // serves the config file's groups and Follow loads a snapshot once the
  // store answers); otherwise a failed Load stops the start.
  virtual bool starts_unavailable() const = 0;

  struct FeedHandlers {
    // Everything stored, replacing what was applied before (after the
    // history the feed needed was compacted, or the first snapshot when
    // the server started without one).
    std::function<void(const StoreSnapshot&)> on_snapshot;
    // Changes of one or more revisions, in order; `revision`: everything up
    // to it has been delivered.
    std::function<void(const std::vector<StoreChange>&, int64_t revision)>
        on_changes;
  };
  // Follows changes after `revision` (the snapshot's), or, with no
  // snapshot (nullopt), loads one first, retrying until the store answers.
  // A no-op for stores that only this process writes.
  virtual void Follow(std::optional<int64_t> revision,
                      FeedHandlers handlers) = 0;
  // Stops following; no handler runs after it returns.
  virtual void StopFollowing() = 0;

  virtual StoreState state() const = 0;
};

// Stored groups' generations under revision_generations(): a store change
// at revision R publishes the group with generation R << 20; the group's
// own republishes (health, DNS, slow start) count up from there on each
// replica until the next change, which always starts above them. So every
// replica publishes the same generation for the same store state, and
// generations increase fleet-wide with the revision.
inline constexpr int kRevisionGenerationShift = 20;
inline uint64_t GenerationForRevision(int64_t revision) {
  return static_cast<uint64_t>(revision) << kRevisionGenerationShift;
}

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_STORE_H_
