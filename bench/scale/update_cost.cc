// scale_bench: the fixed cost of one Admin update, split into its parts.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/scale/scale_common.h"
#include "client/watched_table.h"
#include "lib/table.h"
#include "proto/convert.h"
#include "server/api/admin_service.h"
#include "server/auth/admin_auth.h"
#include "server/base/log.h"
#include "server/config/config.h"
#include "server/groups/group_registry.h"
#include "server/groups/group_table_builder.h"
#include "server/groups/table_encoding.h"
#include "server/schema/group_spec_proto.h"
#include "server/server.h"
#include "server/store/sqlite_store.h"
#include "server/store/store_sync.h"

namespace aside::server::scale {

// A bare SQLite commit of `bytes` with the state store's settings (WAL,
// synchronous=FULL): the floor of the store commit.
class BareSqlite {
 public:
  explicit BareSqlite(const std::string& path) {
    sqlite3_open(path.c_str(), &db_);
    Exec("PRAGMA journal_mode=WAL");
    Exec("PRAGMA synchronous=FULL");
    Exec(
        "CREATE TABLE IF NOT EXISTS t(name TEXT PRIMARY KEY, v BLOB, "
        "generation INTEGER)");
  }
  ~BareSqlite() { sqlite3_close(db_); }
  void Commit(const std::string& bytes) {
    Exec("BEGIN IMMEDIATE");
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_,
                       "INSERT INTO t(name, v, generation) VALUES('g', ?1, "
                       "?2) ON CONFLICT(name) DO UPDATE SET v = excluded.v, "
                       "generation = excluded.generation",
                       -1, &st, nullptr);
    sqlite3_bind_blob(st, 1, bytes.data(), static_cast<int>(bytes.size()),
                      SQLITE_STATIC);
    // A new value on every commit: SQLite skips writing a row whose content
    // is unchanged, and then the commit has nothing to sync.
    sqlite3_bind_int64(st, 2, ++generation_);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    Exec("COMMIT");
    if (rc != SQLITE_DONE) {
      std::fprintf(stdout, "bare sqlite: %s\n", sqlite3_errmsg(db_));
      std::exit(1);
    }
  }

 private:
  void Exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
      std::fprintf(stdout, "bare sqlite: %s: %s\n", sql, sqlite3_errmsg(db_));
      std::exit(1);
    }
  }
  sqlite3* db_ = nullptr;
  int64_t generation_ = 0;
};

// A store that keeps nothing: Admin's path with everything but the durable
// commit (it still serialises the definition, as the SQLite store does).
class NullStore final : public Store {
 public:
  std::string type() const override { return "null"; }
  std::string location() const override { return "-"; }
  absl::StatusOr<StoreSnapshot> Load() override { return StoreSnapshot{}; }
  absl::StatusOr<StoreChange> ReadGroup(const std::string& name) override {
    StoreChange absent;
    absent.name = name;
    return absent;
  }
  absl::StatusOr<int64_t> PutGroup(const v1::Group& definition,
                                   int64_t) override {
    std::string blob = definition.SerializeAsString();
    asm volatile("" : : "r"(blob.data()) : "memory");
    return 0;
  }
  absl::StatusOr<int64_t> DeleteGroup(const std::string&, int64_t) override {
    return 0;
  }
  absl::Status RaiseGenerationFloor(uint64_t) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> SessionKey(const std::string& p) override {
    return p;
  }
  bool revision_generations() const override { return false; }
  bool starts_unavailable() const override { return false; }
  void Follow(std::optional<int64_t>, FeedHandlers) override {}
  void StopFollowing() override {}
  StoreState state() const override { return {}; }
};

