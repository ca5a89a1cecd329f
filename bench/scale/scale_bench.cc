// Large groups, many groups and the fixed cost of one Admin update, measured
// in process with the server's own classes (bench/README.md, "Scale").
//
// Every figure is printed beside a floor measured in the same run (a bare
// vector copy, a bare protobuf encode of the same message, a bare SQLite
// commit of the same bytes, a bare YAML parse of the same file), as the
// min–max over the repetitions of the figure and of its ratio to the floor.
//
//   scale_bench [--quick] [--reps=3] [--part=large|many|update]
#include <fcntl.h>
#include <malloc.h>
#include <sqlite3.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/watched_table.h"
#include "lib/command_line.h"
#include "lib/table.h"
#include "proto/convert.h"
#include "server/admin_auth.h"
#include "server/admin_convert.h"
#include "server/admin_service.h"
#include "server/config.h"
#include "server/group_registry.h"
#include "server/group_table_builder.h"
#include "server/log.h"
#include "server/schema/group_spec.h"
#include "server/server.h"
#include "server/sqlite_store.h"
#include "server/store_sync.h"
#include "server/table_encoding.h"

namespace aside::server {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Median-free summary: min and max over repetitions.
struct Range {
  double lo = 1e300;
  double hi = -1e300;
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

std::string Fmt(const Range& r, const char* unit, double scale) {
  return absl::StrFormat("%.3g–%.3g %s", r.lo * scale, r.hi * scale, unit);
}

// Time per call of `fn`, repeated until at least `min_seconds` passed.
double TimePerCall(const std::function<void()>& fn, double min_seconds) {
  int64_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++n;
    elapsed = Seconds(start, Clock::now());
  } while (elapsed < min_seconds);
  return elapsed / static_cast<double>(n);
}

std::string Address(size_t i) {
  return absl::StrCat("10.", (i >> 16) & 255, ".", (i >> 8) & 255, ".", i & 255,
                      ":", 8000 + i / (1 << 24));
}

std::vector<Backend> MakeBackends(size_t n) {
  std::vector<Backend> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].address = Address(i);
  }
  return out;
}

GroupSpec MakeSpec(const std::string& name, size_t n) {
  GroupSpec spec;
  spec.name = name;
  spec.backends = MakeBackends(n);
  spec.health_check.kind = HealthCheckSpec::Kind::kNone;
  spec.source = GroupSource::kStore;
  return spec;
}

// Heap bytes in use (allocated and not freed), including mmapped blocks.
double HeapBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

struct Row {
  std::string what;
  Range value;
  const char* unit;
  double scale;
  std::string floor_name;
  Range floor;
  Range ratio;
};

void Print(const Row& r) {
  std::printf("| %s | %s | %s %s | %s |\n", r.what.c_str(),
              Fmt(r.value, r.unit, r.scale).c_str(), r.floor_name.c_str(),
              Fmt(r.floor, r.unit, r.scale).c_str(),
              absl::StrFormat("%.3g–%.3g×", r.ratio.lo, r.ratio.hi).c_str());
  std::fflush(stdout);
}

void Header(const std::string& title) {
  std::printf(
      "\n### %s\n\n| figure | value (min–max) | floor | ratio |\n"
      "|---|---|---|---|\n",
      title.c_str());
}

// ---- 1. One large group ----------------------------------------------------

