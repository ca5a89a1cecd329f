// One probe per target per fleet (DESIGN.md §11): real aside-server
// replicas on a real 3-member etcd cluster, probing loopback TCP backends
// that count the connections they accept.
//
//   probes: probes per target per interval with 1, 3 and 5 replicas over a
//           steady window (no membership change), and the ratio to one
//           replica alone (the goal: 1.00);
//   takeover: with 3 replicas, SIGKILL one and measure the longest time any
//           target then goes without a probe, as a ratio of the lease TTL
//           (the goal: at most TTL + one interval).
//   cpu:    10 000 targets, one replica alone against each of 3 replicas:
//           process CPU per replica, and apart from it the prober thread's.
// Prints one JSON object.
#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "lib/command_line.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/process.h"

ABSL_FLAG(int, targets, 100, "TCP targets (one backend each)");
ABSL_FLAG(int, intervals, 20, "probe intervals in each measured window");
ABSL_FLAG(int, interval_ms, 200, "health-check interval");
ABSL_FLAG(int, member_ttl_s, 2, "fleet.member_ttl in seconds");
ABSL_FLAG(int, cpu_targets, 10000,
          "targets of the CPU comparison (100 backends x N/100 check "
          "specs, 1 s interval); 0 skips it");
ABSL_FLAG(int, cpu_settle_s, 8,
          "seconds between creating the CPU part's groups and its window");
ABSL_FLAG(bool, probe_fleets, true,
          "run the probes and takeover parts (false: only the CPU part)");

namespace aside {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

constexpr char kToken[] = "bench-admin-token";

// Loopback listeners on one thread, each counting accepted connections.
class CountingBackends {
 public:
  explicit CountingBackends(int n) : counts_(n) {
    for (int i = 0; i < n; ++i) {
      auto a = std::make_unique<tcp::acceptor>(
          io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
      ports_.push_back(a->local_endpoint().port());
      acceptors_.push_back(std::move(a));
      Accept(i);
    }
    thread_ = std::thread([this] { io_.run(); });
  }
  ~CountingBackends() {
    io_.stop();
    thread_.join();
  }
  const std::vector<uint16_t>& ports() const { return ports_; }
  std::vector<uint64_t> Counts() const {
    std::vector<uint64_t> out;
    for (const auto& c : counts_) {
      out.push_back(c.load());
    }
    return out;
  }

 private:
  void Accept(int i) {
    acceptors_[i]->async_accept(
        [this, i](boost::system::error_code ec, tcp::socket socket) {
          if (ec) {
            return;
          }
          ++counts_[i];
          boost::system::error_code ignored;
          socket.close(ignored);
          Accept(i);
        });
  }

  asio::io_context io_;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::vector<uint16_t> ports_;
  std::vector<std::atomic<uint64_t>> counts_;
  std::thread thread_;
};

struct Replica {
  std::unique_ptr<testing::Process> process;
  std::unique_ptr<v1::Admin::Stub> admin;
};

absl::StatusOr<Replica> StartReplica(const std::string& dir,
                                     const std::string& name,
                                     const std::string& config) {
  const int port = testing::PickUnusedPort();
  // Errors only: nothing reads a replica's stderr here, and at 10 000
  // targets its warnings (each transition to unhealthy is one) could fill
  // the pipe and block the replica.
  std::vector<std::string> argv = {testing::BinDir() + "/aside-server",
                                   "--listen",
                                   absl::StrCat("127.0.0.1:", port),
                                   "--metrics",
                                   "",
                                   "--log-level",
                                   "error",
                                   "--health-listen",
                                   "",
                                   "--state-dir",
                                   absl::StrCat(dir, "/state-", name),
                                   "--config",
                                   config};
  auto process = testing::Process::Start(argv);
  if (!process.ok()) return process.status();
  Replica r;
  r.process = *std::move(process);
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::seconds(30))) {
    return absl::UnavailableError(absl::StrCat("replica ", name, " not up"));
  }
  r.admin = v1::Admin::NewStub(channel);
  return r;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  c->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  return c;
}

// User + system CPU time so far from a /proc stat file (a process's or a
// thread's); `comm` receives the command name.
absl::Duration StatCpu(const std::string& path, std::string* comm = nullptr) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses.
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos) {
    return absl::ZeroDuration();
  }
  if (comm != nullptr) *comm = text.substr(open + 1, close - open - 1);
  std::vector<std::string> f = absl::StrSplit(text.substr(close + 2), ' ');
  if (f.size() < 13) return absl::ZeroDuration();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return absl::Seconds((std::stod(f[11]) + std::stod(f[12])) / ticks);
}

