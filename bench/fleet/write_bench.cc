// Acknowledged Admin writes per second with 1 and 16 concurrent writers,
// on SQLite and on a real 3-member etcd cluster, against the store's own
// floor measured in the same run (DESIGN.md §12, "Churn"; issue 29 item 1):
//
//   sqlite N: one aside-server with its SQLite state (synchronous=FULL);
//   etcd N:   one aside-server with store: {type: etcd} on the cluster;
//   bare txn N / bare put N: N threads of this process, each on its own
//             key, making the conditional Txn an Admin write makes (compare
//             the key's mod_revision, put a value of the stored group's
//             size), or a plain Put, through one etcd client.
//
// Each Admin writer toggles the drain of the one backend of its own group
// (DrainBackends), waiting for each answer before the next. Every phase
// runs for --seconds; --rounds repeats the whole sequence, so that each
// round's ratios compare phases measured minutes apart at most. Prints one
// JSON object: writes/s per phase and round, and the ratios.
//
// --matrix: 1, 16 and 64 writers spread over 1, 10 and 100 groups (writer
// w drains backend w / G of group w % G), on each store, each cell against
// the store's own batched-commit rate in the same run: a bare loop, from
// one thread, of the commits the server made, with the batch size it made
// them at (the mean of aside_store_commit_writes over the cell): SQLite
// through the server's own StateStore::WriteBatch (one transaction,
// synchronous=FULL), etcd as one Txn of that many guarded Puts of the
// stored value. Writes to one group fold into one stored definition
// (aside_store_writes_folded_total): the floor's stored writes count for
// as many Admin writes as the server's carried, on average. Per cell:
// acknowledged writes/s and ack p99, the floor's writes/s and commit p99,
// and the two ratios.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "bench/load/latency.h"
#include "lib/command_line.h"
#include "server/store/etcd/etcd_client.h"
#include "server/store/state_store.h"
#include "tests/abuse/scraped_metric.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/process.h"

ABSL_FLAG(double, seconds, 4, "length of each phase");
ABSL_FLAG(int, rounds, 3, "times the whole sequence runs");
ABSL_FLAG(int, writers, 16, "concurrent writers of the many-writer phases");
ABSL_FLAG(bool, matrix, false,
          "writers x groups on each store, against the batched-commit floor");

namespace aside {
namespace {

constexpr char kToken[] = "bench-admin-token";

struct Server {
  std::unique_ptr<testing::Process> process;
  std::shared_ptr<grpc::Channel> channel;
  int metrics_port = 0;
};

absl::StatusOr<Server> StartServer(const std::string& state_dir,
                                   const std::string& config) {
  const int port = testing::PickUnusedPort();
  const int metrics_port = testing::PickUnusedPort();
  auto process = testing::Process::Start(
      {testing::BinDir() + "/aside-server", "--listen",
       absl::StrCat("127.0.0.1:", port), "--metrics",
       absl::StrCat("127.0.0.1:", metrics_port), "--log-level", "warn",
       "--health-listen", "", "--state-dir", state_dir, "--config", config});
  if (!process.ok()) return process.status();
  Server s;
  s.process = *std::move(process);
  s.metrics_port = metrics_port;
  s.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                  grpc::InsecureChannelCredentials());
  if (!s.channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::seconds(30))) {
    return absl::UnavailableError("aside-server did not come up");
  }
  return s;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  return c;
}