void LargeGroup(size_t n, int reps, double min_seconds) {
  const std::vector<Backend> backends = MakeBackends(n);
  GroupSpec spec = MakeSpec("big", 0);
  const std::vector<MemberStatus> statuses(n);
  auto key = std::make_shared<const std::string>(32, 'k');
  auto build = [&](const std::vector<Backend>& bs, const Table* previous) {
    TableSpec ts = BuildTableSpec(spec, bs, statuses, key, 0);
    ts.generation = previous == nullptr ? 1 : previous->generation() + 1;
    return *Table::Create(std::move(ts), previous, nullptr);
  };
  TableConstPtr table = build(backends, nullptr);
  std::vector<Backend> changed = backends;
  changed[n / 2].weight = 7;
  TableConstPtr next = build(changed, table.get());

  v1::GroupUpdate full_pb;
  full_pb.set_group("big");
  full_pb.set_generation(table->generation());
  full_pb.set_server_id("server");
  ToProto(*table, full_pb.mutable_full());
  std::shared_ptr<const EncodedUpdate> encoded =
      EncodeUpdate(table.get(), next, "server");
  v1::GroupUpdate delta_pb;
  delta_pb.set_group("big");
  delta_pb.set_generation(next->generation());
  delta_pb.set_server_id("server");
  MakeDelta(*table, *next, delta_pb.mutable_delta());
  const std::string full_bytes = full_pb.SerializeAsString();

  Row copy{"bare vector<Backend> copy", {}, "ms", 1e3, "", {}, {}};
  Row b{absl::StrCat("table build (BuildTableSpec + Table::Create), ", n),
        {},
        "ms",
        1e3,
        "vector copy",
        {},
        {}};
  Row e{absl::StrCat("full-table encode (EncodedUpdate::full), ", n),
        {},
        "ms",
        1e3,
        "bare SerializeAsString of the same GroupUpdate",
        {},
        {}};
  Row d{absl::StrCat("one-backend change: MakeDelta alone, ", n),
        {},
        "µs",
        1e6,
        "vector copy",
        {},
        {}};
  Row ed{absl::StrCat(
             "one-backend change: EncodeUpdate (the delta; the full table "
             "only when asked for), ",
             n),
         {},
         "ms",
         1e3,
         "bare SerializeAsString of the full GroupUpdate",
         {},
         {}};
  Row a{absl::StrCat("stub applies the delta (WatchedTable::Apply), ", n),
        {},
        "ms",
        1e3,
        "vector copy",
        {},
        {}};
  for (int r = 0; r < reps; ++r) {
    const double t_copy = TimePerCall(
        [&] {
          std::vector<Backend> c = backends;
          asm volatile("" : : "r"(c.data()) : "memory");
        },
        min_seconds);
    const double t_ser = TimePerCall(
        [&] {
          std::string s = full_pb.SerializeAsString();
          asm volatile("" : : "r"(s.data()) : "memory");
        },
        min_seconds);
    const double t_build =
        TimePerCall([&] { (void)build(backends, nullptr); }, min_seconds);
    const double t_encode = TimePerCall(
        [&] {
          std::shared_ptr<const EncodedUpdate> u =
              EncodeUpdate(nullptr, table, "server");
          (void)u->full();
        },
        min_seconds);
    const double t_delta = TimePerCall(
        [&] {
          v1::TableDelta delta;
          MakeDelta(*table, *next, &delta);
        },
        min_seconds);
    const double t_encode_delta = TimePerCall(
        [&] { (void)EncodeUpdate(table.get(), next, "server"); }, min_seconds);
    // The stub: a full table, then the delta, each Apply timed on its own.
    double apply_total = 0;
    int applies = 0;
    const auto apply_start = Clock::now();
    do {
      WatchedTable held("big", nullptr);
      v1::GroupUpdate full;
      full.ParseFromString(full_bytes);
      if (held.Apply(full).outcome != WatchedTable::Outcome::kApplied) {
        std::fprintf(stderr, "full table not applied\n");
        std::exit(1);
      }
      const auto t0 = Clock::now();
      const WatchedTable::Result res = held.Apply(delta_pb);
      apply_total += Seconds(t0, Clock::now());
      ++applies;
      if (res.outcome != WatchedTable::Outcome::kApplied) {
        std::fprintf(stderr, "delta not applied: %s\n",
                     res.error.ToString().c_str());
        std::exit(1);
      }
    } while (Seconds(apply_start, Clock::now()) < min_seconds);
    const double t_apply = apply_total / applies;

    copy.value.Add(t_copy);
    copy.floor.Add(t_copy);
    copy.ratio.Add(1);
    b.value.Add(t_build);
    b.floor.Add(t_copy);
    b.ratio.Add(t_build / t_copy);
    e.value.Add(t_encode);
    e.floor.Add(t_ser);
    e.ratio.Add(t_encode / t_ser);
    d.value.Add(t_delta);
    d.floor.Add(t_copy);
    d.ratio.Add(t_delta / t_copy);
    ed.value.Add(t_encode_delta);
    ed.floor.Add(t_ser);
    ed.ratio.Add(t_encode_delta / t_ser);
    a.value.Add(t_apply);
    a.floor.Add(t_copy);
    a.ratio.Add(t_apply / t_copy);
  }
  Print(b);
  Print(e);
  Print(d);
  Print(ed);
  Print(a);
  std::printf(
      "| sizes, %zu backends | full %zu B (%.1f B/backend), delta %zu B | "
      "bare full GroupUpdate %zu B | delta/full %.2g |\n",
      n, encoded->full_bytes(),
      static_cast<double>(encoded->full_bytes()) / static_cast<double>(n),
      encoded->delta_bytes, full_bytes.size(),
      static_cast<double>(encoded->delta_bytes) /
          static_cast<double>(encoded->full_bytes()));
}

