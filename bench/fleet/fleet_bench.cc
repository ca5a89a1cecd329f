// The fleet on etcd (DESIGN.md §8, "fleet"): a real 3-member etcd cluster
// and three real aside-server replicas on loopback.
//
//   write: an Admin UpdateGroup through replica A (validated, a conditional
//          Txn in etcd, applied, acknowledged) against a bare etcd Put of a
//          value of the same size to the same cluster, alternating;
//   propagation: from sending an Admin write on A until a Watch subscriber
//          on C holds the new generation, against the same write and
//          subscriber on one replica (A writes, A's subscriber).
// Prints one JSON object with p50/p99 of each and their ratios.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "lib/command_line.h"
#include "server/store/etcd/etcd_client.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/process.h"

ABSL_FLAG(int, iterations, 300, "measured writes of each kind");

namespace aside {
namespace {

constexpr char kToken[] = "bench-admin-token";

struct Replica {
  std::unique_ptr<testing::Process> process;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<v1::LoadBalancer::Stub> lb;
};

absl::StatusOr<Replica> StartReplica(const std::string& dir, int i,
                                     const std::string& config) {
  std::vector<std::string> argv = {testing::BinDir() + "/aside-server",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--metrics",
                                   "",
                                   "--log-level",
                                   "warn",
                                   "--health-listen",
                                   "",
                                   "--state-dir",
                                   absl::StrCat(dir, "/state-", i),
                                   "--config",
                                   config};
  // Logged at warn: the port comes from the health check below instead.
  const int port = testing::PickUnusedPort();
  argv[2] = absl::StrCat("127.0.0.1:", port);
  auto process = testing::Process::Start(argv);
  if (!process.ok()) return process.status();
  Replica r;
  r.process = *std::move(process);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(30))) {
    return absl::UnavailableError(absl::StrCat("replica ", i, " not up"));
  }
  r.admin = v1::Admin::NewStub(channel);
  r.lb = v1::LoadBalancer::NewStub(channel);
  return r;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  return c;
}

