#include "server/store/state_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"

namespace aside::server {
namespace {

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  int prepare_rc() const { return rc_; }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    const std::string& state_dir, uint64_t max_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec || !std::filesystem::is_directory(state_dir)) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory ", state_dir, ": cannot create it",
                     ec ? absl::StrCat(" (", ec.message(), ")") : ""));
  }
  if (access(state_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory ", state_dir, ": not writable (",
                     strerror(errno), ")"));
  }
  const std::string path = state_dir + "/aside.db";
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", path, ": cannot open: ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  auto store = std::unique_ptr<StateStore>(new StateStore(db, path));
  aside::MutexLock lock(&store->mu_);
  auto fail = [&](const absl::Status& s) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state database ", path, ": ", s.message(),
        " (move the file away to start empty, or restore a backup)"));
  };
  // Reading the schema version is the first access: a file that is not a
  // database fails here.
  int version = 0;
  {
    Statement st(db, "PRAGMA user_version");
    if (st.prepare_rc() != SQLITE_OK || sqlite3_step(st.get()) != SQLITE_ROW) {
      return fail(absl::DataLossError(
          absl::StrCat("not a valid database: ", sqlite3_errmsg(db))));
    }
    version = sqlite3_column_int(st.get(), 0);
  }
  if (version > kSchemaVersion) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("schema version ", version,
                     " is newer than this binary's (", kSchemaVersion, ")")));
  }
  {
    Statement st(db, "PRAGMA quick_check");
    if (st.prepare_rc() != SQLITE_OK || sqlite3_step(st.get()) != SQLITE_ROW) {
      return fail(absl::DataLossError(
          absl::StrCat("integrity check failed: ", sqlite3_errmsg(db))));
    }
    const auto* result =
        reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
    if (result == nullptr || std::strcmp(result, "ok") != 0) {
      return fail(absl::DataLossError(absl::StrCat(
          "integrity check failed: ", result == nullptr ? "?" : result)));
    }
  }
  for (const char* pragma :
       {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
        "PRAGMA foreign_keys=ON"}) {
    if (absl::Status s = store->Exec(pragma); !s.ok()) {
      return fail(s);
    }
  }
  {
    Statement st(db, "PRAGMA page_size");
    sqlite3_step(st.get());
    const int64_t page_size = std::max(512, sqlite3_column_int(st.get(), 0));
    const std::string cap = absl::StrCat(
        "PRAGMA max_page_count=",
        std::max<uint64_t>(16, max_bytes / static_cast<uint64_t>(page_size)));
    if (absl::Status s = store->Exec(cap.c_str()); !s.ok()) {
      return fail(s);
    }
  }
  if (version == 0) {
    absl::Status s = store->Transaction([&]() -> absl::Status {
      store->mu_.AssertHeld();  // Transaction runs the body under the lock
      ASIDE_RETURN_IF_ERROR(
          store->Exec("CREATE TABLE IF NOT EXISTS meta ("
                      "  key TEXT PRIMARY KEY, value BLOB NOT NULL)"));
      ASIDE_RETURN_IF_ERROR(
          store->Exec("CREATE TABLE IF NOT EXISTS groups ("
                      "  name TEXT PRIMARY KEY,"
                      "  definition BLOB NOT NULL,"
                      "  generation INTEGER NOT NULL)"));
      return store->Exec("PRAGMA user_version=1");
    });
    if (!s.ok()) {
      return fail(s);
    }
  }
  return store;
}

StateStore::~StateStore() {
  aside::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status StateStore::Error(const char* what, int rc) {
  return absl::Status(CodeFor(rc),
                      absl::StrCat("state store ", path_, ": ", what, ": ",
                                   sqlite3_errmsg(db_)));
}

absl::Status StateStore::Exec(const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status s(CodeFor(rc), absl::StrCat("state store ", path_, ": ",
                                             err != nullptr ? err : "error"));
    sqlite3_free(err);
    return s;
  }
  return absl::OkStatus();
}

template <typename Body>
absl::Status StateStore::Transaction(Body body) {
  ASIDE_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status s = body();
  if (s.ok()) {
    s = Exec("COMMIT");
  }
  if (!s.ok()) {
    // A failed COMMIT may leave the transaction open.
    if (!sqlite3_get_autocommit(db_)) {
      (void)Exec("ROLLBACK");
    }
  }
  return s;
}

