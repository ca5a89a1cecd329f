// The single-replica store: StateStore's SQLite file behind the Store
// interface (server/store/store.h). Revisions are always 0 and there is no
// change feed: this process is the file's only writer, and AdminService
// serialises its mutations, so a conditional write has nothing to conflict
// with.
//
// Thread-safe (StateStore locks itself).
#ifndef ASIDE_SERVER_STORE_SQLITE_STORE_H_
#define ASIDE_SERVER_STORE_SQLITE_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "server/store/state_store.h"
#include "server/store/store.h"

namespace aside::server {

class SqliteStore final : public Store {
 public:
  // Opens <state_dir>/aside.db (see StateStore::Open).
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& state_dir, uint64_t max_bytes);

  std::string type() const override { return "sqlite"; }
  std::string location() const override { return db_->path(); }
  absl::StatusOr<StoreSnapshot> Load() override;
  absl::StatusOr<StoreChange> ReadGroup(const std::string& name) override;
  absl::StatusOr<int64_t> PutGroup(const v1::Group& definition,
                                   int64_t expected_revision) override;
  absl::StatusOr<int64_t> DeleteGroup(const std::string& name,
                                      int64_t expected_revision) override;
  // One transaction (StateStore::WriteBatch).
  std::vector<absl::StatusOr<int64_t>> Commit(
      const std::vector<StoreWrite>& writes) override;
  absl::Status RaiseGenerationFloor(uint64_t floor) override;
  absl::StatusOr<std::string> SessionKey(const std::string& proposed) override;
  bool revision_generations() const override { return false; }
  bool starts_unavailable() const override { return false; }
  void Follow(std::optional<int64_t>, FeedHandlers) override {}
  void StopFollowing() override {}
  StoreState state() const override;

  StateStore& db() { return *db_; }

 private:
  explicit SqliteStore(std::unique_ptr<StateStore> db) : db_(std::move(db)) {}

  const std::unique_ptr<StateStore> db_;
};

}  // namespace aside::server

#endif  // ASIDE_SERVER_STORE_SQLITE_STORE_H_
