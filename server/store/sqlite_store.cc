#include "server/store/sqlite_store.h"

#include "lib/status_macros.h"

namespace aside::server {

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& state_dir, uint64_t max_bytes) {
  ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<StateStore> db,
                         StateStore::Open(state_dir, max_bytes));
  return std::unique_ptr<SqliteStore>(new SqliteStore(std::move(db)));
}

absl::StatusOr<StoreSnapshot> SqliteStore::Load() {
  ASIDE_ASSIGN_OR_RETURN(StateStore::Contents contents, db_->Load());
  StoreSnapshot out;
  for (v1::Group& g : contents.groups) {
    out.groups.push_back({.definition = std::move(g), .revision = 0});
  }
  out.generation_floor = contents.generation_floor;
  out.session_key = std::move(contents.session_key);
  return out;
}

// This process is the only writer, so its own view is never behind; this
// read serves the interface (a whole load: it is not on any hot path).
absl::StatusOr<StoreChange> SqliteStore::ReadGroup(const std::string& name) {
  ASIDE_ASSIGN_OR_RETURN(StateStore::Contents contents, db_->Load());
  for (v1::Group& g : contents.groups) {
    if (g.name() == name) {
      return StoreChange{.name = name, .definition = std::move(g)};
    }
  }
  return StoreChange{.name = name};
}

// The generation column is informational (the floor, reserved in blocks by
// the GenerationSource, is what keeps restarts ahead): 0 here.
absl::StatusOr<int64_t> SqliteStore::PutGroup(const v1::Group& definition,
                                              int64_t) {
  ASIDE_RETURN_IF_ERROR(db_->PutGroup(definition, 0));
  return 0;
}

absl::StatusOr<int64_t> SqliteStore::DeleteGroup(const std::string& name,
                                                 int64_t) {
  ASIDE_RETURN_IF_ERROR(db_->DeleteGroup(name, 0));
  return 0;
}

std::vector<absl::StatusOr<int64_t>> SqliteStore::Commit(
    const std::vector<StoreWrite>& writes) {
  std::vector<StateStore::Write> batch;
  batch.reserve(writes.size());
  for (const StoreWrite& w : writes) {
    batch.push_back(
        {.name = w.name,
         .definition = w.definition.has_value() ? &*w.definition : nullptr});
  }
  std::vector<absl::StatusOr<int64_t>> out;
  out.reserve(writes.size());
  for (absl::Status& s : db_->WriteBatch(batch)) {
    if (s.ok()) {
      out.push_back(0);
    } else {
      out.push_back(std::move(s));
    }
  }
  return out;
}

absl::Status SqliteStore::RaiseGenerationFloor(uint64_t floor) {
  return db_->RaiseGenerationFloor(floor);
}

absl::StatusOr<std::string> SqliteStore::SessionKey(
    const std::string& proposed) {
  ASIDE_ASSIGN_OR_RETURN(StateStore::Contents contents, db_->Load());
  if (contents.session_key.size() >= 16) {
    return contents.session_key;
  }
  ASIDE_RETURN_IF_ERROR(db_->SetSessionKey(proposed));
  return proposed;
}

StoreState SqliteStore::state() const {
  return {.type = "sqlite", .location = db_->path(), .up = true};
}

}  // namespace aside::server
