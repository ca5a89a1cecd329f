// balance_lab: the balancing-quality lab. Starts a real aside-server and
// real gRPC backends (lab_backend) on loopback, then sends one fixed
// open-loop workload through each policy and through the stock gRPC
// client's own round_robin, and reports latency percentiles, where the
// requests went and the errors, per policy and scenario. JSON on --json,
// a table on stdout.
//
// Scenarios (each policy runs each one; healthy and slow are repeated
// `--rounds` times, the policy order rotating every round):
//   healthy  `--backends` backends at `--latency_us`;
//   slow     the same with backend 0 `--slow_factor` times slower;
//   death    one more backend joins, and is killed (SIGKILL) during the run:
//            how long until no request goes to it, and how many fail;
//   warmup   one more backend joins cold: its service time starts
//            `--slow_factor` times higher and falls linearly to normal over
//            `--cold_s`: how much traffic it gets while cold and once warm.
//
// The workload: `--rate` requests per second sent at fixed times (request i
// at start + i / rate) whatever the responses do; latency is measured from
// the intended send time, so a stalled sender or a queue in front of it is
// charged to the requests it delayed (no coordinated omission). Stub
// requests pick through aside::Client (Pick, then Done with the status),
// subscribed to one Admin-created group per policy; stock requests go
// through one grpc::Channel over an ipv4: target list with the round_robin
// LB policy, no Aside code.
//
// Threads: the main thread runs the scenarios and sends; gRPC's callback
// threads complete the calls and write each result into its own slot.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "aside/v1/admin.grpc.pb.h"
#include "client/client.h"
#include "lib/command_line.h"
#include "lib/status_macros.h"
#include "lib/sync.h"
#include "tests/testing/process.h"

ABSL_FLAG(bool, quick, false, "fewer rounds and shorter phases");
ABSL_FLAG(bool, smoke, false, "a short run of three policies");
ABSL_FLAG(bool, verbose, false, "log each phase");
ABSL_FLAG(std::string, bin_dir, "", "where aside-server and lab_backend are");
ABSL_FLAG(int, backends, 10, "backends per group");
ABSL_FLAG(double, rate, 1000, "requests per second (open loop)");
ABSL_FLAG(int64_t, latency_us, 1000, "backend service time");
ABSL_FLAG(double, slow_factor, 10, "the slow backend's latency multiple");
ABSL_FLAG(int, workers, 2, "worker threads per backend");
ABSL_FLAG(double, warmup_s, 1, "warm-up before each measurement");
ABSL_FLAG(double, measure_s, 4, "measured time per round");
ABSL_FLAG(int, rounds, 3, "rounds per scenario and policy");
ABSL_FLAG(double, death_before_s, 1.5, "death scenario: time before the kill");
ABSL_FLAG(double, death_after_s, 4, "death scenario: time after the kill");
ABSL_FLAG(double, warmup_phase_s, 5, "warmup scenario: length of the ramp");
ABSL_FLAG(double, cold_s, 3, "warmup scenario: cold period of a new backend");
ABSL_FLAG(double, deadline_s, 1, "per-request deadline");
ABSL_FLAG(std::vector<std::string>, policies, {}, "policies (default: all)");
ABSL_FLAG(std::vector<std::string>, churn_policies, {},
          "policies that run death and warmup (default: all)");
ABSL_FLAG(std::vector<std::string>, scenarios,
          std::vector<std::string>({"healthy", "slow", "death", "warmup"}),
          "scenarios to run");
ABSL_FLAG(std::string, json, "", "write results as JSON to this file");

