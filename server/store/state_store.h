// Durable state in SQLite: groups created through Admin (with their drains),
// the generation high-water mark and the session-token key.
//
// One file, <state_dir>/aside.db, WAL journal, synchronous=FULL: a call that
// returns OK has reached the disk. Open() refuses a corrupt database, a
// schema newer than this binary and a directory it cannot create or write,
// naming the path. A write that fails (disk full, read-only file, the
// configured size cap) returns an error and changes nothing.
//
// Thread-safe (one connection behind a mutex); writes are serialised.
#ifndef ASIDE_SERVER_STORE_STATE_STORE_H_
#define ASIDE_SERVER_STORE_STATE_STORE_H_

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "aside/v1/admin.pb.h"
#include "lib/sync.h"

namespace aside::server {

class StateStore {
 public:
  static constexpr int kSchemaVersion = 1;

  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      const std::string& state_dir, uint64_t max_bytes);
  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  struct Contents {
    // Definitions of store-owned groups, sorted by name.
    std::vector<v1::Group> groups;
    // Every generation handed out before is below this.
    uint64_t generation_floor = 0;
    // Key signing sticky session tokens (empty before the first SetMeta).
    std::string session_key;
  };
  absl::StatusOr<Contents> Load();

  // Inserts or replaces a group definition, and raises the generation floor
  // to `generation` + 1, in one transaction.
  absl::Status PutGroup(const v1::Group& definition, uint64_t generation);
  absl::Status DeleteGroup(const std::string& name, uint64_t generation);
  // Several puts (a definition) and deletes (none) in one transaction, one
  // sync to disk: each write is made or not on its own (inside a savepoint,
  // so one that fails, such as one past the size cap, changes nothing and
  // the others commit). Returns one status per write; every OK is on disk.
  struct Write {
    std::string name;
    const v1::Group* definition = nullptr;  // null: delete `name`
  };
  std::vector<absl::Status> WriteBatch(const std::vector<Write>& writes);
  // Raises the generation floor (never lowers it).
  absl::Status RaiseGenerationFloor(uint64_t floor);
  absl::Status SetSessionKey(const std::string& key);

  // Runs PRAGMA integrity_check; "ok" when healthy.
  absl::StatusOr<std::string> IntegrityCheck();

  const std::string& path() const { return path_; }

 private:
  StateStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(const char* what, int rc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back on error.
  template <typename Body>
  absl::Status Transaction(Body body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetMetaLocked(const char* key, const std::string& value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RaiseFloorLocked(uint64_t floor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutGroupLocked(const v1::Group& definition, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteGroupLocked(const std::string& name, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  aside::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);
  const std::string path_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_STATE_STORE_H_