// ---- 2. Many groups --------------------------------------------------------

std::string WriteConfig(const std::string& dir, size_t groups,
                        size_t backends) {
  const std::string path = dir + "/scale.yaml";
  std::ofstream out(path);
  out << "listen: 127.0.0.1:0\nmetrics: 127.0.0.1:0\nstate_dir: " << dir
      << "/state\nlimits: {max_groups: " << groups << "}\ngroups:\n";
  for (size_t g = 0; g < groups; ++g) {
    out << "  - name: g" << g
        << "\n    policy: round_robin\n    health_check: {kind: none}\n"
           "    backends: [";
    for (size_t i = 0; i < backends; ++i) {
      out << (i ? ", " : "") << Address(g * backends + i);
    }
    out << "]\n";
  }
  return path;
}

void ManyGroups(size_t groups, size_t backends, int reps) {
  char tmpl[] = "/tmp/aside-scale-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = WriteConfig(dir, groups, backends);
  Row start{absl::StrCat("server start (LoadConfigFile + AsideServer::Create "
                         "+ Start), ",
                         groups, " groups × ", backends),
            {},
            "s",
            1,
            "bare YAML::LoadFile",
            {},
            {}};
  Row list{absl::StrCat("ListGroups (DoListGroups + serialize), ", groups,
                        " groups"),
           {},
           "ms",
           1e3,
           "bare SerializeAsString of the same response",
           {},
           {}};
  Row rss{absl::StrCat("heap in use per group (mallinfo2; registry with "
                       "metrics), ",
                       groups, " groups × ", backends),
          {},
          "KiB",
          1.0 / 1024,
          "its definition's protobuf bytes",
          {},
          {}};
  Range heap_table;
  Range parse, create, serve, add_per_group, heap_plain, remove_per_group;
  for (int r = 0; r < reps; ++r) {
    const auto y0 = Clock::now();
    YAML::Node node = YAML::LoadFile(path);
    const double t_yaml = Seconds(y0, Clock::now());
    (void)node;
    {
      const auto s0 = Clock::now();
      absl::StatusOr<ServerConfig> config = LoadConfigFile(path);
      if (!config.ok()) {
        std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
        std::exit(1);
      }
      const auto s1 = Clock::now();
      absl::StatusOr<std::unique_ptr<AsideServer>> server =
          AsideServer::Create(*std::move(config));
      const auto s2 = Clock::now();
      if (!server.ok() || !(*server)->Start().ok()) {
        std::fprintf(stderr, "server did not start: %s\n",
                     server.status().ToString().c_str());
        std::exit(1);
      }
      const double t_start = Seconds(s0, Clock::now());
      start.value.Add(t_start);
      start.floor.Add(t_yaml);
      start.ratio.Add(t_start / t_yaml);
      parse.Add(Seconds(s0, s1));
      create.Add(Seconds(s1, s2));
      serve.Add(Seconds(s2, Clock::now()));
      (*server)->Shutdown(absl::Seconds(1));
      (*server)->Wait();
      // Not destroyed: removing G groups' Prometheus children costs O(G^2)
      // (see "Removing a group" in bench/README.md); the process exits soon.
      (void)server->release();
    }
    // RSS and ListGroups on a registry of its own.
    Metrics metrics;
    const double heap0 = HeapBytes();
    auto registry = *GroupRegistry::Create(&metrics, 1, groups);
    size_t def_bytes = 0;
    double adding = 0;
    for (size_t g = 0; g < groups; ++g) {
      GroupSpec spec = MakeSpec(absl::StrCat("g", g), 0);
      spec.backends.resize(backends);
      for (size_t i = 0; i < backends; ++i) {
        spec.backends[i].address = Address(g * backends + i);
      }
      v1::Group def;
      GroupSpecToProto(spec, &def);
      def_bytes += def.ByteSizeLong();
      const auto a0 = Clock::now();
      if (absl::Status s = registry->Add(std::move(spec)); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        std::exit(1);
      }
      adding += Seconds(a0, Clock::now());
    }
    add_per_group.Add(adding / static_cast<double>(groups));
    const double per_group =
        (HeapBytes() - heap0) / static_cast<double>(groups);
    const double def_per_group =
        static_cast<double>(def_bytes) / static_cast<double>(groups);
    rss.value.Add(per_group);
    rss.floor.Add(def_per_group);
    rss.ratio.Add(per_group / def_per_group);
    // The same groups without Prometheus metrics.
    {
      const double bare0 = HeapBytes();
      auto plain = *GroupRegistry::Create(nullptr, 1, groups);
      for (size_t g = 0; g < groups; ++g) {
        GroupSpec spec = MakeSpec(absl::StrCat("g", g), 0);
        spec.backends.resize(backends);
        for (size_t i = 0; i < backends; ++i) {
          spec.backends[i].address = Address(g * backends + i);
        }
        if (!plain->Add(std::move(spec)).ok()) std::abort();
      }
      heap_plain.Add((HeapBytes() - bare0) / static_cast<double>(groups));
    }
    // Of which the published table alone (BuildTableSpec + Table::Create).
    {
      const double table0 = HeapBytes();
      std::vector<TableConstPtr> tables;
      const GroupSpec spec = MakeSpec("t", backends);
      const std::vector<MemberStatus> statuses(backends);
      auto key = std::make_shared<const std::string>(32, 'k');
      for (size_t g = 0; g < groups; ++g) {
        TableSpec ts = BuildTableSpec(spec, spec.backends, statuses, key, 0);
        ts.generation = 1;
        tables.push_back(*Table::Create(std::move(ts), nullptr, nullptr));
      }
      heap_table.Add((HeapBytes() - table0) / static_cast<double>(groups));
    }
    AdminService admin(registry.get(), nullptr, nullptr, &metrics);
    v1::ListGroupsResponse response;
    const double t_list = TimePerCall(
        [&] {
          v1::ListGroupsResponse resp;
          (void)admin.DoListGroups({}, &resp);
          std::string s = resp.SerializeAsString();
          asm volatile("" : : "r"(s.data()) : "memory");
          response = std::move(resp);
        },
        0.3);
    const double t_ser = TimePerCall(
        [&] {
          std::string s = response.SerializeAsString();
          asm volatile("" : : "r"(s.data()) : "memory");
        },
        0.3);
    list.value.Add(t_list);
    list.floor.Add(t_ser);
    list.ratio.Add(t_list / t_ser);
    // Removing a group (and its metrics) from G, then adding it back.
    const size_t churn = std::min<size_t>(groups, 20);
    double removing = 0;
    for (size_t g = 0; g < churn; ++g) {
      const auto r0 = Clock::now();
      if (!registry->Remove(absl::StrCat("g", g)).ok()) std::abort();
      removing += Seconds(r0, Clock::now());
    }
    remove_per_group.Add(removing / static_cast<double>(churn));
    // Not destroyed, as above.
    (void)registry.release();
  }
  Print(start);
  std::printf(
      "| start's parts: LoadConfigFile / AsideServer::Create / Start "
      "| %s / %s / %s | | |\n",
      Fmt(parse, "s", 1).c_str(), Fmt(create, "s", 1).c_str(),
      Fmt(serve, "s", 1).c_str());
  std::printf(
      "| GroupRegistry::Add, mean per group over %zu groups | %s | | "
      "|\n",
      groups, Fmt(add_per_group, "µs", 1e6).c_str());
  Print(list);
  Print(rss);
  std::printf(
      "| heap in use per group without Prometheus metrics | %s | | "
      "|\n",
      Fmt(heap_plain, "KiB", 1.0 / 1024).c_str());
  std::printf(
      "| of which its table (Table::Create, round_robin) | %s | | "
      "|\n",
      Fmt(heap_table, "KiB", 1.0 / 1024).c_str());
  std::printf(
      "| GroupRegistry::Remove of one group among %zu (its metrics "
      "included) | %s | | |\n",
      groups, Fmt(remove_per_group, "ms", 1e3).c_str());
  std::filesystem::remove_all(dir);
}