// Runs `write(writer)` in `n` threads for --seconds; returns acknowledged
// writes per second (failures end the run with an error). With
// `latencies`, each write's time is added to it.
absl::StatusOr<double> Rate(int n,
                            const std::function<absl::Status(int)>& write,
                            bench::Samples* latencies = nullptr) {
  const absl::Duration length = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::atomic<int64_t> acked{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::vector<std::thread> threads;
  std::vector<bench::Samples> per_thread(n);
  const absl::Time start = absl::Now();
  const absl::Time end = start + length;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      while (absl::Now() < end && !failed) {
        const absl::Time sent = absl::Now();
        absl::Status s = write(w);
        if (!s.ok()) {
          if (!failed.exchange(true)) error = s.ToString();
          return;
        }
        ++acked;
        if (latencies != nullptr) {
          per_thread[w].Add(absl::ToInt64Nanoseconds(absl::Now() - sent));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (latencies != nullptr) {
    for (const bench::Samples& t : per_thread) {
      latencies->Merge(t);
    }
  }
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  if (failed) return absl::InternalError(error);
  return static_cast<double>(acked) / elapsed;
}

// Groups w0..w<n-1>, one backend each.
absl::Status CreateGroups(const std::shared_ptr<grpc::Channel>& channel,
                          int n) {
  auto admin = v1::Admin::NewStub(channel);
  for (int w = 0; w < n; ++w) {
    v1::CreateGroupRequest req;
    req.mutable_group()->set_name(absl::StrCat("w", w));
    req.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    req.mutable_group()->add_backends()->set_address(
        absl::StrCat("127.0.0.1:", 2000 + w));
    v1::Group out;
    grpc::Status s = admin->CreateGroup(Context().get(), req, &out);
    if (!s.ok() && s.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      return absl::InternalError(absl::StrCat("create: ", s.error_message()));
    }
  }
  return absl::OkStatus();
}

// Admin writers on `channel`: writer w toggles the drain of its group.
std::function<absl::Status(int)> AdminWriter(
    const std::shared_ptr<grpc::Channel>& channel, int n) {
  auto admin = std::shared_ptr<v1::Admin::Stub>(v1::Admin::NewStub(channel));
  auto drained = std::make_shared<std::vector<char>>(n, 0);
  return [admin, drained](int w) -> absl::Status {
    v1::DrainBackendsRequest req;
    req.set_group(absl::StrCat("w", w));
    req.add_addresses(absl::StrCat("127.0.0.1:", 2000 + w));
    (*drained)[w] = !(*drained)[w];
    req.set_drained((*drained)[w]);
    v1::Group out;
    grpc::Status s = admin->DrainBackends(Context().get(), req, &out);
    if (!s.ok()) {
      return absl::InternalError(absl::StrCat("drain: ", s.error_message()));
    }
    return absl::OkStatus();
  };
}

// A 3-member etcd cluster and two servers, one on SQLite and one on it.
struct Setup {
  testing::TempDir dir;
  std::unique_ptr<testing::EtcdCluster> cluster;
  Server sqlite;
  Server etcd;

  static absl::StatusOr<std::unique_ptr<Setup>> Start() {
    auto setup = std::make_unique<Setup>();
    const std::string tokens =
        setup->dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    auto cluster = testing::EtcdCluster::Start();
    if (!cluster.ok()) return cluster.status();
    setup->cluster = *std::move(cluster);
    const std::string sqlite_config = setup->dir.WriteFile(
        "sqlite.yaml", absl::StrCat("admin:\n  token_file: ", tokens, "\n"));
    const std::string etcd_config = setup->dir.WriteFile(
        "etcd.yaml",
        absl::StrCat("store:\n  type: etcd\n  etcd:\n    endpoints: [",
                     absl::StrJoin(setup->cluster->endpoints(), ", "),
                     "]\nadmin:\n  token_file: ", tokens, "\n"));
    auto sqlite =
        StartServer(setup->dir.path() + "/state-sqlite", sqlite_config);
    if (!sqlite.ok()) return sqlite.status();
    auto etcd = StartServer(setup->dir.path() + "/state-etcd", etcd_config);
    if (!etcd.ok()) return etcd.status();
    setup->sqlite = *std::move(sqlite);
    setup->etcd = *std::move(etcd);
    return setup;
  }
};

int Run() {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int many = absl::GetFlag(FLAGS_writers);
  auto setup = Setup::Start();
  if (!setup.ok()) {
    std::cerr << "write_bench: " << setup.status() << "\n";
    return 1;
  }
  std::unique_ptr<testing::EtcdCluster>& cluster = (*setup)->cluster;
  Server* sqlite = &(*setup)->sqlite;
  Server* etcd = &(*setup)->etcd;
  for (Server* s : {sqlite, etcd}) {
    if (absl::Status st = CreateGroups(s->channel, many); !st.ok()) {
      std::cerr << "write_bench: " << st << "\n";
      return 1;
    }
  }
  server::etcd::EtcdClientOptions options;
  options.endpoints = cluster->endpoints();
  auto client = server::etcd::EtcdClient::Create(options);
  if (!client.ok()) return 1;
  std::string value;
  {
    auto kv = (*client)->Get("/aside/groups/w0");
    if (!kv.ok() || !kv->has_value()) return 1;
    value = (*kv)->value;
  }
  // The bare writers' keys and the revisions they last wrote.
  std::vector<int64_t> bare_revision(many, 0);
  auto bare_txn = [&](int w) -> absl::Status {
    const std::string key = absl::StrCat("/bench/bare/", w);
    auto txn = (*client)->Txn(
        {bare_revision[w] == 0
             ? server::etcd::Compare::Absent(key)
             : server::etcd::Compare::ModRevision(key, bare_revision[w])},
        {server::etcd::Op::Put(key, value)});
    if (!txn.ok()) return txn.status();
    if (!txn->succeeded) return absl::AbortedError("bare txn lost");
    bare_revision[w] = txn->revision;
    return absl::OkStatus();
  };
  auto bare_put = [&](int w) -> absl::Status {
    return (*client)->Put(absl::StrCat("/bench/put/", w), value).status();
  };
  const auto sqlite_writer = AdminWriter(sqlite->channel, many);
  const auto etcd_writer = AdminWriter(etcd->channel, many);
  struct Phase {
    std::string name;
    int writers;
    std::function<absl::Status(int)> write;
  };
  const std::vector<Phase> phases = {
      {"sqlite_1", 1, sqlite_writer},
      {absl::StrCat("sqlite_", many), many, sqlite_writer},
      {"etcd_1", 1, etcd_writer},
      {absl::StrCat("etcd_", many), many, etcd_writer},
      {"bare_txn_1", 1, bare_txn},
      {absl::StrCat("bare_txn_", many), many, bare_txn},
      {absl::StrCat("bare_put_", many), many, bare_put},
  };
  std::map<std::string, std::vector<double>> rates;
  for (int round = 0; round < rounds; ++round) {
    for (const Phase& p : phases) {
      absl::StatusOr<double> r = Rate(p.writers, p.write);
      if (!r.ok()) {
        std::cerr << "write_bench: " << p.name << ": " << r.status() << "\n";
        return 1;
      }
      rates[p.name].push_back(*r);
      std::cerr << "round " << round << " " << p.name << ": " << *r
                << " writes/s\n";
    }
  }
  const std::string m = absl::StrCat("_", many);
  auto ratio = [&](const std::string& a, const std::string& b) {
    std::vector<double> out;
    for (size_t i = 0; i < rates[a].size(); ++i) {
      out.push_back(rates[a][i] / rates[b][i]);
    }
    return out;
  };
  auto list = [](const std::vector<double>& v) {
    std::vector<std::string> s;
    for (double d : v) s.push_back(absl::StrFormat("%.2f", d));
    return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
  };
  std::printf("{\"seconds_per_phase\": %.1f, \"value_bytes\": %zu,\n",
              absl::GetFlag(FLAGS_seconds), value.size());
  std::printf(" \"writes_per_second\": {\n");
  for (size_t i = 0; i < phases.size(); ++i) {
    std::printf("  \"%s\": %s%s\n", phases[i].name.c_str(),
                list(rates[phases[i].name]).c_str(),
                i + 1 < phases.size() ? "," : "");
  }
  std::printf(" },\n");
  std::printf(" \"etcd%s_vs_etcd_1\": %s,\n", m.c_str(),
              list(ratio("etcd" + m, "etcd_1")).c_str());
  std::printf(" \"etcd%s_vs_bare_txn%s\": %s,\n", m.c_str(), m.c_str(),
              list(ratio("etcd" + m, "bare_txn" + m)).c_str());
  std::printf(" \"etcd%s_vs_bare_put%s\": %s,\n", m.c_str(), m.c_str(),
              list(ratio("etcd" + m, "bare_put" + m)).c_str());
  std::printf(" \"sqlite%s_vs_sqlite_1\": %s}\n", m.c_str(),
              list(ratio("sqlite" + m, "sqlite_1")).c_str());
  return 0;
}

// aside_store_commit_writes' sum and count on `s`'s metrics port.
absl::StatusOr<std::pair<double, double>> CommitWrites(const Server& s) {
  const double sum =
      testing::ScrapedMetric(s.metrics_port, "aside_store_commit_writes_sum");
  const double count =
      testing::ScrapedMetric(s.metrics_port, "aside_store_commit_writes_count");
  if (sum < 0 || count < 0) {
    return absl::NotFoundError("no aside_store_commit_writes on /metrics");
  }
  return std::make_pair(sum, count);
}

// aside_store_writes_folded_total on `s`'s metrics port.
absl::StatusOr<double> FoldedWrites(const Server& s) {
  const double folded =
      testing::ScrapedMetric(s.metrics_port, "aside_store_writes_folded_total");
  if (folded < 0) {
    return absl::NotFoundError(
        "no aside_store_writes_folded_total on /metrics");
  }
  return folded;
}

constexpr int kMatrixWriters[] = {1, 16, 64};
constexpr int kMatrixGroups[] = {1, 10, 100};
constexpr int kMostWriters = 64;

std::string MatrixGroup(int groups, int g) {
  return absl::StrCat("m", groups, "_", g);
}

// The definition of group g of a G-group cell: one backend for each writer
// it takes at the most.
v1::Group MatrixDefinition(int groups, int g) {
  v1::Group d;
  d.set_name(MatrixGroup(groups, g));
  d.mutable_health_check()->set_kind(v1::HealthCheck::NONE);
  const int backends = (kMostWriters + groups - 1) / groups;
  for (int b = 0; b < backends; ++b) {
    d.add_backends()->set_address(absl::StrCat("127.0.0.1:", 3000 + b));
  }
  return d;
}

struct Cell {
  std::string store;
  int writers = 0;
  int groups = 0;
  double rate = 0;  // acknowledged Admin writes/s
  double ack_p99_ms = 0;
  double batch = 0;       // mean stored writes per commit the server made
  double fold = 1;        // mean Admin writes per stored write
  double floor_rate = 0;  // Admin writes/s of the bare batched loop
  double floor_commit_p99_ms = 0;
};

int RunMatrix() {
  auto setup = Setup::Start();
  if (!setup.ok()) {
    std::cerr << "write_bench: " << setup.status() << "\n";
    return 1;
  }
  testing::TempDir& dir = (*setup)->dir;
  std::unique_ptr<testing::EtcdCluster>& cluster = (*setup)->cluster;
  Server* sqlite = &(*setup)->sqlite;
  Server* etcd = &(*setup)->etcd;
  server::etcd::EtcdClientOptions options;
  options.endpoints = cluster->endpoints();
  auto client = server::etcd::EtcdClient::Create(options);
  if (!client.ok()) return 1;
  auto floor_store =
      server::StateStore::Open(dir.path() + "/state-floor", uint64_t{1} << 30);
  if (!floor_store.ok()) {
    std::cerr << "write_bench: " << floor_store.status() << "\n";
    return 1;
  }
  // Every cell's groups, on both servers.
  for (Server* s : {sqlite, etcd}) {
    auto admin = v1::Admin::NewStub(s->channel);
    for (int groups : kMatrixGroups) {
      for (int g = 0; g < groups; ++g) {
        v1::CreateGroupRequest req;
        *req.mutable_group() = MatrixDefinition(groups, g);
        v1::Group out;
        grpc::Status st = admin->CreateGroup(Context().get(), req, &out);
        if (!st.ok() && st.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
          std::cerr << "write_bench: create: " << st.error_message() << "\n";
          return 1;
        }
      }
    }
  }
  const absl::Duration length = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::vector<Cell> cells;
  int64_t floor_key = 0;  // fresh etcd keys for each floor loop
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    for (const char* store : {"sqlite", "etcd"}) {
      const Server& server = std::string(store) == "sqlite" ? *sqlite : *etcd;
      auto admin =
          std::shared_ptr<v1::Admin::Stub>(v1::Admin::NewStub(server.channel));
      for (int groups : kMatrixGroups) {
        std::string value;  // the stored value of one of the cell's groups
        if (std::string(store) == "etcd") {
          auto kv = (*client)->Get(
              absl::StrCat("/aside/groups/", MatrixGroup(groups, 0)));
          if (!kv.ok() || !kv->has_value()) return 1;
          value = (*kv)->value;
        }
        for (int writers : kMatrixWriters) {
          Cell cell{.store = store, .writers = writers, .groups = groups};
          auto drained = std::make_shared<std::vector<char>>(writers, 0);
          auto write = [&](int w) -> absl::Status {
            v1::DrainBackendsRequest req;
            req.set_group(MatrixGroup(groups, w % groups));
            req.add_addresses(absl::StrCat("127.0.0.1:", 3000 + w / groups));
            (*drained)[w] = !(*drained)[w];
            req.set_drained((*drained)[w]);
            v1::Group out;
            grpc::Status st = admin->DrainBackends(Context().get(), req, &out);
            return st.ok() ? absl::OkStatus()
                           : absl::InternalError(st.error_message());
          };
          auto before = CommitWrites(server);
          auto folded_before = FoldedWrites(server);
          bench::Samples acks;
          auto rate = Rate(writers, write, &acks);
          auto after = CommitWrites(server);
          auto folded_after = FoldedWrites(server);
          if (!rate.ok() || !before.ok() || !after.ok() ||
              !folded_before.ok() || !folded_after.ok()) {
            std::cerr << "write_bench: " << store << " " << writers << "x"
                      << groups << ": " << rate.status() << before.status()
                      << after.status() << folded_before.status() << "\n";
            return 1;
          }
          cell.rate = *rate;
          cell.ack_p99_ms = acks.PercentileMicros(99) / 1000;
          const double commits = after->second - before->second;
          const double stored = after->first - before->first;
          cell.batch = commits > 0 ? stored / commits : 1;
          cell.fold = stored > 0
                          ? (stored + *folded_after - *folded_before) / stored
                          : 1;
          // The floor: the same commits, batch after batch, from one thread.
          const int batch =
              std::max(1, std::min(groups, static_cast<int>(cell.batch + 0.5)));
          bench::Samples commit_times;
          int64_t written = 0;
          const absl::Time start = absl::Now();
          if (std::string(store) == "sqlite") {
            std::vector<v1::Group> defs;
            for (int i = 0; i < batch; ++i) {
              defs.push_back(MatrixDefinition(groups, i));
              defs.back().set_name(absl::StrCat("floor_", i));
            }
            std::vector<server::StateStore::Write> writes;
            for (const v1::Group& d : defs) {
              writes.push_back({.name = d.name(), .definition = &d});
            }
            while (absl::Now() - start < length) {
              const absl::Time t = absl::Now();
              for (const absl::Status& st :
                   (*floor_store)->WriteBatch(writes)) {
                if (!st.ok()) {
                  std::cerr << "write_bench: floor: " << st << "\n";
                  return 1;
                }
              }
              commit_times.Add(absl::ToInt64Nanoseconds(absl::Now() - t));
              written += batch;
            }
          } else {
            std::vector<std::string> keys;
            std::vector<int64_t> revisions(batch, 0);
            for (int i = 0; i < batch; ++i) {
              keys.push_back(absl::StrCat("/bench/floor/", floor_key++));
            }
            while (absl::Now() - start < length) {
              std::vector<server::etcd::Compare> guards;
              std::vector<server::etcd::Op> puts;
              for (int i = 0; i < batch; ++i) {
                guards.push_back(revisions[i] == 0
                                     ? server::etcd::Compare::Absent(keys[i])
                                     : server::etcd::Compare::ModRevision(
                                           keys[i], revisions[i]));
                puts.push_back(server::etcd::Op::Put(keys[i], value));
              }
              const absl::Time t = absl::Now();
              auto txn = (*client)->Txn(guards, puts);
              if (!txn.ok() || !txn->succeeded) {
                std::cerr << "write_bench: floor txn failed\n";
                return 1;
              }
              commit_times.Add(absl::ToInt64Nanoseconds(absl::Now() - t));
              for (int64_t& r : revisions) r = txn->revision;
              written += batch;
            }
          }
          cell.floor_rate = static_cast<double>(written) * cell.fold /
                            absl::ToDoubleSeconds(absl::Now() - start);
          cell.floor_commit_p99_ms = commit_times.PercentileMicros(99) / 1000;
          std::cerr << absl::StrFormat(
              "round %d %s %dx%d: %.0f/s (p99 %.1f ms, %.1f per commit, "
              "%.1f per stored write) floor %.0f/s (p99 %.1f ms): %.2fx\n",
              round, store, writers, groups, cell.rate, cell.ack_p99_ms,
              cell.batch, cell.fold, cell.floor_rate, cell.floor_commit_p99_ms,
              cell.rate / cell.floor_rate);
          cells.push_back(cell);
        }
      }
    }
  }
  std::printf("{\"seconds_per_phase\": %.1f, \"cells\": [\n",
              absl::GetFlag(FLAGS_seconds));
  for (size_t i = 0; i < cells.size(); ++i) {
    const Cell& c = cells[i];
    std::printf(
        "  {\"store\": \"%s\", \"writers\": %d, \"groups\": %d, "
        "\"writes_per_second\": %.0f, \"ack_p99_ms\": %.2f, "
        "\"writes_per_commit\": %.2f, \"writes_per_stored_write\": %.2f, "
        "\"floor_writes_per_second\": %.0f, "
        "\"floor_commit_p99_ms\": %.2f, \"vs_floor\": %.2f, "
        "\"p99_vs_floor_commit_p99\": %.2f}%s\n",
        c.store.c_str(), c.writers, c.groups, c.rate, c.ack_p99_ms, c.batch,
        c.fold, c.floor_rate, c.floor_commit_p99_ms, c.rate / c.floor_rate,
        c.ack_p99_ms / c.floor_commit_p99_ms, i + 1 < cells.size() ? "," : "");
  }
  std::printf("]}\n");
  return 0;
}

constexpr char kUsage[] =
    R"(usage: write_bench [--seconds S] [--rounds N] [--writers N] [--matrix]

Starts a 3-member etcd cluster, an aside-server on SQLite and one on the
etcd store, and prints, as JSON, acknowledged Admin writes per second from
1 and N concurrent writers (each on its own group) against bare etcd Txns
and Puts from the same number of writers in the same run. With --matrix:
1, 16 and 64 writers over 1, 10 and 100 groups on each store, each against
the store's own commits at the batch size the server made.
)";

}  // namespace
}  // namespace aside

int main(int argc, char** argv) {
  if (auto args = aside::ParseCommandLine(argc, argv, {.usage = aside::kUsage});
      !args.ok()) {
    std::cerr << "write_bench: " << args.status().message() << "\n";
    return 2;
  }
  return absl::GetFlag(FLAGS_matrix) ? aside::RunMatrix() : aside::Run();
}