absl::StatusOr<StateStore::Contents> StateStore::Load() {
  aside::MutexLock lock(&mu_);
  Contents out;
  {
    Statement st(db_, "SELECT name, definition FROM groups ORDER BY name");
    if (st.prepare_rc() != SQLITE_OK) {
      return Error("load groups", st.prepare_rc());
    }
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      v1::Group g;
      const void* blob = sqlite3_column_blob(st.get(), 1);
      const int size = sqlite3_column_bytes(st.get(), 1);
      if (!g.ParseFromArray(blob, size)) {
        return absl::DataLossError(absl::StrCat(
            "state store ", path_, ": group '",
            reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)),
            "' does not parse"));
      }
      out.groups.push_back(std::move(g));
    }
    if (rc != SQLITE_DONE) {
      return Error("load groups", rc);
    }
  }
  {
    Statement st(db_, "SELECT key, value FROM meta");
    if (st.prepare_rc() != SQLITE_OK) {
      return Error("load meta", st.prepare_rc());
    }
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      const std::string key =
          reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
      std::string value(
          static_cast<const char*>(sqlite3_column_blob(st.get(), 1)),
          static_cast<size_t>(sqlite3_column_bytes(st.get(), 1)));
      if (key == "generation_floor") {
        if (!absl::SimpleAtoi(value, &out.generation_floor)) {
          return absl::DataLossError(
              absl::StrCat("state store ", path_, ": bad generation_floor"));
        }
      } else if (key == "session_key") {
        out.session_key = std::move(value);
      }
    }
    if (rc != SQLITE_DONE) {
      return Error("load meta", rc);
    }
  }
  return out;
}

absl::Status StateStore::SetMetaLocked(const char* key,
                                       const std::string& value) {
  Statement st(db_,
               "INSERT INTO meta(key, value) VALUES(?1, ?2) "
               "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  if (st.prepare_rc() != SQLITE_OK) {
    return Error("write meta", st.prepare_rc());
  }
  sqlite3_bind_text(st.get(), 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_blob(st.get(), 2, value.data(), static_cast<int>(value.size()),
                    SQLITE_STATIC);
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) {
    return Error("write meta", rc);
  }
  return absl::OkStatus();
}

absl::Status StateStore::RaiseFloorLocked(uint64_t floor) {
  Statement st(db_,
               "INSERT INTO meta(key, value) VALUES('generation_floor', ?1) "
               "ON CONFLICT(key) DO UPDATE SET value = excluded.value "
               "WHERE CAST(meta.value AS INTEGER) < CAST(excluded.value AS "
               "INTEGER)");
  if (st.prepare_rc() != SQLITE_OK) {
    return Error("write generation", st.prepare_rc());
  }
  const std::string text = absl::StrCat(floor);
  sqlite3_bind_blob(st.get(), 1, text.data(), static_cast<int>(text.size()),
                    SQLITE_STATIC);
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) {
    return Error("write generation", rc);
  }
  return absl::OkStatus();
}

absl::Status StateStore::PutGroupLocked(const v1::Group& definition,
                                        uint64_t generation) {
  const std::string blob = definition.SerializeAsString();
  Statement st(db_,
               "INSERT INTO groups(name, definition, generation) "
               "VALUES(?1, ?2, ?3) ON CONFLICT(name) DO UPDATE SET "
               "definition = excluded.definition, "
               "generation = excluded.generation");
  if (st.prepare_rc() != SQLITE_OK) {
    return Error("write group", st.prepare_rc());
  }
  sqlite3_bind_text(st.get(), 1, definition.name().c_str(), -1, SQLITE_STATIC);
  sqlite3_bind_blob(st.get(), 2, blob.data(), static_cast<int>(blob.size()),
                    SQLITE_STATIC);
  sqlite3_bind_int64(st.get(), 3, static_cast<sqlite3_int64>(generation));
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) {
    return Error("write group", rc);
  }
  return RaiseFloorLocked(generation + 1);
}

absl::Status StateStore::DeleteGroupLocked(const std::string& name,
                                           uint64_t generation) {
  Statement st(db_, "DELETE FROM groups WHERE name = ?1");
  if (st.prepare_rc() != SQLITE_OK) {
    return Error("delete group", st.prepare_rc());
  }
  sqlite3_bind_text(st.get(), 1, name.c_str(), -1, SQLITE_STATIC);
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) {
    return Error("delete group", rc);
  }
  return RaiseFloorLocked(generation + 1);
}