absl::Duration ProcessCpu(pid_t pid) {
  return StatCpu(absl::StrCat("/proc/", pid, "/stat"));
}

// The CPU of the threads of `pid` named `name` (the health prober's).
absl::Duration ThreadCpu(pid_t pid, const std::string& name) {
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  absl::Duration total;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return total;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string comm;
    const absl::Duration cpu =
        StatCpu(absl::StrCat(dir, "/", e->d_name, "/stat"), &comm);
    if (comm == name) total += cpu;
  }
  closedir(d);
  return total;
}

// Mean CPU per replica per second: the whole process, and its prober thread.
struct ReplicaCpu {
  double process = 0;
  double prober = 0;
};

class Bench {
 public:
  Bench(testing::EtcdCluster& cluster, CountingBackends& backends)
      : cluster_(cluster), backends_(backends) {
    tokens_ = dir_.WriteFile("tokens", absl::StrCat(kToken, " admin\n"));
  }

  // A fleet of `n` replicas under its own prefix, with one group holding
  // every backend.
  absl::StatusOr<std::vector<Replica>> Fleet(int n, const std::string& prefix) {
    const std::string config = dir_.WriteFile(
        absl::StrCat(prefix, ".yaml"),
        absl::StrCat(
            "store:\n  type: etcd\n  etcd:\n    endpoints: [",
            absl::StrJoin(cluster_.endpoints(), ", "), "]\n    prefix: /",
            prefix, "/\n",
            "fleet:\n  member_ttl: ", absl::GetFlag(FLAGS_member_ttl_s),
            "s\nadmin:\n  token_file: ", tokens_, "\n"));
    std::vector<Replica> out;
    for (int i = 0; i < n; ++i) {
      auto r = StartReplica(dir_.path(), absl::StrCat(prefix, "-", i), config);
      if (!r.ok()) return r.status();
      out.push_back(*std::move(r));
    }
    v1::CreateGroupRequest req;
    v1::Group* g = req.mutable_group();
    g->set_name("bench");
    v1::HealthCheck* hc = g->mutable_health_check();
    hc->set_kind(v1::HealthCheck::TCP);
    hc->mutable_interval()->set_nanos(absl::GetFlag(FLAGS_interval_ms) *
                                      1'000'000);
    hc->mutable_timeout()->set_nanos(100'000'000);
    hc->set_jitter(0);
    for (uint16_t port : backends_.ports()) {
      g->add_backends()->set_address(absl::StrCat("127.0.0.1:", port));
    }
    v1::Group created;
    grpc::Status s = out[0].admin->CreateGroup(Context().get(), req, &created);
    if (!s.ok()) {
      return absl::InternalError(s.error_message());
    }
    return out;
  }