namespace aside::bench {
namespace {

using testing::LogField;
using testing::Process;
using testing::TempDir;

constexpr char kAdminToken[] = "balance-lab-admin-token";
constexpr char kEchoMethod[] = "/aside.lab.Echo/Call";
constexpr char kControlMethod[] = "/aside.lab.Control/Set";

// ------------------------------------------------------------------ flags

constexpr char kUsage[] =
    "usage: balance_lab [--quick|--smoke] [--policies=a,b] "
    "[--scenarios=healthy,slow,death,warmup] [--rate=R] [--backends=N] "
    "[--latency_us=US] [--slow_factor=F] [--workers=N] [--rounds=N] "
    "[--warmup_s=S] [--measure_s=S] [--churn_policies=a,b] "
    "[--json=FILE] [--bin_dir=DIR] [--verbose]\n";

struct Flags {
  std::string bin_dir;
  int backends = 10;
  double rate = 1000;
  int64_t latency_us = 1000;
  double slow_factor = 10;
  int workers = 2;
  double warmup_s = 1;
  double measure_s = 4;
  int rounds = 3;
  double death_before_s = 1.5;
  double death_after_s = 4;
  double warmup_phase_s = 5;
  double cold_s = 3;
  double deadline_s = 1;
  std::vector<std::string> policies;
  // Policies that run the death and warmup scenarios (default: all).
  std::vector<std::string> churn_policies;
  std::vector<std::string> scenarios = {"healthy", "slow", "death", "warmup"};
  std::string json;
  bool smoke = false;
  bool verbose = false;
};

// Policies by lab name; "stock_round_robin" is the plain gRPC channel.
struct PolicyDef {
  const char* name;
  std::function<void(v1::Policy*)> set;
  // Weights from the backends' own load reports (ORCA, gRFC A58), which
  // lab_backend serves: every 250 ms, no blackout.
  bool orca = false;
};
const std::vector<PolicyDef>& AllPolicies() {
  static const auto* all = new std::vector<PolicyDef>{
      {"stock_round_robin", nullptr},
      {"round_robin", [](v1::Policy* p) { p->mutable_round_robin(); }},
      {"random", [](v1::Policy* p) { p->mutable_random(); }},
      {"weighted_round_robin",
       [](v1::Policy* p) { p->mutable_weighted_round_robin(); }},
      {"wrr_orca", [](v1::Policy* p) { p->mutable_weighted_round_robin(); },
       true},
      {"p2c_pending",
       [](v1::Policy* p) { p->mutable_p2c()->set_load(v1::P2c::PENDING); }},
      {"p2c_peak_ewma",
       [](v1::Policy* p) { p->mutable_p2c()->set_load(v1::P2c::PEAK_EWMA); }},
      {"least_time_first_byte",
       [](v1::Policy* p) {
         p->mutable_least_time()->set_metric(v1::LeastTime::FIRST_BYTE);
       }},
      {"least_time_last_byte",
       [](v1::Policy* p) {
         p->mutable_least_time()->set_metric(v1::LeastTime::LAST_BYTE);
       }},
  };
  return *all;
}

std::string GroupName(absl::string_view policy) {
  std::string name = absl::StrCat("lab-", policy);
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  absl::StatusOr<std::vector<std::string>> args =
      ParseCommandLine(argc, argv, {.usage = kUsage});
  if (!args.ok()) {
    std::fprintf(stderr, "balance_lab: %s\n",
                 std::string(args.status().message()).c_str());
    return false;
  }
  const bool quick = absl::GetFlag(FLAGS_quick);
  f->smoke = absl::GetFlag(FLAGS_smoke);
  f->verbose = absl::GetFlag(FLAGS_verbose);
  f->bin_dir = absl::GetFlag(FLAGS_bin_dir);
  f->backends = absl::GetFlag(FLAGS_backends);
  f->rate = absl::GetFlag(FLAGS_rate);
  f->latency_us = absl::GetFlag(FLAGS_latency_us);
  f->slow_factor = absl::GetFlag(FLAGS_slow_factor);
  f->workers = absl::GetFlag(FLAGS_workers);
  f->warmup_s = absl::GetFlag(FLAGS_warmup_s);
  f->measure_s = absl::GetFlag(FLAGS_measure_s);
  f->rounds = absl::GetFlag(FLAGS_rounds);
  f->death_before_s = absl::GetFlag(FLAGS_death_before_s);
  f->death_after_s = absl::GetFlag(FLAGS_death_after_s);
  f->warmup_phase_s = absl::GetFlag(FLAGS_warmup_phase_s);
  f->cold_s = absl::GetFlag(FLAGS_cold_s);
  f->deadline_s = absl::GetFlag(FLAGS_deadline_s);
  f->policies = absl::GetFlag(FLAGS_policies);
  f->churn_policies = absl::GetFlag(FLAGS_churn_policies);
  f->scenarios = absl::GetFlag(FLAGS_scenarios);
  f->json = absl::GetFlag(FLAGS_json);
  for (auto [ok, what] : std::initializer_list<std::pair<bool, const char*>>{
           {f->backends >= 2, "--backends: at least 2"},
           {f->rate > 0, "--rate: must be positive"},
           {f->latency_us > 0, "--latency_us: must be positive"},
           {f->slow_factor >= 1, "--slow_factor: at least 1"},
           {f->workers >= 0, "--workers: must not be negative"},
           {f->warmup_s >= 0, "--warmup_s: must not be negative"},
           {f->measure_s > 0, "--measure_s: must be positive"},
           {f->rounds > 0, "--rounds: must be positive"},
           {f->death_before_s > 0, "--death_before_s: must be positive"},
           {f->death_after_s > 0, "--death_after_s: must be positive"},
           {f->warmup_phase_s > 0, "--warmup_phase_s: must be positive"},
           {f->cold_s > 0, "--cold_s: must be positive"},
           {f->deadline_s > 0, "--deadline_s: must be positive"}}) {
    if (!ok) {
      std::fprintf(stderr, "balance_lab: %s\n", what);
      return false;
    }
  }
  if (quick || f->smoke) {
    f->rounds = 1;
    f->warmup_s = 0.5;
    f->measure_s = 1.5;
    f->death_before_s = 1;
    f->death_after_s = 1.5;
    f->warmup_phase_s = 2.5;
    f->cold_s = 1.5;
  }
  if (quick && f->churn_policies.empty()) {
    f->churn_policies = {"stock_round_robin", "round_robin", "p2c_peak_ewma"};
  }
  if (f->smoke) {
    f->rate = 400;
    f->warmup_s = 0.3;
    f->measure_s = 0.7;
    f->death_before_s = 0.7;
    f->death_after_s = 1;
    f->warmup_phase_s = 1.2;
    f->cold_s = 0.8;
    if (f->policies.empty()) {
      f->policies = {"stock_round_robin", "round_robin", "p2c_peak_ewma"};
    }
  }
  if (f->policies.empty()) {
    for (const PolicyDef& p : AllPolicies()) {
      f->policies.emplace_back(p.name);
    }
  }
  if (f->churn_policies.empty()) {
    f->churn_policies = f->policies;
  }
  for (const std::string& p : f->churn_policies) {
    if (std::find(f->policies.begin(), f->policies.end(), p) ==
        f->policies.end()) {
      std::fprintf(stderr,
                   "balance_lab: churn policy %s is not in --policies\n",
                   p.c_str());
      return false;
    }
  }
  for (const std::string& p : f->policies) {
    if (std::none_of(AllPolicies().begin(), AllPolicies().end(),
                     [&](const PolicyDef& d) { return p == d.name; })) {
      std::fprintf(stderr, "balance_lab: unknown policy %s\n", p.c_str());
      return false;
    }
  }
  for (const std::string& s : f->scenarios) {
    if (s != "healthy" && s != "slow" && s != "death" && s != "warmup") {
      std::fprintf(stderr, "balance_lab: unknown scenario %s\n", s.c_str());
      return false;
    }
  }
  if (f->bin_dir.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = '\0';
      f->bin_dir = std::string(self);
      f->bin_dir.resize(f->bin_dir.rfind('/'));
    }
  }
  return true;
}

// ------------------------------------------------------------ processes

int64_t MonoNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

void SleepUntil(int64_t mono_nanos) {
  timespec ts;
  ts.tv_sec = mono_nanos / 1000000000;
  ts.tv_nsec = mono_nanos % 1000000000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) ==
         EINTR) {
  }
}

grpc::ByteBuffer Payload(absl::string_view text) {
  grpc::Slice slice(std::string(text.data(), text.size()));
  return grpc::ByteBuffer(&slice, 1);
}

std::string Text(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return out;
}

// One lab_backend process and a channel for its control method.
struct LabBackend {
  int index = 0;
  std::string address;
  std::unique_ptr<Process> process;
  std::shared_ptr<grpc::Channel> control;

  absl::Status Control(absl::string_view setting) {
    grpc::GenericStub stub(control);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    const grpc::ByteBuffer request = Payload(setting);
    grpc::ByteBuffer response;
    // The call completes on a gRPC thread. aside::Mutex rather than
    // absl::Notification, whose ordering ThreadSanitizer cannot see.
    Mutex mu;
    bool done = false;
    grpc::Status status;
    stub.UnaryCall(&context, kControlMethod, grpc::StubOptions(), &request,
                   &response, [&](grpc::Status s) {
                     MutexLock lock(&mu);
                     status = std::move(s);
                     done = true;
                   });
    MutexLock lock(&mu);
    mu.Await(Cond(&done));
    if (!status.ok()) {
      return absl::InternalError(
          absl::StrCat("backend ", address, ": ", status.error_message()));
    }
    return absl::OkStatus();
  }
};