v1::UpdateGroupRequest Update(int i) {
  v1::UpdateGroupRequest req;
  v1::Group* g = req.mutable_group();
  g->set_name("bench");
  g->add_backends()->set_address(absl::StrCat("127.0.0.1:", 1000 + i % 50000));
  req.mutable_update_mask()->add_paths("backends");
  return req;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// One Admin write on `writer`; returns the time until `watcher`'s stream
// delivered a generation newer than `*generation` (updated).
double Propagation(Replica& writer,
                   grpc::ClientReaderInterface<v1::GroupUpdate>* stream, int i,
                   uint64_t* generation) {
  const absl::Time start = absl::Now();
  v1::Group out;
  if (!writer.admin->UpdateGroup(Context().get(), Update(i), &out).ok()) {
    return -1;
  }
  v1::GroupUpdate update;
  while (stream->Read(&update)) {
    if (update.generation() >= out.generation()) {
      *generation = update.generation();
      return absl::ToDoubleMicroseconds(absl::Now() - start);
    }
  }
  return -1;
}

int Run() {
  const int n = absl::GetFlag(FLAGS_iterations);
  auto cluster = testing::EtcdCluster::Start();
  if (!cluster.ok()) {
    std::cerr << "fleet_bench: " << cluster.status() << "\n";
    return 1;
  }
  testing::TempDir dir;
  const std::string tokens =
      dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
  const std::string config = dir.WriteFile(
      "aside.yaml",
      absl::StrCat("store:\n  type: etcd\n  etcd:\n    endpoints: [",
                   absl::StrJoin((*cluster)->endpoints(), ", "),
                   "]\nadmin:\n  token_file: ", tokens, "\n"));
  std::vector<Replica> replicas;
  for (int i = 0; i < 3; ++i) {
    auto r = StartReplica(dir.path(), i, config);
    if (!r.ok()) {
      std::cerr << "fleet_bench: " << r.status() << "\n";
      return 1;
    }
    replicas.push_back(*std::move(r));
  }
  Replica& a = replicas[0];
  Replica& c = replicas[2];
  {
    v1::CreateGroupRequest req;
    req.mutable_group()->set_name("bench");
    req.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    req.mutable_group()->add_backends()->set_address("127.0.0.1:999");
    v1::Group out;
    grpc::Status s = a.admin->CreateGroup(Context().get(), req, &out);
    if (!s.ok()) {
      std::cerr << "fleet_bench: create: " << s.error_message() << "\n";
      return 1;
    }
  }
  server::etcd::EtcdClientOptions options;
  options.endpoints = (*cluster)->endpoints();
  auto client = server::etcd::EtcdClient::Create(options);
  if (!client.ok()) return 1;
  std::string value;
  {
    // The stored value of the group: the same size for the bare Put.
    auto kv = (*client)->Get("/aside/groups/bench");
    if (!kv.ok() || !kv->has_value()) return 1;
    value = (*kv)->value;
  }

  std::vector<double> admin_us, put_us;
  for (int i = 0; i < n + 20; ++i) {
    absl::Time start = absl::Now();
    v1::Group out;
    grpc::Status s = a.admin->UpdateGroup(Context().get(), Update(i), &out);
    const double admin = absl::ToDoubleMicroseconds(absl::Now() - start);
    start = absl::Now();
    auto put = (*client)->Put("/bench/bare", value);
    const double bare = absl::ToDoubleMicroseconds(absl::Now() - start);
    if (!s.ok() || !put.ok()) {
      std::cerr << "fleet_bench: write failed: " << s.error_message() << " "
                << put.status() << "\n";
      return 1;
    }
    if (i >= 20) {  // warm-up
      admin_us.push_back(admin);
      put_us.push_back(bare);
    }
  }

  // Subscribers on C (another replica) and on A (the writer itself).
  auto subscribe = [](Replica& r, grpc::ClientContext* ctx) {
    v1::WatchRequest req;
    req.add_groups("bench");
    auto stream = r.lb->Watch(ctx, req);
    v1::GroupUpdate first;
    stream->Read(&first);
    return stream;
  };
  grpc::ClientContext ctx_c, ctx_a;
  auto stream_c = subscribe(c, &ctx_c);
  auto stream_a = subscribe(a, &ctx_a);
  std::vector<double> fleet_us, single_us;
  uint64_t gen_c = 0, gen_a = 0;
  for (int i = 0; i < n; ++i) {
    const double fleet = Propagation(a, stream_c.get(), 2 * i, &gen_c);
    // Keep A's subscriber current too (its update for the write above).
    v1::GroupUpdate skip;
    stream_a->Read(&skip);
    const double single = Propagation(a, stream_a.get(), 2 * i + 1, &gen_a);
    stream_c->Read(&skip);
    if (fleet < 0 || single < 0) {
      std::cerr << "fleet_bench: propagation failed\n";
      return 1;
    }
    fleet_us.push_back(fleet);
    single_us.push_back(single);
  }
  ctx_c.TryCancel();
  ctx_a.TryCancel();

  const double admin_p50 = Percentile(admin_us, 0.5);
  const double put_p50 = Percentile(put_us, 0.5);
  const double fleet_p99 = Percentile(fleet_us, 0.99);
  const double single_p99 = Percentile(single_us, 0.99);
  std::printf(
      "{\"iterations\": %d, \"value_bytes\": %zu,\n"
      " \"admin_write_us\": {\"p50\": %.0f, \"p99\": %.0f},\n"
      " \"bare_put_us\": {\"p50\": %.0f, \"p99\": %.0f},\n"
      " \"admin_vs_put_p50\": %.2f,\n"
      " \"propagation_a_to_c_us\": {\"p50\": %.0f, \"p99\": %.0f},\n"
      " \"propagation_single_us\": {\"p50\": %.0f, \"p99\": %.0f},\n"
      " \"fleet_vs_single_p99\": %.2f}\n",
      n, value.size(), admin_p50, Percentile(admin_us, 0.99), put_p50,
      Percentile(put_us, 0.99), admin_p50 / put_p50, Percentile(fleet_us, 0.5),
      fleet_p99, Percentile(single_us, 0.5), single_p99,
      fleet_p99 / single_p99);
  return 0;
}

constexpr char kUsage[] = R"(usage: fleet_bench [--iterations N]

Starts a 3-member etcd cluster and three aside-server replicas on loopback
and prints, as JSON, Admin write latency against a bare etcd Put and the
time from a write on replica A until a Watch subscriber on replica C holds
it, against a subscriber on A itself.
)";

}  // namespace
}  // namespace aside

int main(int argc, char** argv) {
  if (auto args = aside::ParseCommandLine(argc, argv, {.usage = aside::kUsage});
      !args.ok()) {
    std::cerr << "fleet_bench: " << args.status().message() << "\n";
    return 2;
  }
  return aside::Run();
}