  // A fleet of `n` replicas probing `targets` targets: 100 backends, each
  // in targets / 100 groups whose checks differ in their timeout (so each
  // (backend, group) is a target of its own), every 1 s. Returns the mean
  // CPU per replica per second over a steady 10 s window.
  absl::StatusOr<ReplicaCpu> CpuPerReplica(int n, int targets,
                                           const std::string& prefix) {
    const std::string config = dir_.WriteFile(
        absl::StrCat(prefix, ".yaml"),
        absl::StrCat("store:\n  type: etcd\n  etcd:\n    endpoints: [",
                     absl::StrJoin(cluster_.endpoints(), ", "),
                     "]\n    prefix: /", prefix, "/\n",
                     "admin:\n  token_file: ", tokens_, "\n"));
    std::vector<Replica> fleet;
    for (int i = 0; i < n; ++i) {
      auto r = StartReplica(dir_.path(), absl::StrCat(prefix, "-", i), config);
      if (!r.ok()) return r.status();
      fleet.push_back(*std::move(r));
    }
    const int specs = std::max(1, targets / 100);
    for (int g = 0; g < specs; ++g) {
      v1::CreateGroupRequest req;
      v1::Group* group = req.mutable_group();
      group->set_name(absl::StrCat("cpu-", g));
      v1::HealthCheck* hc = group->mutable_health_check();
      hc->set_kind(v1::HealthCheck::TCP);
      hc->mutable_interval()->set_seconds(1);
      hc->mutable_timeout()->set_nanos((100 + g) * 1'000'000);
      for (int b = 0; b < 100 && b < static_cast<int>(backends_.ports().size());
           ++b) {
        group->add_backends()->set_address(
            absl::StrCat("127.0.0.1:", backends_.ports()[b]));
      }
      v1::Group created;
      grpc::Status st =
          fleet[0].admin->CreateGroup(Context().get(), req, &created);
      if (!st.ok()) return absl::InternalError(st.error_message());
    }
    // Settle: membership, first probes, and the publication of the first
    // states (one etcd Put per target, spread over the replicas).
    absl::SleepFor(absl::Seconds(absl::GetFlag(FLAGS_cpu_settle_s)));
    std::vector<absl::Duration> before;
    std::vector<absl::Duration> prober_before;
    for (Replica& r : fleet) {
      before.push_back(ProcessCpu(r.process->pid()));
      prober_before.push_back(ThreadCpu(r.process->pid(), "aside-prober"));
    }
    const absl::Time start = absl::Now();
    absl::SleepFor(absl::Seconds(10));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    ReplicaCpu total;
    for (size_t i = 0; i < fleet.size(); ++i) {
      const pid_t pid = fleet[i].process->pid();
      total.process += absl::ToDoubleSeconds(ProcessCpu(pid) - before[i]);
      total.prober += absl::ToDoubleSeconds(ThreadCpu(pid, "aside-prober") -
                                            prober_before[i]);
    }
    for (Replica& r : fleet) {
      r.process->Signal(SIGTERM);
      r.process->Wait(absl::Seconds(10));
    }
    const double per = static_cast<double>(fleet.size()) * seconds;
    return ReplicaCpu{total.process / per, total.prober / per};
  }

  // Probes per target per interval over a steady window.
  double ProbesPerTargetPerInterval() {
    const absl::Duration interval =
        absl::Milliseconds(absl::GetFlag(FLAGS_interval_ms));
    // Let membership settle and every replica load the group.
    absl::SleepFor(absl::Seconds(3));
    const std::vector<uint64_t> before = backends_.Counts();
    const absl::Time start = absl::Now();
    absl::SleepFor(absl::GetFlag(FLAGS_intervals) * interval);
    const std::vector<uint64_t> after = backends_.Counts();
    const double intervals = (absl::Now() - start) / interval;
    uint64_t total = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      total += after[i] - before[i];
    }
    return static_cast<double>(total) / before.size() / intervals;
  }

  // SIGKILLs `victim` and returns the longest time any target then went
  // without a probe.
  absl::Duration Takeover(Replica& victim) {
    const absl::Duration ttl = absl::Seconds(absl::GetFlag(FLAGS_member_ttl_s));
    victim.process->Signal(SIGKILL);
    victim.process->Wait(absl::Seconds(5));
    const absl::Time killed = absl::Now();
    std::vector<uint64_t> last = backends_.Counts();
    std::vector<absl::Time> last_probe(last.size(), killed);
    absl::Duration longest;
    while (absl::Now() < killed + 2 * ttl + absl::Seconds(2)) {
      absl::SleepFor(absl::Milliseconds(5));
      const std::vector<uint64_t> now = backends_.Counts();
      const absl::Time t = absl::Now();
      for (size_t i = 0; i < now.size(); ++i) {
        if (now[i] != last[i]) {
          longest = std::max(longest, t - last_probe[i]);
          last_probe[i] = t;
          last[i] = now[i];
        }
      }
    }
    return longest;
  }

 private:
  testing::EtcdCluster& cluster_;
  CountingBackends& backends_;
  testing::TempDir dir_;
  std::string tokens_;
};