// Starts backend `index` on `listen` ("127.0.0.1:0" for a fresh port); with
// `cold_latency_us` > 0 it starts cold (see lab_backend).
absl::StatusOr<std::unique_ptr<LabBackend>> StartBackend(
    const Flags& flags, int index, const std::string& listen,
    int64_t latency_us, int64_t cold_latency_us, double cold_s) {
  std::vector<std::string> argv = {
      flags.bin_dir + "/lab_backend", absl::StrCat("--listen=", listen),
      absl::StrCat("--name=", index), absl::StrCat("--latency_us=", latency_us),
      absl::StrCat("--workers=", flags.workers)};
  if (cold_latency_us > 0) {
    argv.push_back(absl::StrCat("--cold_latency_us=", cold_latency_us));
    argv.push_back(
        absl::StrCat("--warmup_ms=", static_cast<int64_t>(cold_s * 1000)));
  }
  auto backend = std::make_unique<LabBackend>();
  backend->index = index;
  ASIDE_ASSIGN_OR_RETURN(backend->process, Process::Start(argv));
  ASIDE_ASSIGN_OR_RETURN(std::string line,
                         backend->process->WaitForLine(
                             "event=lab_backend.listening", absl::Seconds(20)));
  backend->address = absl::StrCat("127.0.0.1:", LogField(line, "port"));
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  backend->control = grpc::CreateCustomChannel(
      backend->address, grpc::InsecureChannelCredentials(), args);
  return backend;
}

// The aside-server (a child process) and its Admin stub. The server's log
// is read by a thread of its own so that the pipe never fills.
class LabServer {
 public:
  static absl::StatusOr<std::unique_ptr<LabServer>> Start(const Flags& flags,
                                                          const TempDir& dir) {
    const std::string tokens =
        dir.WriteSecret("tokens", absl::StrCat(kAdminToken, " admin\n"));
    const std::string config = dir.WriteFile(
        "lab.yaml", "listen: 127.0.0.1:0\nmetrics: 127.0.0.1:0\ngroups: []\n");
    auto server = std::unique_ptr<LabServer>(new LabServer());
    ASIDE_ASSIGN_OR_RETURN(
        server->process_,
        Process::Start({flags.bin_dir + "/aside-server", "--config", config,
                        "--state-dir", dir.path() + "/state",
                        "--admin-token-file", tokens}));
    ASIDE_RETURN_IF_ERROR(
        server->process_->WaitForLine("event=server.started", absl::Seconds(30))
            .status());
    for (const std::string& line : server->process_->stderr_lines()) {
      if (line.find("event=grpc.listening") != std::string::npos) {
        server->target_ = absl::StrCat("127.0.0.1:", LogField(line, "port"));
      }
    }
    if (server->target_.empty()) {
      return absl::InternalError("aside-server: no grpc.listening line");
    }
    server->admin_ = v1::Admin::NewStub(grpc::CreateChannel(
        server->target_, grpc::InsecureChannelCredentials()));
    server->drain_ = std::thread([s = server.get()] {
      while (!s->stop_.load()) {
        s->process_->DrainStderr(absl::Milliseconds(200));
      }
    });
    return server;
  }

  ~LabServer() {
    stop_.store(true);
    if (drain_.joinable()) {
      drain_.join();
    }
    if (process_ != nullptr) {
      process_->Signal(SIGTERM);
      process_->Wait(absl::Seconds(10));
    }
  }

  const std::string& target() const { return target_; }
  v1::Admin::Stub* admin() const { return admin_.get(); }

  std::unique_ptr<grpc::ClientContext> Context() const {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(30));
    c->AddMetadata("authorization", absl::StrCat("Bearer ", kAdminToken));
    return c;
  }

 private:
  LabServer() = default;
  std::unique_ptr<Process> process_;
  std::string target_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::atomic<bool> stop_{false};
  std::thread drain_;
};

absl::Status GrpcError(absl::string_view what, const grpc::Status& s) {
  if (s.ok()) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(what, ": ", s.error_message()));
}

// ------------------------------------------------------------- workload

// One request of a phase: written by the sender (intended, sent) and then
// by the completion callback (the rest).
struct Record {
  int64_t intended = 0;  // ns after the phase start
  int64_t sent = 0;      // ns after the phase start
  int64_t latency = -1;  // completion minus intended; -1: never completed
  int32_t backend = -1;  // lab index of the backend; -1: unknown
  bool ok = false;
};

// One run of the workload through one sender.
struct Phase {
  std::vector<Record> records;
  int64_t start = 0;  // monotonic ns of request 0's intended time
  std::atomic<int64_t> outstanding{0};
};

int ParseIndex(const std::string& text) {
  int index = -1;
  return absl::SimpleAtoi(text, &index) ? index : -1;
}

// Sends request `i` of a phase and arranges for its record to be filled.
class Sender {
 public:
  virtual ~Sender() = default;
  virtual void Send(Phase* phase, size_t i) = 0;
};

void Complete(Phase* phase, size_t i, const grpc::Status& status,
              const grpc::ByteBuffer& response, int picked) {
  Record& r = phase->records[i];
  r.latency = MonoNanos() - phase->start - r.intended;
  r.ok = status.ok();
  r.backend = status.ok() ? ParseIndex(Text(response)) : picked;
  phase->outstanding.fetch_sub(1, std::memory_order_acq_rel);
}

// Through the stub: Pick, call the picked backend on the stub's channel
// pool, Done with the status.
class StubSender final : public Sender {
 public:
  StubSender(Client* client, ClientGroup* group,
             const absl::flat_hash_map<std::string, int>* indexes,
             absl::Duration deadline)
      : client_(client),
        group_(group),
        indexes_(indexes),
        deadline_(deadline) {}

  void Send(Phase* phase, size_t i) override {
    absl::StatusOr<aside::PickHandle> pick = group_->Pick();
    if (!pick.ok()) {
      grpc::ByteBuffer none;
      Complete(phase, i,
               grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            std::string(pick.status().message())),
               none, -1);
      return;
    }
    auto* call = new InFlight();
    const auto it = indexes_->find(pick->address());
    call->picked = it == indexes_->end() ? -1 : it->second;
    std::shared_ptr<grpc::Channel> channel =
        client_->channels().Get(pick->address());
    call->pick.emplace(*std::move(pick));
    call->request = Payload("x");
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    grpc::GenericStub stub(channel);
    stub.UnaryCall(&call->context, kEchoMethod, grpc::StubOptions(),
                   &call->request, &call->response,
                   [call, phase, i](const grpc::Status& status) {
                     call->pick->Done(status);
                     Complete(phase, i, status, call->response, call->picked);
                     delete call;
                   });
  }

 private:
  struct InFlight {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    std::optional<aside::PickHandle> pick;
    int picked = -1;
  };
  Client* const client_;
  ClientGroup* const group_;
  const absl::flat_hash_map<std::string, int>* const indexes_;
  const absl::Duration deadline_;
};