// ---- 3. The fixed cost of one Admin update ---------------------------------

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
    if (absl::StatusOr<GroupPtr> g = sync.Put(MakeSpec("g", n - 1)); !g.ok()) {
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

}  // namespace
}  // namespace aside::server

int main(int argc, char** argv) {
  using namespace aside::server;
  bool quick = false;
  int reps = 3;
  std::string part;
  size_t groups = 0;
  size_t large = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg.rfind("--reps=", 0) == 0) {
      reps = std::max(1, std::atoi(arg.c_str() + 7));
    } else if (arg.rfind("--backends=", 0) == 0) {
      large = std::strtoul(arg.c_str() + 11, nullptr, 10);
    } else if (arg.rfind("--groups=", 0) == 0) {
      groups = std::strtoul(arg.c_str() + 9, nullptr, 10);
    } else if (arg.rfind("--part=", 0) == 0) {
      part = arg.substr(7);
    } else {
      std::fprintf(stderr,
                   "usage: scale_bench [--quick] [--reps=N] "
                   "[--part=large|many|update] [--groups=N] [--backends=N]\n");
      return 2;
    }
  }
  SetLogLevel(LogLevel::kWarn);
  const double min_seconds = quick ? 0.05 : 0.3;
  if (part.empty() || part == "update") {
    // First: the other parts leave a large, fragmented heap behind.
    SetLogLevel(LogLevel::kInfo);
    UpdateCost(quick ? std::vector<size_t>{10, 100, 1000}
                     : std::vector<size_t>{10, 100, 1000, 10000},
               reps, min_seconds);
  }
  SetLogLevel(LogLevel::kWarn);
  if (part.empty() || part == "large") {
    Header("One large group");
    for (size_t n : large > 0 ? std::vector<size_t>{large}
                    : quick   ? std::vector<size_t>{1000, 10000}
                              : std::vector<size_t>{1000, 10000, 100000}) {
      LargeGroup(n, reps, min_seconds);
    }
  }
  if (part.empty() || part == "many") {
    Header("Many groups");
    if (groups > 0) {
      ManyGroups(groups, 10, reps);
    } else if (quick) {
      ManyGroups(1000, 10, reps);
    } else {
      ManyGroups(100, 10, reps);
      ManyGroups(1000, 10, reps);
      ManyGroups(10000, 10, reps);
    }
  }
  return 0;
}
