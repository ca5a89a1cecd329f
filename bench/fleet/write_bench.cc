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
#include "lib/command_line.h"
#include "server/store/etcd/etcd_client.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/process.h"

ABSL_FLAG(double, seconds, 4, "length of each phase");
ABSL_FLAG(int, rounds, 3, "times the whole sequence runs");
ABSL_FLAG(int, writers, 16, "concurrent writers of the many-writer phases");

namespace aside {
namespace {

constexpr char kToken[] = "bench-admin-token";

struct Server {
  std::unique_ptr<testing::Process> process;
  std::shared_ptr<grpc::Channel> channel;
};

absl::StatusOr<Server> StartServer(const std::string& state_dir,
                                   const std::string& config) {
  const int port = testing::PickUnusedPort();
  auto process = testing::Process::Start(
      {testing::BinDir() + "/aside-server", "--listen",
       absl::StrCat("127.0.0.1:", port), "--metrics", "", "--log-level", "warn",
       "--health-listen", "", "--state-dir", state_dir, "--config", config});
  if (!process.ok()) return process.status();
  Server s;
  s.process = *std::move(process);
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
// writes per second (failures end the run with an error).
absl::StatusOr<double> Rate(int n,
                            const std::function<absl::Status(int)>& write) {
  const absl::Duration length = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  std::atomic<int64_t> acked{0};
  std::atomic<bool> failed{false};
  std::string error;
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  const absl::Time end = start + length;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      while (absl::Now() < end && !failed) {
        absl::Status s = write(w);
        if (!s.ok()) {
          if (!failed.exchange(true)) error = s.ToString();
          return;
        }
        ++acked;
      }
    });
  }
  for (std::thread& t : threads) t.join();
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

int Run() {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int many = absl::GetFlag(FLAGS_writers);
  testing::TempDir dir;
  const std::string tokens =
      dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  auto cluster = testing::EtcdCluster::Start();
  if (!cluster.ok()) {
    std::cerr << "write_bench: " << cluster.status() << "\n";
    return 1;
  }
  const std::string sqlite_config = dir.WriteFile(
      "sqlite.yaml", absl::StrCat("admin:\n  token_file: ", tokens, "\n"));
  const std::string etcd_config = dir.WriteFile(
      "etcd.yaml",
      absl::StrCat("store:\n  type: etcd\n  etcd:\n    endpoints: [",
                   absl::StrJoin((*cluster)->endpoints(), ", "),
                   "]\nadmin:\n  token_file: ", tokens, "\n"));
  auto sqlite = StartServer(dir.path() + "/state-sqlite", sqlite_config);
  auto etcd = StartServer(dir.path() + "/state-etcd", etcd_config);
  if (!sqlite.ok() || !etcd.ok()) {
    std::cerr << "write_bench: " << sqlite.status() << " " << etcd.status()
              << "\n";
    return 1;
  }
  for (Server* s : {&*sqlite, &*etcd}) {
    if (absl::Status st = CreateGroups(s->channel, many); !st.ok()) {
      std::cerr << "write_bench: " << st << "\n";
      return 1;
    }
  }
  server::etcd::EtcdClientOptions options;
  options.endpoints = (*cluster)->endpoints();
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

constexpr char kUsage[] =
    R"(usage: write_bench [--seconds S] [--rounds N] [--writers N]

Starts a 3-member etcd cluster, an aside-server on SQLite and one on the
etcd store, and prints, as JSON, acknowledged Admin writes per second from
1 and N concurrent writers (each on its own group) against bare etcd Txns
and Puts from the same number of writers in the same run.
)";

}  // namespace
}  // namespace aside

int main(int argc, char** argv) {
  if (auto args = aside::ParseCommandLine(argc, argv, {.usage = aside::kUsage});
      !args.ok()) {
    std::cerr << "write_bench: " << args.status().message() << "\n";
    return 2;
  }
  return aside::Run();
}