// Through a plain gRPC channel with the round_robin LB policy.
class StockSender final : public Sender {
 public:
  StockSender(std::shared_ptr<grpc::Channel> channel, absl::Duration deadline)
      : stub_(std::move(channel)), deadline_(deadline) {}

  void Send(Phase* phase, size_t i) override {
    auto* call = new InFlight();
    call->request = Payload("x");
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + deadline_));
    stub_.UnaryCall(&call->context, kEchoMethod, grpc::StubOptions(),
                    &call->request, &call->response,
                    [call, phase, i](const grpc::Status& status) {
                      Complete(phase, i, status, call->response, -1);
                      delete call;
                    });
  }

 private:
  struct InFlight {
    grpc::ClientContext context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
  };
  grpc::GenericStub stub_;
  const absl::Duration deadline_;
};

std::shared_ptr<grpc::Channel> StockChannel(
    const std::vector<std::string>& addresses) {
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(R"({"loadBalancingConfig":[{"round_robin":{}}]})");
  // Connections of its own, not shared with the stub's channels.
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  auto channel = grpc::CreateCustomChannel(
      absl::StrCat("ipv4:", absl::StrJoin(addresses, ",")),
      grpc::InsecureChannelCredentials(), args);
  channel->WaitForConnected(std::chrono::system_clock::now() +
                            std::chrono::seconds(10));
  return channel;
}

// Something the sender does at a set time within a phase (a kill).
struct PhaseEvent {
  double at_s = 0;
  std::function<void()> run;
  int64_t ran_at = -1;  // ns after the phase start
};

// Sends `seconds` × `rate` requests at fixed times, then waits (bounded) for
// the last completions. The phase is heap-allocated and never freed before
// exit, so that a completion arriving after the wait cannot write freed
// memory.
Phase* RunLoad(Sender* sender, double seconds, double rate,
               std::vector<PhaseEvent>* events, absl::Duration deadline) {
  auto* phase = new Phase();
  const size_t n = static_cast<size_t>(std::llround(seconds * rate));
  phase->records.resize(n);
  const double period = 1e9 / rate;
  phase->start = MonoNanos() + 5'000'000;
  size_t next_event = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t intended =
        static_cast<int64_t>(static_cast<double>(i) * period);
    while (events != nullptr && next_event < events->size() &&
           (*events)[next_event].at_s * 1e9 <= static_cast<double>(intended)) {
      PhaseEvent& e = (*events)[next_event++];
      SleepUntil(phase->start + static_cast<int64_t>(e.at_s * 1e9));
      e.ran_at = MonoNanos() - phase->start;
      e.run();
    }
    SleepUntil(phase->start + intended);
    Record& r = phase->records[i];
    r.intended = intended;
    r.sent = MonoNanos() - phase->start;
    phase->outstanding.fetch_add(1, std::memory_order_acq_rel);
    sender->Send(phase, i);
  }
  const int64_t give_up =
      MonoNanos() + absl::ToInt64Nanoseconds(deadline) + 3'000'000'000;
  while (phase->outstanding.load(std::memory_order_acquire) > 0 &&
         MonoNanos() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return phase;
}

// ------------------------------------------------------------- analysis

double Percentile(std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) {
    return 0;
  }
  size_t rank =
      static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()));
  rank = std::min(rank, sorted.size() - 1);
  return static_cast<double>(sorted[rank]) / 1000.0;
}

double Median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// What one phase measured over its window.
struct PhaseResult {
  std::string scenario;
  std::string policy;
  int round = 0;
  size_t requests = 0;
  size_t ok = 0;
  size_t errors = 0;
  double p50_us = 0;
  double p99_us = 0;
  double p999_us = 0;
  double max_us = 0;
  // Share of the window's requests that went to the watched backend (the
  // slow one, the dying one, the new one), and to the busiest backend.
  double watched_share = 0;
  double hottest_share = 0;
  double send_lag_p99_us = 0;
  // death: time from the kill to the last request sent to the dead backend
  // (or failing), and the requests that failed after the kill.
  double kill_to_last_ms = -1;
  size_t errors_after_kill = 0;
  // warmup: the new backend's share while cold and after.
  double cold_share = -1;
  double warm_share = -1;
  // Requests per backend index (-1: unknown), for --verbose.
  std::map<int, size_t> per_backend;
};

void Analyze(const Phase& phase, double from_s, int watched, PhaseResult* out) {
  std::vector<int64_t> latencies;
  std::vector<int64_t> lags;
  std::map<int, size_t> per_backend;
  size_t requests = 0;
  size_t errors = 0;
  const int64_t from = static_cast<int64_t>(from_s * 1e9);
  for (const Record& r : phase.records) {
    if (r.intended < from) {
      continue;
    }
    ++requests;
    lags.push_back(r.sent - r.intended);
    if (r.ok && r.latency >= 0) {
      latencies.push_back(r.latency);
    } else {
      ++errors;
    }
    if (r.backend >= 0) {
      ++per_backend[r.backend];
    }
  }
  std::sort(latencies.begin(), latencies.end());
  std::sort(lags.begin(), lags.end());
  out->requests = requests;
  out->ok = latencies.size();
  out->errors = errors;
  out->p50_us = Percentile(latencies, 50);
  out->p99_us = Percentile(latencies, 99);
  out->p999_us = Percentile(latencies, 99.9);
  out->max_us =
      latencies.empty() ? 0 : static_cast<double>(latencies.back()) / 1000.0;
  out->send_lag_p99_us = Percentile(lags, 99);
  out->per_backend = per_backend;
  size_t hottest = 0;
  for (const auto& [backend, count] : per_backend) {
    hottest = std::max(hottest, count);
  }
  const double total = static_cast<double>(std::max<size_t>(requests, 1));
  out->hottest_share = static_cast<double>(hottest) / total;
  out->watched_share =
      watched >= 0 ? static_cast<double>(per_backend[watched]) / total : 0;
}

// Share of the requests in [from_s, to_s) that went to `backend`.
double ShareIn(const Phase& phase, double from_s, double to_s, int backend) {
  size_t in = 0;
  size_t hits = 0;
  for (const Record& r : phase.records) {
    if (r.intended < static_cast<int64_t>(from_s * 1e9) ||
        r.intended >= static_cast<int64_t>(to_s * 1e9)) {
      continue;
    }
    ++in;
    hits += r.backend == backend ? 1 : 0;
  }
  return in == 0 ? 0 : static_cast<double>(hits) / static_cast<double>(in);
}