// One Admin setup on `store`: a group "g" of n-1 backends; AddBackends then
// RemoveBackends of the n-th, each as the Admin handler does it (auth, the
// operation, the log line).
struct AdminRig {
  AdminRig(Store* store, const AdminAuth* auth, size_t n)
      : registry(*GroupRegistry::Create(&metrics, 1, 10)),
        sync(store, registry.get(), &metrics),
        admin(registry.get(), &sync, auth, &metrics),
        auth(auth) {
    const GroupSpec initial = MakeSpec("g", n - 1);
    if (absl::StatusOr<StoreSync::Written> g = sync.Mutate(
            "g", 0, StoreSync::OnConflict::kAbortOnConflict,
            [&](const GroupSpec*) {
              return absl::StatusOr<std::optional<GroupSpec>>(initial);
            });
        !g.ok()) {
      std::fprintf(stdout, "%s\n", g.status().ToString().c_str());
      std::exit(1);
    }
    add.set_group("g");
    add.add_backends()->set_address(Address(n - 1));
    remove.set_group("g");
    remove.add_addresses(Address(n - 1));
  }
  // Two updates (add, then remove).
  void Pair() {
    v1::Group out;
    Step("AddBackends", [&] { return admin.DoAddBackends(add, &out); });
    v1::Group out2;
    Step("RemoveBackends",
         [&] { return admin.DoRemoveBackends(remove, &out2); });
  }
  void Step(const char* method, const std::function<grpc::Status()>& op) {
    if (auth->RoleOfToken(kToken) != AdminRole::kAdmin) std::abort();
    const grpc::Status s = op();
    if (!s.ok()) {
      std::fprintf(stdout, "%s: %s\n", method, s.error_message().c_str());
      std::exit(1);
    }
    metrics.admin_mutations.Add({{"method", method}, {"result", "ok"}})
        .Increment();
    Log(LogLevel::kInfo, "admin.mutation",
        {{"method", method},
         {"peer", "ipv4:127.0.0.1:1"},
         {"result", "ok"},
         {"message", ""}});
  }
  static constexpr const char* kToken = "0123456789abcdef0123456789abcdef";

  Metrics metrics;
  std::unique_ptr<GroupRegistry> registry;
  StoreSync sync;
  AdminService admin;
  const AdminAuth* auth;
  v1::AddBackendsRequest add;
  v1::RemoveBackendsRequest remove;
};