int Run() {
  auto cluster = testing::EtcdCluster::Start();
  if (!cluster.ok()) {
    std::cerr << "fleet_probe_bench: " << cluster.status() << "\n";
    return 1;
  }
  // The backends before the servers would leak their listening sockets into
  // the children; here they only count, so it does not matter.
  CountingBackends backends(absl::GetFlag(FLAGS_targets));
  Bench bench(**cluster, backends);
  std::vector<std::pair<int, double>> rates;
  absl::Duration takeover;
  for (int n : {1, 3, 5}) {
    if (!absl::GetFlag(FLAGS_probe_fleets)) break;
    auto fleet = bench.Fleet(n, absl::StrCat("bench", n));
    if (!fleet.ok()) {
      std::cerr << "fleet_probe_bench: " << fleet.status() << "\n";
      return 1;
    }
    rates.emplace_back(n, bench.ProbesPerTargetPerInterval());
    if (n == 3) {
      takeover = bench.Takeover((*fleet)[2]);
    }
    for (Replica& r : *fleet) {
      r.process->Signal(SIGTERM);
      r.process->Wait(absl::Seconds(10));
    }
  }
  ReplicaCpu cpu1;
  ReplicaCpu cpu3;
  if (const int targets = absl::GetFlag(FLAGS_cpu_targets); targets > 0) {
    auto one = bench.CpuPerReplica(1, targets, "cpu1");
    auto three = bench.CpuPerReplica(3, targets, "cpu3");
    if (!one.ok() || !three.ok()) {
      std::cerr << "fleet_probe_bench: "
                << (one.ok() ? three.status() : one.status()) << "\n";
      return 1;
    }
    cpu1 = *one;
    cpu3 = *three;
  }
  const double ttl = absl::GetFlag(FLAGS_member_ttl_s);
  std::cout << "{\"targets\": " << absl::GetFlag(FLAGS_targets)
            << ", \"interval_ms\": " << absl::GetFlag(FLAGS_interval_ms)
            << ", \"probes_per_target_per_interval\": {";
  for (size_t i = 0; i < rates.size(); ++i) {
    std::cout << (i > 0 ? ", " : "") << "\"" << rates[i].first
              << "\": " << absl::StrFormat("%.4f", rates[i].second);
  }
  std::cout << "}, \"ratio_vs_1_replica\": {";
  for (size_t i = 0; i < rates.size(); ++i) {
    std::cout << (i > 0 ? ", " : "") << "\"" << rates[i].first << "\": "
              << absl::StrFormat("%.4f", rates[i].second / rates[0].second);
  }
  std::cout << "}, \"member_ttl_s\": " << ttl
            << ", \"takeover_s\": " << absl::ToDoubleSeconds(takeover)
            << ", \"takeover_vs_ttl\": "
            << absl::ToDoubleSeconds(takeover) / ttl
            << ", \"cpu_targets\": " << absl::GetFlag(FLAGS_cpu_targets)
            << ", \"cpu_settle_s\": " << absl::GetFlag(FLAGS_cpu_settle_s)
            << ", \"cpu_per_replica_1\": "
            << absl::StrFormat("%.4f", cpu1.process)
            << ", \"cpu_per_replica_3\": "
            << absl::StrFormat("%.4f", cpu3.process)
            << ", \"cpu_ratio_3_vs_1\": "
            << absl::StrFormat(
                   "%.3f", cpu1.process > 0 ? cpu3.process / cpu1.process : 0)
            << ", \"prober_cpu_per_replica_1\": "
            << absl::StrFormat("%.4f", cpu1.prober)
            << ", \"prober_cpu_per_replica_3\": "
            << absl::StrFormat("%.4f", cpu3.prober)
            << ", \"prober_cpu_ratio_3_vs_1\": "
            << absl::StrFormat("%.3f",
                               cpu1.prober > 0 ? cpu3.prober / cpu1.prober : 0)
            << "}\n";
  return 0;
}

constexpr char kUsage[] =
    R"(Usage: fleet_probe_bench [--targets N] [--intervals N]
                         [--interval_ms MS] [--member_ttl_s S]
                         [--cpu_targets N] [--cpu_settle_s S]
                         [--probe_fleets=false]

Starts a 3-member etcd cluster, loopback TCP backends that count probes, and
fleets of 1, 3 and 5 aside-server replicas; prints, as JSON, probes per
target per interval for each (and the ratio to one replica), and the
longest time a target went unprobed after a SIGKILL of one of 3 replicas,
against the member TTL; then the CPU per replica (the process's and its
prober thread's) at --cpu_targets targets, 3 replicas against 1.
)";

}  // namespace
}  // namespace aside

int main(int argc, char** argv) {
  if (auto args = aside::ParseCommandLine(argc, argv, {.usage = aside::kUsage});
      !args.ok()) {
    std::cerr << "fleet_probe_bench: " << args.status().message() << "\n";
    return 2;
  }
  return aside::Run();
}