// ------------------------------------------------------------------ lab

class Lab {
 public:
  explicit Lab(Flags flags) : flags_(std::move(flags)) {}

  absl::Status Run() {
    ASIDE_RETURN_IF_ERROR(Setup());
    const bool healthy = Wants("healthy");
    const bool slow = Wants("slow");
    for (int round = 0; round < flags_.rounds; ++round) {
      if (healthy) {
        ASIDE_RETURN_IF_ERROR(backends_[0]->Control(
            absl::StrCat("latency_us=", flags_.latency_us)));
        for (const std::string& policy : Rotated(round)) {
          ASIDE_RETURN_IF_ERROR(SteadyPhase("healthy", policy, round, -1));
        }
      }
      if (slow) {
        ASIDE_RETURN_IF_ERROR(backends_[0]->Control(
            absl::StrCat("latency_us=", SlowLatencyUs())));
        for (const std::string& policy : Rotated(round)) {
          ASIDE_RETURN_IF_ERROR(SteadyPhase("slow", policy, round, 0));
        }
      }
    }
    ASIDE_RETURN_IF_ERROR(
        backends_[0]->Control(absl::StrCat("latency_us=", flags_.latency_us)));
    if (Wants("death")) {
      for (const std::string& policy : flags_.churn_policies) {
        ASIDE_RETURN_IF_ERROR(DeathPhase(policy));
      }
    }
    if (Wants("warmup")) {
      for (const std::string& policy : flags_.churn_policies) {
        ASIDE_RETURN_IF_ERROR(WarmupPhase(policy));
      }
    }
    return absl::OkStatus();
  }

  void Report() const;

 private:
  bool Wants(absl::string_view scenario) const {
    return std::find(flags_.scenarios.begin(), flags_.scenarios.end(),
                     scenario) != flags_.scenarios.end();
  }
  int64_t SlowLatencyUs() const {
    return static_cast<int64_t>(static_cast<double>(flags_.latency_us) *
                                flags_.slow_factor);
  }
  std::vector<std::string> Rotated(int round) const {
    std::vector<std::string> order = flags_.policies;
    std::rotate(order.begin(),
                order.begin() + static_cast<ptrdiff_t>(
                                    static_cast<size_t>(round) % order.size()),
                order.end());
    return order;
  }
  absl::Duration Deadline() const { return absl::Seconds(flags_.deadline_s); }
  std::vector<std::string> BaseAddresses() const {
    std::vector<std::string> out;
    for (const auto& b : backends_) {
      out.push_back(b->address);
    }
    return out;
  }

  absl::Status Setup();
  absl::Status CreateGroup(const PolicyDef& policy);
  absl::Status SteadyPhase(const std::string& scenario,
                           const std::string& policy, int round, int watched);
  absl::Status DeathPhase(const std::string& policy);
  absl::Status WarmupPhase(const std::string& policy);
  // Runs the workload for `policy` (through `stock` when it is the stock
  // client); events happen at their times.
  Phase* Load(const std::string& policy, Sender* stock, double seconds,
              std::vector<PhaseEvent>* events);
  // Adds or removes `address` in `policy`'s group and waits until the
  // stub has the resulting table.
  absl::Status ChangeMember(const std::string& policy,
                            const std::string& address, bool add);
  // Waits until every stub group holds `address` as ready (or, with
  // `ready` false, as not ready).
  absl::Status WaitReadyEverywhere(const std::string& address,
                                   bool ready = true);
  void Log(const PhaseResult& r) const;

  const Flags flags_;
  TempDir dir_;
  std::unique_ptr<LabServer> server_;
  std::vector<std::unique_ptr<LabBackend>> backends_;
  absl::flat_hash_map<std::string, int> indexes_;
  std::unique_ptr<Client> client_;
  std::shared_ptr<grpc::Channel> stock_channel_;
  std::vector<PhaseResult> results_;
  Mutex log_mu_;
  std::vector<std::string> stub_log_ ABSL_GUARDED_BY(log_mu_);
};

absl::Status Lab::Setup() {
  ASIDE_ASSIGN_OR_RETURN(server_, LabServer::Start(flags_, dir_));
  for (int i = 0; i < flags_.backends; ++i) {
    ASIDE_ASSIGN_OR_RETURN(
        std::unique_ptr<LabBackend> b,
        StartBackend(flags_, i, "127.0.0.1:0", flags_.latency_us, 0, 0));
    indexes_[b->address] = i;
    backends_.push_back(std::move(b));
  }
  std::vector<std::string> groups;
  for (const PolicyDef& p : AllPolicies()) {
    if (std::find(flags_.policies.begin(), flags_.policies.end(), p.name) ==
            flags_.policies.end() ||
        p.set == nullptr) {
      continue;
    }
    ASIDE_RETURN_IF_ERROR(CreateGroup(p));
    groups.push_back(GroupName(p.name));
  }
  ClientOptions options;
  options.targets = {server_->target()};
  options.groups = groups;
  options.log = [this](absl::string_view line) {
    MutexLock lock(&log_mu_);
    stub_log_.emplace_back(line);
  };
  ASIDE_ASSIGN_OR_RETURN(client_, Client::Create(std::move(options)));
  for (const std::string& g : groups) {
    if (!client_->Group(g)->WaitForGeneration(1, absl::Seconds(30))) {
      return absl::DeadlineExceededError(
          absl::StrCat("stub: no table for group '", g, "'"));
    }
  }
  stock_channel_ = StockChannel(BaseAddresses());
  // Connections to every backend, through the stub's pool too.
  for (const std::string& a : BaseAddresses()) {
    client_->channels().Get(a)->WaitForConnected(
        std::chrono::system_clock::now() + std::chrono::seconds(10));
  }
  return absl::OkStatus();
}

absl::Status Lab::CreateGroup(const PolicyDef& policy) {
  v1::CreateGroupRequest request;
  v1::Group* g = request.mutable_group();
  g->set_name(GroupName(policy.name));
  policy.set(g->mutable_policy());
  if (policy.orca) {
    v1::OrcaOptions* orca = g->mutable_orca();
    orca->set_enabled(true);
    orca->set_weights(true);
    orca->mutable_interval()->set_nanos(250'000'000);
    orca->mutable_blackout_period();  // 0 s
  }
  // Active health checks as a production group would have them, tighter
  // than the 5 s default so that a dead backend leaves within seconds:
  // grpc.health.v1 every 1 s, 2 failures to fall, 2 successes to rise.
  v1::HealthCheck* hc = g->mutable_health_check();
  hc->set_kind(v1::HealthCheck::GRPC);
  hc->mutable_interval()->set_seconds(1);
  hc->mutable_timeout()->set_nanos(500'000'000);
  hc->set_fall(2);
  hc->set_rise(2);
  for (const std::string& a : BaseAddresses()) {
    g->add_backends()->set_address(a);
  }
  v1::Group created;
  return GrpcError(absl::StrCat("create group ", g->name()),
                   server_->admin()->CreateGroup(server_->Context().get(),
                                                 request, &created));
}