void UpdateCost(const std::vector<size_t>& sizes, int reps,
                double min_seconds) {
  char tmpl[] = "/tmp/aside-scale-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  {
    std::ofstream tokens(dir + "/tokens");
    tokens << AdminRig::kToken << " admin bench\n";
  }
  // A secret file as the server wants it: readable by its owner only.
  chmod((dir + "/tokens").c_str(), 0600);
  auto auth = *AdminAuth::Create(dir + "/tokens", {});
  std::printf(
      "\n### Fixed cost of one Admin update (AddBackends or RemoveBackends of "
      "one backend; µs per update, min–max of %d repetitions)\n\n"
      "| backends | everything but the commit | bare SQLite commit, same "
      "bytes | but-commit / bare commit | store commit alone "
      "(StateStore::PutGroup) | whole update on SQLite | auth | validation "
      "(ValidateGroupSpec) | rebuild (BuildTableSpec + Table::Create) | apply "
      "+ publish (GroupRegistry::Update) | encode (EncodeUpdate) | response "
      "(Describe, GetGroup) | log |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      reps);
  for (size_t n : sizes) {
    const std::string sub = absl::StrCat(dir, "/n", n);
    std::filesystem::create_directories(sub);
    auto sqlite = *SqliteStore::Open(sub, 1ull << 30);
    NullStore null_store;
    AdminRig on_sqlite(sqlite.get(), auth.get(), n);
    AdminRig on_null(&null_store, auth.get(), n);
    Metrics metrics;
    auto registry = *GroupRegistry::Create(&metrics, 1, 10);
    GroupSpec full = MakeSpec("g", n);
    if (!registry->Add(full).ok()) std::abort();
    GroupPtr group = registry->Find("g");
    v1::Group def;
    GroupSpecToProto(full, &def);
    const std::string def_bytes = def.SerializeAsString();
    BareSqlite bare(sub + "/bare.db");

    Range whole, commit, floor, but, t_auth, t_valid, t_rebuild, t_apply,
        t_encode, t_describe, t_log, ratio;
    // Log lines go to /dev/null while measuring.
    std::fflush(stderr);
    const int saved = dup(2);
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    close(devnull);
    for (int r = 0; r < reps; ++r) {
      const double b = TimePerCall([&] { on_null.Pair(); }, min_seconds) / 2;
      const double w = TimePerCall([&] { on_sqlite.Pair(); }, min_seconds) / 2;
      uint64_t generation = 1u << 30;
      const double c = TimePerCall(
          [&] {
            if (!sqlite->db().PutGroup(def, ++generation).ok()) std::abort();
          },
          min_seconds);
      const double f =
          TimePerCall([&] { bare.Commit(def_bytes); }, min_seconds);
      const double au = TimePerCall(
          [&] {
            AdminRole role = auth->RoleOfToken(AdminRig::kToken);
            asm volatile("" : : "r"(role) : "memory");
          },
          min_seconds);
      const double va = TimePerCall(
          [&] {
            GroupSpec s = full;
            if (!ValidateGroupSpec(s).ok()) std::abort();
          },
          min_seconds);
      const std::vector<MemberStatus> statuses(n);
      TableConstPtr current = group->table();
      const double rb = TimePerCall(
          [&] {
            TableSpec ts = BuildTableSpec(full, full.backends, statuses,
                                          registry->session_key(), 0);
            ts.generation = current->generation() + 1;
            (void)*Table::Create(std::move(ts), current.get(), nullptr);
          },
          min_seconds);
      GroupSpec other = full;
      other.backends.pop_back();
      bool flip = false;
      const double ap = TimePerCall(
          [&] {
            flip = !flip;
            if (!registry->Update(group, flip ? other : full).ok()) {
              std::abort();
            }
          },
          min_seconds);
      TableConstPtr after = group->table();
      TableSpec ts = BuildTableSpec(other, other.backends, statuses,
                                    registry->session_key(), 0);
      ts.generation = after->generation() + 1;
      TableConstPtr prev_table =
          *Table::Create(std::move(ts), nullptr, nullptr);
      const double en = TimePerCall(
          [&] { (void)EncodeUpdate(prev_table.get(), after, "server"); },
          min_seconds);
      AdminService plain(registry.get(), nullptr, nullptr, nullptr);
      v1::GetGroupRequest get;
      get.set_name("g");
      const double de = TimePerCall(
          [&] {
            v1::Group out;
            (void)plain.DoGetGroup(get, &out);
          },
          min_seconds);
      const double lg = TimePerCall(
          [&] {
            Log(LogLevel::kInfo, "admin.mutation",
                {{"method", "AddBackends"},
                 {"peer", "ipv4:127.0.0.1:1"},
                 {"result", "ok"},
                 {"message", ""}});
          },
          min_seconds);
      but.Add(b);
      floor.Add(f);
      ratio.Add(b / f);
      commit.Add(c);
      whole.Add(w);
      t_auth.Add(au);
      t_valid.Add(va);
      t_rebuild.Add(rb);
      t_apply.Add(ap);
      t_encode.Add(en);
      t_describe.Add(de);
      t_log.Add(lg);
    }
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    auto us = [](const Range& r) { return Fmt(r, "", 1e6); };
    std::printf(
        "| %zu | %s | %s | %.2g–%.2g× | %s | %s | %s | %s | %s | %s | %s | %s "
        "| %s |\n",
        n, us(but).c_str(), us(floor).c_str(), ratio.lo, ratio.hi,
        us(commit).c_str(), us(whole).c_str(), us(t_auth).c_str(),
        us(t_valid).c_str(), us(t_rebuild).c_str(), us(t_apply).c_str(),
        us(t_encode).c_str(), us(t_describe).c_str(), us(t_log).c_str());
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace aside::server::scale