absl::Status StateStore::PutGroup(const v1::Group& definition,
                                  uint64_t generation) {
  aside::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    mu_.AssertHeld();  // Transaction runs the body under the lock
    return PutGroupLocked(definition, generation);
  });
}

absl::Status StateStore::DeleteGroup(const std::string& name,
                                     uint64_t generation) {
  aside::MutexLock lock(&mu_);
  return Transaction([&]() -> absl::Status {
    mu_.AssertHeld();  // Transaction runs the body under the lock
    return DeleteGroupLocked(name, generation);
  });
}

std::vector<absl::Status> StateStore::WriteBatch(
    const std::vector<Write>& writes) {
  std::vector<absl::Status> out(writes.size());
  // Writes that failed in a way that made SQLite roll the whole
  // transaction back (some full-disk and I/O errors do): they keep their
  // error, and the batch is made again without them.
  std::vector<bool> dropped(writes.size(), false);
  aside::MutexLock lock(&mu_);
  auto fail_rest = [&](const absl::Status& s) {
    for (size_t i = 0; i < out.size(); ++i) {
      if (!dropped[i] && out[i].ok()) {
        out[i] = s;
      }
    }
  };
  for (;;) {
    for (size_t i = 0; i < out.size(); ++i) {
      if (!dropped[i]) {
        out[i] = absl::OkStatus();
      }
    }
    if (absl::Status s = Exec("BEGIN IMMEDIATE"); !s.ok()) {
      fail_rest(s);
      return out;
    }
    bool again = false;
    size_t attempted = 0;
    for (; attempted < writes.size(); ++attempted) {
      const size_t i = attempted;
      if (dropped[i]) {
        continue;
      }
      if (absl::Status s = Exec("SAVEPOINT aside_write"); !s.ok()) {
        out[i] = s;
        ++attempted;
        break;
      }
      const Write& w = writes[i];
      out[i] = w.definition != nullptr ? PutGroupLocked(*w.definition, 0)
                                       : DeleteGroupLocked(w.name, 0);
      if (sqlite3_get_autocommit(db_)) {
        // The transaction is gone, with the writes before this one.
        if (out[i].ok()) {
          fail_rest(Error("write batch", sqlite3_errcode(db_)));
          return out;
        }
        dropped[i] = true;
        again = true;
        break;
      }
      if (!out[i].ok()) {
        (void)Exec("ROLLBACK TO aside_write");
      }
      if (absl::Status s = Exec("RELEASE aside_write"); !s.ok()) {
        (void)Exec("ROLLBACK TO aside_write");
        out[i] = s;
        ++attempted;
        break;
      }
    }
    if (again) {
      continue;
    }
    // A savepoint that could not be opened or released ends the batch
    // there: the writes after it are not made.
    for (size_t i = attempted; i < writes.size(); ++i) {
      if (!dropped[i]) {
        out[i] = absl::UnavailableError(absl::StrCat(
            "state store ", path_, ": an earlier write of the batch failed"));
      }
    }
    if (absl::Status s = Exec("COMMIT"); !s.ok()) {
      if (!sqlite3_get_autocommit(db_)) {
        (void)Exec("ROLLBACK");
      }
      fail_rest(s);
    }
    return out;
  }
}

absl::Status StateStore::RaiseGenerationFloor(uint64_t floor) {
  aside::MutexLock lock(&mu_);
  return Transaction([&]() {
    mu_.AssertHeld();
    return RaiseFloorLocked(floor);
  });
}

absl::Status StateStore::SetSessionKey(const std::string& key) {
  aside::MutexLock lock(&mu_);
  return Transaction([&]() {
    mu_.AssertHeld();
    return SetMetaLocked("session_key", key);
  });
}

absl::StatusOr<std::string> StateStore::IntegrityCheck() {
  aside::MutexLock lock(&mu_);
  Statement st(db_, "PRAGMA integrity_check");
  if (st.prepare_rc() != SQLITE_OK || sqlite3_step(st.get()) != SQLITE_ROW) {
    return Error("integrity check", sqlite3_errcode(db_));
  }
  return std::string(
      reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0)));
}

}  // namespace aside::server