Phase* Lab::Load(const std::string& policy, Sender* stock, double seconds,
                 std::vector<PhaseEvent>* events) {
  if (policy == "stock_round_robin") {
    return RunLoad(stock, seconds, flags_.rate, events, Deadline());
  }
  StubSender sender(client_.get(), client_->Group(GroupName(policy)), &indexes_,
                    Deadline());
  return RunLoad(&sender, seconds, flags_.rate, events, Deadline());
}

absl::Status Lab::SteadyPhase(const std::string& scenario,
                              const std::string& policy, int round,
                              int watched) {
  StockSender stock(stock_channel_, Deadline());
  Phase* phase =
      Load(policy, &stock, flags_.warmup_s + flags_.measure_s, nullptr);
  PhaseResult r;
  r.scenario = scenario;
  r.policy = policy;
  r.round = round;
  Analyze(*phase, flags_.warmup_s, watched, &r);
  Log(r);
  results_.push_back(r);
  return absl::OkStatus();
}

absl::Status Lab::ChangeMember(const std::string& policy,
                               const std::string& address, bool add) {
  if (policy == "stock_round_robin") {
    return absl::OkStatus();
  }
  v1::Group group;
  grpc::Status s;
  if (add) {
    v1::AddBackendsRequest request;
    request.set_group(GroupName(policy));
    request.add_backends()->set_address(address);
    s = server_->admin()->AddBackends(server_->Context().get(), request,
                                      &group);
  } else {
    v1::RemoveBackendsRequest request;
    request.set_group(GroupName(policy));
    request.add_addresses(address);
    s = server_->admin()->RemoveBackends(server_->Context().get(), request,
                                         &group);
  }
  ASIDE_RETURN_IF_ERROR(GrpcError(
      absl::StrCat(add ? "add " : "remove ", address, " to ", policy), s));
  if (!client_->Group(GroupName(policy))
           ->WaitForGeneration(group.generation(), absl::Seconds(10))) {
    return absl::DeadlineExceededError(
        absl::StrCat("stub: generation ", group.generation(), " of ",
                     GroupName(policy), " did not arrive"));
  }
  return absl::OkStatus();
}

absl::Status Lab::WaitReadyEverywhere(const std::string& address, bool ready) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  for (const std::string& policy : flags_.policies) {
    if (policy == "stock_round_robin") {
      continue;
    }
    ClientGroup* group = client_->Group(GroupName(policy));
    while (true) {
      TableConstPtr table = group->table();
      const int64_t index = table == nullptr ? -1 : table->Find(address);
      if (index >= 0 &&
          table->member(static_cast<uint32_t>(index)).ready == ready) {
        break;
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(address, ready ? " not ready" : " still ready", " in ",
                         GroupName(policy)));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  return absl::OkStatus();
}

// The last base backend is killed mid-run, then restarted on the same port
// once the phase is over and every group has marked it down; the next phase
// waits until every group has it ready again.
absl::Status Lab::DeathPhase(const std::string& policy) {
  const int victim = flags_.backends - 1;
  LabBackend& b = *backends_[static_cast<size_t>(victim)];
  std::shared_ptr<grpc::Channel> channel =
      policy == "stock_round_robin" ? StockChannel(BaseAddresses()) : nullptr;
  StockSender stock(channel, Deadline());
  std::vector<PhaseEvent> events(1);
  events[0].at_s = flags_.death_before_s;
  events[0].run = [&b] { b.process->Signal(SIGKILL); };
  Phase* phase = Load(policy, &stock,
                      flags_.death_before_s + flags_.death_after_s, &events);
  PhaseResult r;
  r.scenario = "death";
  r.policy = policy;
  Analyze(*phase, 0.5, victim, &r);
  const int64_t kill = events[0].ran_at;
  int64_t last = -1;
  for (const Record& rec : phase->records) {
    if (rec.intended >= kill && (!rec.ok || rec.backend == victim)) {
      last = std::max(last, rec.intended);
      r.errors_after_kill += rec.ok ? 0 : 1;
    }
  }
  r.kill_to_last_ms = last < 0 ? 0 : static_cast<double>(last - kill) / 1e6;
  Log(r);
  results_.push_back(r);
  // Restart it where it was, once every group has seen it go (health is
  // shared by target, so a stale "ready" must not pass for recovery).
  b.process->Wait(absl::Seconds(10));
  const std::string address = b.address;
  ASIDE_RETURN_IF_ERROR(WaitReadyEverywhere(address, /*ready=*/false));
  ASIDE_ASSIGN_OR_RETURN(
      std::unique_ptr<LabBackend> again,
      StartBackend(flags_, victim, address, flags_.latency_us, 0, 0));
  if (again->address != address) {
    return absl::InternalError(absl::StrCat("restarted backend listens on ",
                                            again->address, " not ", address));
  }
  backends_[static_cast<size_t>(victim)] = std::move(again);
  return WaitReadyEverywhere(address);
}

// A new backend joins cold; it leaves again after the phase.
absl::Status Lab::WarmupPhase(const std::string& policy) {
  const int index = flags_.backends;
  ASIDE_ASSIGN_OR_RETURN(
      std::unique_ptr<LabBackend> cold,
      StartBackend(flags_, index, "127.0.0.1:0", flags_.latency_us,
                   SlowLatencyUs(), flags_.cold_s));
  indexes_[cold->address] = index;
  std::vector<std::string> addresses = BaseAddresses();
  addresses.push_back(cold->address);
  std::shared_ptr<grpc::Channel> channel =
      policy == "stock_round_robin" ? StockChannel(addresses) : nullptr;
  ASIDE_RETURN_IF_ERROR(ChangeMember(policy, cold->address, /*add=*/true));
  StockSender stock(channel, Deadline());
  Phase* phase = Load(policy, &stock, flags_.warmup_phase_s, nullptr);
  PhaseResult r;
  r.scenario = "warmup";
  r.policy = policy;
  Analyze(*phase, 0, index, &r);
  r.cold_share = ShareIn(*phase, 0, flags_.cold_s, index);
  r.warm_share = ShareIn(*phase, flags_.cold_s, flags_.warmup_phase_s, index);
  Log(r);
  results_.push_back(r);
  ASIDE_RETURN_IF_ERROR(ChangeMember(policy, cold->address, /*add=*/false));
  indexes_.erase(cold->address);
  cold->process->Signal(SIGTERM);
  cold->process->Wait(absl::Seconds(10));
  return absl::OkStatus();
}

void Lab::Log(const PhaseResult& r) const {
  std::fprintf(stderr,
               "%-8s %-22s round %d: %5zu req, %3zu err, p50 %7.0f us, p99 "
               "%7.0f us, p99.9 %7.0f us, watched %5.1f%%, hottest %5.1f%%, "
               "send lag p99 %5.0f us",
               r.scenario.c_str(), r.policy.c_str(), r.round + 1, r.requests,
               r.errors, r.p50_us, r.p99_us, r.p999_us, 100 * r.watched_share,
               100 * r.hottest_share, r.send_lag_p99_us);
  if (r.kill_to_last_ms >= 0) {
    std::fprintf(stderr, ", kill->last %.0f ms, %zu failed", r.kill_to_last_ms,
                 r.errors_after_kill);
  }
  if (r.cold_share >= 0) {
    std::fprintf(stderr, ", new backend %.1f%% cold / %.1f%% warm",
                 100 * r.cold_share, 100 * r.warm_share);
  }
  std::fprintf(stderr, "\n");
  if (flags_.verbose) {
    std::string counts;
    for (const auto& [backend, count] : r.per_backend) {
      absl::StrAppend(&counts, " ", backend, ":", count);
    }
    std::string ready;
    if (r.policy != "stock_round_robin") {
      TableConstPtr table = client_->Group(GroupName(r.policy))->table();
      for (const Member& m : table->members()) {
        const auto it = indexes_.find(m.backend.address);
        absl::StrAppend(&ready, " ", it == indexes_.end() ? -1 : it->second,
                        m.ready ? "" : "(not ready)",
                        m.eligible ? "" : "(not eligible)");
      }
    }
    std::fprintf(stderr, "    per backend:%s\n    table:%s\n", counts.c_str(),
                 ready.c_str());
  }
}

// ---------------------------------------------------------------- report

struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
};

Spread SpreadOf(const std::vector<double>& v) {
  Spread s;
  if (v.empty()) {
    return s;
  }
  s.median = Median(v);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

std::string Json(const Spread& s) {
  return absl::StrCat("{\"median\": ", s.median, ", \"min\": ", s.min,
                      ", \"max\": ", s.max, "}");
}

void Lab::Report() const {
  // Per scenario and policy: the rounds' figures.
  std::map<std::string, std::map<std::string, std::vector<const PhaseResult*>>>
      by;
  for (const PhaseResult& r : results_) {
    by[r.scenario][r.policy].push_back(&r);
  }
  auto collect = [](const std::vector<const PhaseResult*>& rs,
                    double PhaseResult::*field) {
    std::vector<double> v;
    for (const PhaseResult* r : rs) {
      v.push_back(r->*field);
    }
    return SpreadOf(v);
  };

  std::string json = absl::StrCat(
      "{\n  \"config\": {\"backends\": ", flags_.backends,
      ", \"rate\": ", flags_.rate, ", \"latency_us\": ", flags_.latency_us,
      ", \"slow_factor\": ", flags_.slow_factor,
      ", \"workers\": ", flags_.workers, ", \"warmup_s\": ", flags_.warmup_s,
      ", \"measure_s\": ", flags_.measure_s, ", \"rounds\": ", flags_.rounds,
      ", \"death_before_s\": ", flags_.death_before_s,
      ", \"death_after_s\": ", flags_.death_after_s,
      ", \"warmup_phase_s\": ", flags_.warmup_phase_s,
      ", \"cold_s\": ", flags_.cold_s, ", \"deadline_s\": ", flags_.deadline_s,
      "},\n  \"phases\": [");
  for (size_t i = 0; i < results_.size(); ++i) {
    const PhaseResult& r = results_[i];
    absl::StrAppend(&json, i ? "," : "", "\n    {\"scenario\": \"", r.scenario,
                    "\", \"policy\": \"", r.policy,
                    "\", \"round\": ", r.round + 1,
                    ", \"requests\": ", r.requests, ", \"errors\": ", r.errors,
                    ", \"p50_us\": ", r.p50_us, ", \"p99_us\": ", r.p99_us,
                    ", \"p999_us\": ", r.p999_us, ", \"max_us\": ", r.max_us,
                    ", \"watched_share\": ", r.watched_share,
                    ", \"hottest_share\": ", r.hottest_share,
                    ", \"send_lag_p99_us\": ", r.send_lag_p99_us);
    if (r.kill_to_last_ms >= 0) {
      absl::StrAppend(&json, ", \"kill_to_last_ms\": ", r.kill_to_last_ms,
                      ", \"errors_after_kill\": ", r.errors_after_kill);
    }
    if (r.cold_share >= 0) {
      absl::StrAppend(&json, ", \"cold_share\": ", r.cold_share,
                      ", \"warm_share\": ", r.warm_share);
    }
    absl::StrAppend(&json, "}");
  }
  absl::StrAppend(&json, "\n  ],\n  \"summary\": {");
  bool first_scenario = true;
  for (const auto& [scenario, policies] : by) {
    absl::StrAppend(&json, first_scenario ? "" : ",", "\n    \"", scenario,
                    "\": {");
    first_scenario = false;
    bool first_policy = true;
    for (const auto& [policy, rs] : policies) {
      absl::StrAppend(
          &json, first_policy ? "" : ",", "\n      \"", policy, "\": {",
          "\"rounds\": ", rs.size(),
          ", \"p50_us\": ", Json(collect(rs, &PhaseResult::p50_us)),
          ", \"p99_us\": ", Json(collect(rs, &PhaseResult::p99_us)),
          ", \"p999_us\": ", Json(collect(rs, &PhaseResult::p999_us)),
          ", \"watched_share\": ",
          Json(collect(rs, &PhaseResult::watched_share)),
          ", \"hottest_share\": ",
          Json(collect(rs, &PhaseResult::hottest_share)));
      std::vector<double> errors;
      for (const PhaseResult* r : rs) {
        errors.push_back(static_cast<double>(r->errors));
      }
      absl::StrAppend(&json, ", \"errors\": ", Json(SpreadOf(errors)));
      if (scenario == "death") {
        absl::StrAppend(&json, ", \"kill_to_last_ms\": ",
                        Json(collect(rs, &PhaseResult::kill_to_last_ms)));
      }
      if (scenario == "warmup") {
        absl::StrAppend(
            &json,
            ", \"cold_share\": ", Json(collect(rs, &PhaseResult::cold_share)),
            ", \"warm_share\": ", Json(collect(rs, &PhaseResult::warm_share)));
      }
      absl::StrAppend(&json, "}");
      first_policy = false;
    }
    absl::StrAppend(&json, "\n    }");
  }
  absl::StrAppend(&json, "\n  },\n  \"targets\": {");

  // The DESIGN.md §8 targets, as ratios within each round.
  auto p99_of = [&](const std::string& scenario, const std::string& policy,
                    int round) -> double {
    for (const PhaseResult& r : results_) {
      if (r.scenario == scenario && r.policy == policy && r.round == round) {
        return r.p99_us;
      }
    }
    return 0;
  };
  std::vector<double> slow_over_healthy;
  std::vector<double> rr_over_p2c;
  std::vector<double> stock_over_p2c;
  // The best any balancer could do against round robin in this setup: round
  // robin's p99 with the slow backend over the lowest all-healthy p99 of the
  // round (a balancer that never touches the slow backend cannot beat the
  // healthy fleet).
  std::vector<double> ceiling;
  for (int round = 0; round < flags_.rounds; ++round) {
    const double healthy = p99_of("healthy", "p2c_peak_ewma", round);
    const double slow = p99_of("slow", "p2c_peak_ewma", round);
    const double rr = p99_of("slow", "round_robin", round);
    const double stock = p99_of("slow", "stock_round_robin", round);
    if (healthy > 0 && slow > 0) {
      slow_over_healthy.push_back(slow / healthy);
    }
    if (rr > 0 && slow > 0) {
      rr_over_p2c.push_back(rr / slow);
    }
    if (stock > 0 && slow > 0) {
      stock_over_p2c.push_back(stock / slow);
    }
    double best_healthy = 0;
    for (const PhaseResult& r : results_) {
      if (r.scenario == "healthy" && r.round == round && r.p99_us > 0 &&
          (best_healthy == 0 || r.p99_us < best_healthy)) {
        best_healthy = r.p99_us;
      }
    }
    if (rr > 0 && best_healthy > 0) {
      ceiling.push_back(rr / best_healthy);
    }
  }
  const Spread a = SpreadOf(slow_over_healthy);
  const Spread b = SpreadOf(rr_over_p2c);
  const Spread c = SpreadOf(stock_over_p2c);
  const Spread d = SpreadOf(ceiling);
  absl::StrAppend(
      &json, "\n    \"p2c_peak_ewma_slow_p99_over_healthy_p99\": {\"value\": ",
      Json(a), ", \"target_max\": 1.3, \"met\": ",
      !slow_over_healthy.empty() && a.median <= 1.3 ? "true" : "false",
      "},\n    \"round_robin_slow_p99_over_p2c_peak_ewma_slow_p99\": "
      "{\"value\": ",
      Json(b), ", \"target_min\": 10, \"met\": ",
      !rr_over_p2c.empty() && b.median >= 10 ? "true" : "false",
      "},\n    \"stock_round_robin_slow_p99_over_p2c_peak_ewma_slow_p99\": "
      "{\"value\": ",
      Json(c),
      "},\n    \"round_robin_slow_p99_over_best_healthy_p99\": {\"value\": ",
      Json(d), "}\n  }\n}\n");
  if (!flags_.json.empty()) {
    std::ofstream(flags_.json) << json;
  }

  // The table.
  std::printf(
      "balance_lab: %d backends at %lld us (%d workers each), backend 0 %.0fx "
      "slower in 'slow'; %.0f req/s open loop; %d round(s)\n",
      flags_.backends, static_cast<long long>(flags_.latency_us),
      flags_.workers, flags_.slow_factor, flags_.rate, flags_.rounds);
  for (const auto& [scenario, policies] : by) {
    std::printf(
        "\n%s: p50 / p99 / p99.9 in us (median of rounds, p99 range), "
        "errors, share to the watched backend, busiest backend\n",
        scenario.c_str());
    for (const std::string& policy : flags_.policies) {
      auto it = policies.find(policy);
      if (it == policies.end()) {
        continue;
      }
      const auto& rs = it->second;
      const Spread p99 = collect(rs, &PhaseResult::p99_us);
      std::printf(
          "  %-22s %7.0f / %7.0f (%6.0f..%6.0f) / %7.0f  err %4.0f  "
          "watched %5.1f%%  busiest %5.1f%%",
          policy.c_str(), collect(rs, &PhaseResult::p50_us).median, p99.median,
          p99.min, p99.max, collect(rs, &PhaseResult::p999_us).median,
          [&] {
            std::vector<double> e;
            for (const PhaseResult* r : rs) {
              e.push_back(static_cast<double>(r->errors));
            }
            return Median(e);
          }(),
          100 * collect(rs, &PhaseResult::watched_share).median,
          100 * collect(rs, &PhaseResult::hottest_share).median);
      if (scenario == "death") {
        std::printf("  kill->last %.0f ms",
                    collect(rs, &PhaseResult::kill_to_last_ms).median);
      }
      if (scenario == "warmup") {
        std::printf("  new: %.1f%% cold, %.1f%% warm",
                    100 * collect(rs, &PhaseResult::cold_share).median,
                    100 * collect(rs, &PhaseResult::warm_share).median);
      }
      std::printf("\n");
    }
  }
  if (!slow_over_healthy.empty() || !rr_over_p2c.empty()) {
    std::printf(
        "\ntargets: p2c_peak_ewma p99 slow/healthy %.2f (%.2f..%.2f, <= 1.3: "
        "%s); round_robin/p2c_peak_ewma p99 in 'slow' %.1fx (%.1f..%.1f, >= "
        "10: %s); stock round_robin/p2c_peak_ewma %.1fx; ceiling (round "
        "robin 'slow' p99 / best 'healthy' p99) %.1fx\n",
        a.median, a.min, a.max,
        !slow_over_healthy.empty() && a.median <= 1.3 ? "met" : "NOT met",
        b.median, b.min, b.max,
        !rr_over_p2c.empty() && b.median >= 10 ? "met" : "NOT met", c.median,
        d.median);
  }
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // Sends within a few microseconds of their times.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  Lab lab(flags);
  absl::Status status = lab.Run();
  lab.Report();
  if (!status.ok()) {
    std::fprintf(stderr, "balance_lab: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace aside::bench

int main(int argc, char** argv) { return aside::bench::Main(argc, argv); }
