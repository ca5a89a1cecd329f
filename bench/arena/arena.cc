// arena: the balancing arena (bench/README.md, "Balancing arena"). Runs a
// scenario file (bench/scenario/scenario.h; default
// bench/scenario/default.scn) with real processes on loopback:
//
// - the scenario's backends and sinkholes, real gRPC servers with service
//   slots, a FIFO queue and the scenario's capacity events, several to a
//   process (`arena --role=backend`, arena_backend.cc);
// - for every policy, a fresh aside-server holding one group with that
//   policy, and the scenario's number of client processes, each its own
//   aside::Client, open loop at every load step (`arena --role=client`,
//   arena_client.cc);
// - the same clients as the perfect-information dispatcher ("limit"),
//   which reads every backend's exact queue from shared memory, and as
//   plain gRPC channels with gRPC's own round_robin ("grpc_round_robin");
// - grpc-js 1.14's own weighted_round_robin (gRFC A58) over the backends'
//   per-call ORCA reports, in node processes (grpc_js_client.js): gRPC C++
//   1.51 has no weighted_round_robin (its library has round_robin,
//   weighted_target and xds_wrr_locality only). Only with --grpc_js: its
//   clients take about 8 ms of CPU per call here (grpc-js's round_robin
//   1.5 ms), more than this machine has at the arena's rates.
//
// Policy names come from the scenario's `policies` line. Each becomes the
// group's `policy:` in the server's YAML config (p2c_pending and
// p2c_peak_ewma are p2c with that load; weighted_round_robin gets the
// backends' capacities as weights; orca_wrr is weighted_round_robin with
// weights from the backends' out-of-band ORCA reports); any other name is
// passed as is, so a policy the server knows runs without a change here. A
// name the server refuses (aside-server --check-config) is reported and
// skipped.
//
// Per policy and load step: p50/p99/p99.9 of the successful calls, errors,
// the largest number of calls on any backend, the largest ratio of a
// backend's share of the calls to its share of the capacity, how long a
// backend that recovers from an antagonist takes to get 0.8× its capacity
// share again, the share of calls sent to the sinkhole after the step's
// first second, the messages beyond the calls themselves (Watch updates
// applied by the stubs, their load reports, health checks, out-of-band ORCA
// reports and any other call the backends receive) per call, the machine's
// CPU (/proc/stat) and the arena's own processes' share of it. Every
// latency is also a ratio to the limit's in the same run. Sustainable load:
// the highest step whose p99 is within 5× the mean call time and whose
// errors are at most 1 %.
//
//   arena [--scenario=FILE] [--smoke] [--time_scale=F] [--policies=a,b]
//         [--json=FILE] [--grpc=false] [--grpc_js]
//         [--verbose]
#include "bench/arena/arena.h"

#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "bench/arena/arena_shm.h"
#include "bench/scenario/scenario.h"
#include "lib/command_line.h"
#include "lib/status_macros.h"
#include "tests/testing/process.h"

ABSL_FLAG(std::string, role, "coordinator", "coordinator, backend or client");
ABSL_FLAG(std::string, scenario, "", "scenario file");
ABSL_FLAG(double, time_scale, 1,
          "multiplies the scenario's duration, warmup and event times");
ABSL_FLAG(double, service_scale, 1,
          "multiplies the scenario's service times (and divides its "
          "capacity in calls per second)");
ABSL_FLAG(bool, smoke, false, "two policies, one short step");
ABSL_FLAG(std::vector<std::string>, policies, {},
          "policies (default: the scenario's)");
ABSL_FLAG(bool, grpc, true, "also run gRPC's own round_robin");
ABSL_FLAG(bool, grpc_js, false,
          "also run grpc-js's own weighted_round_robin (node processes)");
ABSL_FLAG(int, backend_procs, 4, "backend processes");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");
ABSL_FLAG(std::string, bin_dir, "", "where aside-server is");
ABSL_FLAG(bool, verbose, false, "per-backend shares");
// Roles.
ABSL_FLAG(std::string, shm, "", "shared memory file");
ABSL_FLAG(int, first, 0, "backend: first backend served");
ABSL_FLAG(int, count, 0, "backend: backends served");
ABSL_FLAG(int64_t, max_run_s, 3600, "backend: exit after this long");
ABSL_FLAG(int, index, 0, "client: its index");
ABSL_FLAG(std::string, mode, "stub", "client: stub, limit, grpc_round_robin");
ABSL_FLAG(std::string, target, "", "client: the aside-server");
ABSL_FLAG(std::string, group, "arena", "client: the group");
ABSL_FLAG(std::vector<std::string>, addresses, {}, "client: backends");
ABSL_FLAG(std::vector<std::string>, rates, {}, "client: calls/s per step");
ABSL_FLAG(int64_t, period_ns, 0, "client: time between step starts");
ABSL_FLAG(int64_t, warmup_ns, 0, "client: unmeasured time per step");
ABSL_FLAG(int64_t, duration_ns, 0, "client: measured time per step");
ABSL_FLAG(int64_t, deadline_ns, 0, "client: per-call deadline");
ABSL_FLAG(uint64_t, seed, 1, "client: arrival seed");
ABSL_FLAG(std::string, out, "", "client: records file");

namespace aside::bench {
namespace {

using testing::LogField;
using testing::Process;
using testing::TempDir;

constexpr char kUsage[] =
    "usage: arena [--scenario=FILE] [--smoke] [--time_scale=F] "
    "[--service_scale=F] "
    "[--policies=a,b] [--json=FILE] [--grpc=false] [--grpc_js] [--verbose]\n";

int64_t NowNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

std::string SelfPath() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    return "";
  }
  self[n] = '\0';
  return self;
}

// The scenario with every time but the service times multiplied by `scale`,
// and the service times by `service_scale`.
absl::StatusOr<Scenario> LoadScaled(const std::string& path,
                                    const ArenaScale& factors) {
  ASIDE_ASSIGN_OR_RETURN(Scenario s, LoadScenario(path));
  for (ScenarioBackend& b : s.backends) {
    b.service = b.service * factors.service;
  }
  const double scale = factors.time;
  if (scale != 1) {
    s.duration = s.duration * scale;
    s.warmup = s.warmup * scale;
    for (ScenarioEvent& e : s.events) {
      e.at = e.at * scale;
      if (e.length != absl::InfiniteDuration()) {
        e.length = e.length * scale;
      }
    }
  }
  return s;
}

// ------------------------------------------------------------- machine

struct CpuSample {
  uint64_t busy = 0;   // every CPU, clock ticks
  uint64_t total = 0;  // every CPU, clock ticks
};

CpuSample ReadProcStat() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t v[10] = {};
  in >> cpu;
  for (uint64_t& x : v) {
    in >> x;
  }
  CpuSample s;
  for (int i = 0; i < 8; ++i) {  // guest time is already in user
    s.total += v[i];
  }
  s.busy = s.total - v[3] - v[4];  // idle, iowait
  return s;
}

// utime + stime of a process, clock ticks.
uint64_t ProcessTicks(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) {
    return 0;
  }
  std::vector<std::string> fields =
      absl::StrSplit(text.substr(close + 2), ' ', absl::SkipEmpty());
  // Fields after the name start at field 3 (state); utime is field 14.
  uint64_t utime = 0;
  uint64_t stime = 0;
  if (fields.size() > 12 && absl::SimpleAtoi(fields[11], &utime) &&
      absl::SimpleAtoi(fields[12], &stime)) {
    return utime + stime;
  }
  return 0;
}

// --------------------------------------------------------------- results

struct StepResult {
  double load = 0;
  double rate = 0;
  size_t calls = 0;
  size_t errors = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  double p999_ms = 0;
  int max_rif = 0;
  double max_share_ratio = 0;
  int max_share_backend = -1;
  // Seconds from an antagonist's end to the backend's 0.8× capacity share
  // (the slowest of them); -1: none in the step; infinity: never.
  double recovery_s = -1;
  double sinkhole_share = 0;
  double machine_cpu = 0;      // busy fraction of every CPU
  double arena_cpu = 0;        // the arena's processes, fraction of every CPU
  std::vector<double> shares;  // per backend
  double send_lag_note = 0;
};

struct RunResult {
  std::string name;
  std::string mode;  // stub, limit, grpc_round_robin
  std::string skipped;
  std::string policy_yaml;
  std::vector<StepResult> steps;
  double extra_per_query = 0;
  uint64_t extra_messages = 0;
  uint64_t queries = 0;
  std::map<std::string, uint64_t> extra_by_kind;
  uint64_t dropped = 0;
  // Calls the backends dropped from their queues because the client had
  // given up (its deadline passed) before service began.
  uint64_t abandoned = 0;
};

double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) {
    return 0;
  }
  size_t rank =
      static_cast<size_t>(p / 100.0 * static_cast<double>(sorted.size()));
  rank = std::min(rank, sorted.size() - 1);
  return static_cast<double>(sorted[rank]) / 1e6;
}

// ----------------------------------------------------------------- arena

struct Flags {
  std::string scenario;
  ArenaScale scale;
  bool smoke = false;
  std::vector<std::string> policies;
  bool grpc = true;
  bool grpc_js = false;
  int backend_procs = 4;
  std::string json;
  std::string bin_dir;
  bool verbose = false;
};

class Arena {
 public:
  Arena(Flags flags, Scenario scenario)
      : flags_(std::move(flags)), scenario_(std::move(scenario)) {}

  absl::Status Run() {
    shm_path_ = dir_.path() + "/arena.shm";
    shm_ = MapArenaShm(shm_path_, /*create=*/true);
    if (shm_ == nullptr) {
      return absl::InternalError("cannot map the shared memory");
    }
    shm_->step.store(-1);
    ASIDE_RETURN_IF_ERROR(StartBackends());
    std::vector<std::pair<std::string, std::string>> runs = {
        {"limit", "limit"}};
    for (const std::string& p : flags_.policies) {
      runs.push_back({p, "stub"});
    }
    if (flags_.grpc) {
      runs.push_back({"grpc_round_robin", "grpc_round_robin"});
    }
    if (flags_.grpc_js) {
      runs.push_back(
          {"grpc_js_weighted_round_robin", "grpc_js_weighted_round_robin"});
    }
    for (const auto& [name, mode] : runs) {
      RunResult r;
      r.name = name;
      r.mode = mode;
      absl::Status s = RunOne(&r);
      if (!s.ok()) {
        // A run that fails is reported with the others, and the arena
        // exits non-zero at the end; a policy the server does not know
        // (or a peer not installed) is only skipped.
        if (r.skipped.empty()) {
          r.skipped = std::string(s.message());
          failed_.push_back(name);
        }
        std::fprintf(stderr, "arena: %s skipped: %s\n", name.c_str(),
                     r.skipped.c_str());
      }
      results_.push_back(std::move(r));
    }
    if (!failed_.empty()) {
      return absl::InternalError(
          absl::StrCat("runs failed: ", absl::StrJoin(failed_, ", ")));
    }
    return absl::OkStatus();
  }

  void Stop() {
    for (auto& p : backends_) {
      p->Signal(SIGTERM);
    }
    for (auto& p : backends_) {
      p->Wait(absl::Seconds(5));
    }
  }

  void Report() const;

 private:
  absl::Status StartBackends();
  absl::Status RunOne(RunResult* r);
  std::string ServerConfig(const std::string& policy, RunResult* r) const;
  void Pump(int64_t until);
  void Analyze(const std::vector<ArenaRecord>& records, RunResult* r) const;
  double CapacityAt(uint32_t b, double t_s) const {
    const ScenarioBackend& spec = scenario_.backends[b];
    if (spec.sinkhole) {
      return 0;
    }
    return spec.calls_per_second() *
           scenario_.CapacityFactor(b, absl::Seconds(t_s));
  }
  std::vector<double> Rates() const {
    std::vector<double> out;
    for (double l : scenario_.loads) {
      out.push_back(l * scenario_.AggregateCapacity());
    }
    return out;
  }
  int64_t Period() const {
    return absl::ToInt64Nanoseconds(scenario_.warmup + scenario_.duration +
                                    scenario_.deadline) +
           500'000'000;
  }
  std::vector<Process*> Processes() {
    std::vector<Process*> out;
    for (auto& p : backends_) {
      out.push_back(p.get());
    }
    for (auto& p : live_) {
      out.push_back(p);
    }
    return out;
  }

  const Flags flags_;
  const Scenario scenario_;
  TempDir dir_;
  std::string shm_path_;
  ArenaShm* shm_ = nullptr;
  std::vector<std::unique_ptr<Process>> backends_;
  std::vector<std::string> addresses_;
  std::vector<Process*> live_;  // the current run's server and clients
  std::vector<RunResult> results_;
  std::vector<std::string> failed_;
};

absl::Status Arena::StartBackends() {
  const int n = static_cast<int>(scenario_.backends.size());
  if (n > kArenaMaxBackends) {
    return absl::InvalidArgumentError("too many backends");
  }
  addresses_.assign(static_cast<size_t>(n), "");
  const int procs = std::max(1, std::min(flags_.backend_procs, n));
  int first = 0;
  for (int p = 0; p < procs; ++p) {
    const int count = (n - first) / (procs - p);
    ASIDE_ASSIGN_OR_RETURN(
        std::unique_ptr<Process> proc,
        Process::Start({SelfPath(), "--role=backend",
                        absl::StrCat("--scenario=", flags_.scenario),
                        absl::StrCat("--time_scale=", flags_.scale.time),
                        absl::StrCat("--service_scale=", flags_.scale.service),
                        absl::StrCat("--shm=", shm_path_),
                        absl::StrCat("--first=", first),
                        absl::StrCat("--count=", count), "--max_run_s=7200"}));
    for (int i = 0; i < count; ++i) {
      ASIDE_ASSIGN_OR_RETURN(
          std::string line,
          proc->WaitForLine(absl::StrCat("event=arena_backend.listening "
                                         "index=",
                                         first + i, " "),
                            absl::Seconds(30)));
      addresses_[static_cast<size_t>(first + i)] =
          absl::StrCat("127.0.0.1:", LogField(line, "port"));
    }
    backends_.push_back(std::move(proc));
    first += count;
  }
  return absl::OkStatus();
}

std::string Arena::ServerConfig(const std::string& policy, RunResult* r) const {
  std::string yaml_policy = policy;
  std::string orca;
  bool weights = false;
  if (policy == "p2c_pending") {
    yaml_policy = "{name: p2c, load: pending}";
  } else if (policy == "p2c_peak_ewma") {
    yaml_policy = "{name: p2c, load: peak_ewma}";
  } else if (policy == "weighted_round_robin") {
    weights = true;
  } else if (policy == "orca_wrr") {
    // gRFC A58's weights from each backend's out-of-band reports, computed
    // once in the server; every 250 ms, no blackout (the steps are short).
    yaml_policy = "weighted_round_robin";
    orca = "    orca: {interval: 250ms, weights: true, blackout_period: 0s}\n";
  }
  r->policy_yaml = yaml_policy;
  std::string config = absl::StrCat(
      "listen: 127.0.0.1:0\nmetrics: 127.0.0.1:0\n"
      "load_reports: {auth: open}\n"
      "groups:\n  - name: arena\n    policy: ",
      yaml_policy,
      "\n    health_check: {kind: grpc, interval: 1s, timeout: 500ms, "
      "fall: 2, rise: 2}\n",
      orca, "    backends:\n");
  for (size_t b = 0; b < addresses_.size(); ++b) {
    const ScenarioBackend& spec = scenario_.backends[b];
    // Static weights are the capacities (a sinkhole claims 1×).
    const int weight =
        weights && !spec.sinkhole
            ? std::max(1, static_cast<int>(std::lround(spec.capacity * 100)))
            : 100;
    absl::StrAppend(&config, "      - {address: ", addresses_[b],
                    ", weight: ", weight, "}\n");
  }
  return config;
}

void Arena::Pump(int64_t until) {
  while (true) {
    for (Process* p : Processes()) {
      p->ReadAvailable();
    }
    const int64_t now = NowNanos();
    if (now >= until) {
      return;
    }
    const int64_t sleep = std::min<int64_t>(until - now, 50'000'000);
    timespec ts{static_cast<time_t>(sleep / 1000000000),
                static_cast<long>(sleep % 1000000000)};
    nanosleep(&ts, nullptr);
  }
}

absl::Status Arena::RunOne(RunResult* r) {
  std::fprintf(stderr, "arena: %s\n", r->name.c_str());
  // The run's processes end with it, on every path.
  absl::Cleanup forget = [this] { live_.clear(); };
  const std::string run_dir = absl::StrCat(dir_.path(), "/", r->name);
  std::unique_ptr<Process> server;
  std::string target;
  if (r->mode == "stub") {
    const std::string config = dir_.WriteFile(absl::StrCat(r->name, ".yaml"),
                                              ServerConfig(r->name, r));
    testing::CommandResult check = testing::RunCommand(
        {flags_.bin_dir + "/aside-server", "--check-config", config},
        absl::Seconds(30));
    if (check.exit_code != 0) {
      std::string why;
      for (absl::string_view line : absl::StrSplit(check.output, '\n')) {
        if (!line.empty()) {
          why = std::string(line);
          break;
        }
      }
      r->skipped = absl::StrCat("aside-server refuses policy ", r->policy_yaml,
                                ": ", why);
      return absl::InvalidArgumentError(r->skipped);
    }
    ASIDE_ASSIGN_OR_RETURN(
        server, Process::Start({flags_.bin_dir + "/aside-server", "--config",
                                config, "--state-dir", run_dir + "-state"}));
    ASIDE_RETURN_IF_ERROR(
        server->WaitForLine("event=server.started", absl::Seconds(30))
            .status());
    for (const std::string& line : server->stderr_lines()) {
      if (line.find("event=grpc.listening") != std::string::npos) {
        target = absl::StrCat("127.0.0.1:", LogField(line, "port"));
      }
    }
    if (target.empty()) {
      return absl::InternalError("aside-server: no grpc.listening line");
    }
    live_.push_back(server.get());
  }
  // The clients.
  shm_->run_start_ns.store(0);
  std::vector<std::string> rates;
  for (double rate : Rates()) {
    rates.push_back(absl::StrCat(rate / scenario_.clients));
  }
  std::vector<std::string> prefix = {SelfPath(), "--role=client"};
  if (r->mode == "grpc_js_weighted_round_robin") {
    // grpc-js from tests/xds/node (npm ci there), node from the PATH.
    const std::string script =
        testing::SourceDir() + "/bench/arena/grpc_js_client.js";
    const std::string grpc_js = testing::SourceDir() +
                                "/tests/xds/node/node_modules/@grpc/grpc-js/"
                                "package.json";
    testing::CommandResult node =
        testing::RunCommand({"/bin/sh", "-c", "command -v node"});
    std::string node_path(absl::StripAsciiWhitespace(node.output));
    if (node.exit_code != 0 || node_path.empty() ||
        access(grpc_js.c_str(), R_OK) != 0) {
      r->skipped =
          "needs node and grpc-js (npm ci in tests/xds/node), not installed";
      return absl::FailedPreconditionError(r->skipped);
    }
    prefix = {node_path, script};
  }
  std::vector<std::unique_ptr<Process>> clients;
  for (uint32_t i = 0; i < scenario_.clients; ++i) {
    std::vector<std::string> argv = prefix;
    for (std::string& a : std::vector<std::string>{
             absl::StrCat("--scenario=", flags_.scenario),
             absl::StrCat("--time_scale=", flags_.scale.time),
             absl::StrCat("--service_scale=", flags_.scale.service),
             absl::StrCat("--shm=", shm_path_), absl::StrCat("--index=", i),
             absl::StrCat("--mode=", r->mode),
             absl::StrCat("--target=", target), "--group=arena",
             absl::StrCat("--addresses=", absl::StrJoin(addresses_, ",")),
             absl::StrCat("--rates=", absl::StrJoin(rates, ",")),
             absl::StrCat("--period_ns=", Period()),
             absl::StrCat("--warmup_ns=",
                          absl::ToInt64Nanoseconds(scenario_.warmup)),
             absl::StrCat("--duration_ns=",
                          absl::ToInt64Nanoseconds(scenario_.duration)),
             absl::StrCat("--deadline_ns=",
                          absl::ToInt64Nanoseconds(scenario_.deadline)),
             absl::StrCat("--seed=", scenario_.seed),
             absl::StrCat("--out=", run_dir, "-client", i, ".bin")}) {
      argv.push_back(std::move(a));
    }
    ASIDE_ASSIGN_OR_RETURN(std::unique_ptr<Process> c,
                           Process::Start(std::move(argv)));
    live_.push_back(c.get());
    clients.push_back(std::move(c));
  }
  for (auto& c : clients) {
    absl::StatusOr<std::string> ready =
        c->WaitForLine("event=arena_client.ready", absl::Seconds(60));
    if (!ready.ok()) {
      live_.clear();
      return absl::InternalError(
          absl::StrCat(r->name, ": a client is not ready: ", c->StderrText()));
    }
  }
  // Counters before, the steps, counters after.
  auto counters = [this] {
    std::map<std::string, uint64_t> c;
    for (size_t b = 0; b < addresses_.size(); ++b) {
      const ArenaBackendSlot& s = shm_->backends[b];
      c["queries"] += s.queries.load();
      c["health checks"] += s.health_checks.load();
      c["ORCA reports"] += s.orca_reports.load();
      c["other calls"] += s.other_calls.load();
      c["abandoned calls"] += s.abandoned.load();
    }
    return c;
  };
  const std::map<std::string, uint64_t> before = counters();
  const int64_t start = NowNanos() + 300'000'000;
  for (size_t b = 0; b < addresses_.size(); ++b) {
    for (auto& m : shm_->backends[b].max_rif) {
      m.store(0);
    }
  }
  shm_->run_start_ns.store(start);
  std::vector<pid_t> pids;
  for (Process* p : Processes()) {
    pids.push_back(p->pid());
  }
  const std::vector<double> rates_total = Rates();
  r->steps.resize(scenario_.loads.size());
  for (size_t k = 0; k < scenario_.loads.size(); ++k) {
    const int64_t from = start + static_cast<int64_t>(k) * Period();
    const int64_t zero = from + absl::ToInt64Nanoseconds(scenario_.warmup);
    const int64_t to = zero + absl::ToInt64Nanoseconds(scenario_.duration);
    Pump(from);
    shm_->step_zero_ns.store(zero);
    Pump(zero);
    shm_->step.store(static_cast<int32_t>(k));
    const CpuSample cpu0 = ReadProcStat();
    uint64_t ticks0 = 0;
    for (pid_t p : pids) {
      ticks0 += ProcessTicks(p);
    }
    Pump(to);
    const CpuSample cpu1 = ReadProcStat();
    uint64_t ticks1 = 0;
    for (pid_t p : pids) {
      ticks1 += ProcessTicks(p);
    }
    shm_->step.store(-1);
    shm_->step_zero_ns.store(0);
    StepResult& s = r->steps[k];
    s.load = scenario_.loads[k];
    s.rate = rates_total[k];
    const double total = static_cast<double>(cpu1.total - cpu0.total);
    if (total > 0) {
      s.machine_cpu = static_cast<double>(cpu1.busy - cpu0.busy) / total;
      s.arena_cpu = static_cast<double>(ticks1 - ticks0) / total;
    }
  }
  // The clients end by themselves after the last step.
  std::vector<ArenaRecord> records;
  uint64_t updates = 0;
  uint64_t reports = 0;
  for (size_t i = 0; i < clients.size(); ++i) {
    const int64_t bound = NowNanos() +
                          absl::ToInt64Nanoseconds(scenario_.deadline) +
                          15'000'000'000;
    std::optional<int> exited;
    while (!(exited = clients[i]->Wait(absl::Milliseconds(50))).has_value()) {
      Pump(NowNanos());
      if (NowNanos() > bound) {
        clients[i]->Signal(SIGKILL);
        clients[i]->Wait(absl::Seconds(5));
        break;
      }
    }
    std::ifstream in(absl::StrCat(run_dir, "-client", i, ".bin"),
                     std::ios::binary);
    ArenaClientHeader header;
    if (!in.read(reinterpret_cast<char*>(&header), sizeof(header))) {
      clients[i]->ReadAvailable();
      return absl::InternalError(absl::StrCat(
          "client ", i, " wrote nothing (",
          exited.has_value() ? absl::StrCat("wait status ", *exited) : "killed",
          "): ", clients[i]->StderrText()));
    }
    const size_t at = records.size();
    records.resize(at + header.records);
    in.read(reinterpret_cast<char*>(records.data() + at),
            static_cast<std::streamsize>(header.records * sizeof(ArenaRecord)));
    updates += header.updates_applied;
    reports += header.reports_sent;
    r->dropped += header.dropped;
  }
  std::map<std::string, uint64_t> after = counters();
  for (auto& [kind, n] : after) {
    n -= before.at(kind);
  }
  r->queries = after["queries"];
  after.erase("queries");
  r->abandoned = after["abandoned calls"];
  after.erase("abandoned calls");
  after["Watch updates"] = updates;
  after["load reports"] = reports;
  for (const auto& [kind, n] : after) {
    r->extra_messages += n;
  }
  r->extra_by_kind = after;
  r->extra_per_query = r->queries == 0
                           ? 0
                           : static_cast<double>(r->extra_messages) /
                                 static_cast<double>(r->queries);
  for (size_t k = 0; k < r->steps.size(); ++k) {
    int max_rif = 0;
    for (size_t b = 0; b < addresses_.size(); ++b) {
      if (!scenario_.backends[b].sinkhole) {
        max_rif = std::max(max_rif, shm_->backends[b].max_rif[k].load());
      }
    }
    r->steps[k].max_rif = max_rif;
  }
  live_.clear();
  if (server != nullptr) {
    server->Signal(SIGTERM);
    server->Wait(absl::Seconds(10));
  }
  Analyze(records, r);
  return absl::OkStatus();
}

void Arena::Analyze(const std::vector<ArenaRecord>& records,
                    RunResult* r) const {
  const size_t n = scenario_.backends.size();
  const double duration = absl::ToDoubleSeconds(scenario_.duration);
  // Each backend's share of the capacity over the step, its time average.
  std::vector<double> cap_share(n, 0);
  {
    const int samples = 1000;
    std::vector<double> sum(n, 0);
    double all = 0;
    for (int i = 0; i < samples; ++i) {
      const double t = duration * (i + 0.5) / samples;
      for (uint32_t b = 0; b < n; ++b) {
        const double c = CapacityAt(b, t);
        sum[b] += c;
        all += c;
      }
    }
    for (size_t b = 0; b < n; ++b) {
      cap_share[b] = all > 0 ? sum[b] / all : 0;
    }
  }
  for (size_t k = 0; k < r->steps.size(); ++k) {
    StepResult& s = r->steps[k];
    std::vector<int64_t> latencies;
    std::vector<size_t> per_backend(n, 0);
    size_t sink_after = 0;
    size_t all_after = 0;
    std::vector<const ArenaRecord*> step_records;
    for (const ArenaRecord& rec : records) {
      if (rec.step != static_cast<int32_t>(k)) {
        continue;
      }
      step_records.push_back(&rec);
      ++s.calls;
      if (rec.ok && rec.latency_ns >= 0) {
        latencies.push_back(rec.latency_ns);
      } else {
        ++s.errors;
      }
      if (rec.backend >= 0 && static_cast<size_t>(rec.backend) < n) {
        ++per_backend[static_cast<size_t>(rec.backend)];
      }
      if (rec.intended_ns >= 1'000'000'000) {
        ++all_after;
        if (rec.backend >= 0 && static_cast<size_t>(rec.backend) < n &&
            scenario_.backends[static_cast<size_t>(rec.backend)].sinkhole) {
          ++sink_after;
        }
      }
    }
    std::sort(latencies.begin(), latencies.end());
    s.p50_ms = Percentile(latencies, 50);
    s.p99_ms = Percentile(latencies, 99);
    s.p999_ms = Percentile(latencies, 99.9);
    s.sinkhole_share = all_after == 0 ? 0
                                      : static_cast<double>(sink_after) /
                                            static_cast<double>(all_after);
    const double calls = static_cast<double>(std::max<size_t>(s.calls, 1));
    s.shares.assign(n, 0);
    for (size_t b = 0; b < n; ++b) {
      s.shares[b] = static_cast<double>(per_backend[b]) / calls;
      if (cap_share[b] > 0 && s.shares[b] / cap_share[b] > s.max_share_ratio) {
        s.max_share_ratio = s.shares[b] / cap_share[b];
        s.max_share_backend = static_cast<int>(b);
      }
    }
    // Recovery: from each antagonist's end, 500 ms windows every 100 ms
    // until the backend's share reaches 0.8× its capacity share.
    for (const ScenarioEvent& e : scenario_.events) {
      if (e.kind != ScenarioEvent::Kind::kCapacity ||
          e.length == absl::InfiniteDuration() ||
          absl::ToDoubleSeconds(e.end()) + 0.5 > duration) {
        continue;
      }
      const double end = absl::ToDoubleSeconds(e.end());
      double took = std::numeric_limits<double>::infinity();
      for (double w = end; w + 0.5 <= duration; w += 0.1) {
        size_t in = 0;
        size_t hits = 0;
        for (const ArenaRecord* rec : step_records) {
          const double t = static_cast<double>(rec->intended_ns) / 1e9;
          if (t >= w && t < w + 0.5) {
            ++in;
            hits += rec->backend == static_cast<int32_t>(e.backend) ? 1 : 0;
          }
        }
        double cap = 0;
        double all = 0;
        for (uint32_t b = 0; b < n; ++b) {
          const double c = CapacityAt(b, w + 0.25);
          all += c;
          cap += b == e.backend ? c : 0;
        }
        if (in > 0 && all > 0 &&
            static_cast<double>(hits) / static_cast<double>(in) >=
                0.8 * cap / all) {
          took = w + 0.5 - end;
          break;
        }
      }
      s.recovery_s = std::max(s.recovery_s, took);
    }
  }
}

// ---------------------------------------------------------------- report

std::string Ms(double ms) {
  if (ms >= 100) {
    return absl::StrFormat("%.0f", ms);
  }
  if (ms >= 10) {
    return absl::StrFormat("%.1f", ms);
  }
  return absl::StrFormat("%.2f", ms);
}

std::string Ratio(double v, double limit) {
  if (limit <= 0) {
    return "—";
  }
  return absl::StrFormat("%.2f×", v / limit);
}

std::string Seconds(double s) {
  if (s < 0) {
    return "—";
  }
  if (std::isinf(s)) {
    return "never";
  }
  return absl::StrFormat("%.1f s", s);
}

void Arena::Report() const {
  const RunResult* limit = nullptr;
  for (const RunResult& r : results_) {
    if (r.name == "limit") {
      limit = &r;
    }
  }
  const double mean_call_ms =
      absl::ToDoubleMilliseconds(scenario_.MeanCallTime());
  // Sustainable load per run.
  auto sustainable = [&](const RunResult& r) {
    double best = 0;
    for (const StepResult& s : r.steps) {
      if (s.calls > 0 && s.p99_ms <= 5 * mean_call_ms &&
          static_cast<double>(s.errors) <=
              0.01 * static_cast<double>(s.calls)) {
        best = std::max(best, s.load);
      }
    }
    return best;
  };
  std::printf(
      "arena: %s, %zu backends (%.0f calls/s aggregate capacity, mean call "
      "%.2f ms), %u clients, %g s measured per step after %g s warmup, "
      "deadline %g s\n",
      scenario_.source.c_str(), scenario_.backends.size(),
      scenario_.AggregateCapacity(), mean_call_ms, scenario_.clients,
      absl::ToDoubleSeconds(scenario_.duration),
      absl::ToDoubleSeconds(scenario_.warmup),
      absl::ToDoubleSeconds(scenario_.deadline));
  for (size_t k = 0; k < scenario_.loads.size(); ++k) {
    std::printf("\nload %.2f (%.0f calls/s)\n", scenario_.loads[k],
                scenario_.loads[k] * scenario_.AggregateCapacity());
    std::printf(
        "| policy | p50 ms | p99 ms | p99 ×limit | p99.9 ms | p99.9 ×limit "
        "| errors | max RIF | share/capacity (max) | recovery to 0.8× | "
        "sinkhole after 1 s | extra msgs/query | CPU machine / arena |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const RunResult& r : results_) {
      if (!r.skipped.empty() || k >= r.steps.size()) {
        continue;
      }
      const StepResult& s = r.steps[k];
      const StepResult* l = limit != nullptr && k < limit->steps.size()
                                ? &limit->steps[k]
                                : nullptr;
      std::printf(
          "| %s | %s | %s | %s | %s | %s | %.2f %% | %d | %.2f× (b%d) | %s | "
          "%.2f %% | %.3f | %.0f %% / %.0f %% |\n",
          r.name.c_str(), Ms(s.p50_ms).c_str(), Ms(s.p99_ms).c_str(),
          Ratio(s.p99_ms, l ? l->p99_ms : 0).c_str(), Ms(s.p999_ms).c_str(),
          Ratio(s.p999_ms, l ? l->p999_ms : 0).c_str(),
          100.0 * static_cast<double>(s.errors) /
              static_cast<double>(std::max<size_t>(s.calls, 1)),
          s.max_rif, s.max_share_ratio, s.max_share_backend,
          Seconds(s.recovery_s).c_str(), 100 * s.sinkhole_share,
          r.extra_per_query, 100 * s.machine_cpu, 100 * s.arena_cpu);
      if (flags_.verbose) {
        std::string shares;
        for (double v : s.shares) {
          absl::StrAppend(&shares, absl::StrFormat(" %.1f", 100 * v));
        }
        std::printf("    shares %%:%s\n", shares.c_str());
      }
    }
  }
  const double limit_sustainable = limit ? sustainable(*limit) : 0;
  std::printf(
      "\nsustainable load (highest step with p99 <= 5 × %.2f ms and errors "
      "<= 1 %%), extra messages per query by kind\n",
      mean_call_ms);
  for (const RunResult& r : results_) {
    if (!r.skipped.empty()) {
      std::printf("  %-22s skipped: %s\n", r.name.c_str(), r.skipped.c_str());
      continue;
    }
    std::string kinds;
    for (const auto& [kind, n] : r.extra_by_kind) {
      absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", kind, " ", n);
    }
    std::printf(
        "  %-22s %.2f (%s the limit's)  %.4f/query (%s over %llu "
        "calls)%s%s\n",
        r.name.c_str(), sustainable(r),
        Ratio(sustainable(r), limit_sustainable).c_str(), r.extra_per_query,
        kinds.c_str(), static_cast<unsigned long long>(r.queries),
        r.abandoned ? absl::StrCat("; ", r.abandoned,
                                   " abandoned calls dropped unserved")
                          .c_str()
                    : "",
        r.dropped ? absl::StrCat(" DROPPED ", r.dropped).c_str() : "");
  }
  if (flags_.json.empty()) {
    return;
  }
  std::string json = absl::StrCat(
      "{\n  \"scenario\": \"", scenario_.source,
      "\",\n  \"time_scale\": ", flags_.scale.time,
      ",\n  \"service_scale\": ", flags_.scale.service,
      ",\n  \"aggregate_capacity\": ", scenario_.AggregateCapacity(),
      ",\n  \"mean_call_ms\": ", mean_call_ms,
      ",\n  \"clients\": ", scenario_.clients,
      ",\n  \"duration_s\": ", absl::ToDoubleSeconds(scenario_.duration),
      ",\n  \"loads\": [", absl::StrJoin(scenario_.loads, ", "),
      "],\n  \"runs\": [");
  for (size_t i = 0; i < results_.size(); ++i) {
    const RunResult& r = results_[i];
    absl::StrAppend(&json, i ? "," : "", "\n    {\"name\": \"", r.name,
                    "\", \"mode\": \"", r.mode, "\"");
    if (!r.skipped.empty()) {
      std::string why = r.skipped;
      std::replace(why.begin(), why.end(), '"', '\'');
      std::replace(why.begin(), why.end(), '\\', '/');
      absl::StrAppend(&json, ", \"skipped\": \"", why, "\"}");
      continue;
    }
    absl::StrAppend(&json, ", \"sustainable_load\": ", sustainable(r),
                    ", \"extra_per_query\": ", r.extra_per_query,
                    ", \"queries\": ", r.queries,
                    ", \"abandoned\": ", r.abandoned, ", \"extra\": {");
    bool first = true;
    for (const auto& [kind, n] : r.extra_by_kind) {
      absl::StrAppend(&json, first ? "" : ", ", "\"", kind, "\": ", n);
      first = false;
    }
    absl::StrAppend(&json, "}, \"steps\": [");
    for (size_t k = 0; k < r.steps.size(); ++k) {
      const StepResult& s = r.steps[k];
      absl::StrAppend(&json, k ? ", " : "", "\n      {\"load\": ", s.load,
                      ", \"rate\": ", s.rate, ", \"calls\": ", s.calls,
                      ", \"errors\": ", s.errors, ", \"p50_ms\": ", s.p50_ms,
                      ", \"p99_ms\": ", s.p99_ms, ", \"p999_ms\": ", s.p999_ms,
                      ", \"max_rif\": ", s.max_rif,
                      ", \"max_share_ratio\": ", s.max_share_ratio,
                      ", \"max_share_backend\": ", s.max_share_backend,
                      ", \"recovery_s\": ",
                      s.recovery_s < 0           ? "null"
                      : std::isinf(s.recovery_s) ? "\"never\""
                                                 : absl::StrCat(s.recovery_s),
                      ", \"sinkhole_share\": ", s.sinkhole_share,
                      ", \"machine_cpu\": ", s.machine_cpu,
                      ", \"arena_cpu\": ", s.arena_cpu, ", \"shares\": [",
                      absl::StrJoin(s.shares, ", "), "]}");
    }
    absl::StrAppend(&json, "]}");
  }
  absl::StrAppend(&json, "\n  ]\n}\n");
  std::ofstream(flags_.json) << json;
}

int Coordinator(Flags flags) {
  absl::StatusOr<Scenario> scenario = LoadScaled(flags.scenario, flags.scale);
  if (!scenario.ok()) {
    std::fprintf(stderr, "arena: %s\n", scenario.status().ToString().c_str());
    return 2;
  }
  if (flags.smoke) {
    scenario->loads.resize(std::min<size_t>(scenario->loads.size(), 1));
    scenario->warmup = absl::Milliseconds(500);
    scenario->duration = absl::Seconds(2);
    if (flags.policies.empty()) {
      flags.policies = {"round_robin", "p2c_peak_ewma"};
    }
    flags.grpc = false;
  }
  if (flags.policies.empty()) {
    flags.policies = scenario->policies;
  }
  if (scenario->loads.size() > static_cast<size_t>(kArenaMaxSteps)) {
    std::fprintf(stderr, "arena: at most %d load steps\n", kArenaMaxSteps);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  // The smoke's shorter steps reach the clients through their flags; the
  // backends and the limit read only the events, which --smoke keeps.
  Arena arena(flags, *std::move(scenario));
  absl::Status status = arena.Run();
  arena.Stop();
  arena.Report();
  if (!status.ok()) {
    std::fprintf(stderr, "arena: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
  if (absl::StatusOr<std::vector<std::string>> args =
          ParseCommandLine(argc, argv, {.usage = kUsage});
      !args.ok()) {
    std::fprintf(stderr, "arena: %s\n%s",
                 std::string(args.status().message()).c_str(), kUsage);
    return 2;
  }
  std::string scenario = absl::GetFlag(FLAGS_scenario);
  if (scenario.empty()) {
    scenario = testing::SourceDir() + "/bench/scenario/default.scn";
  }
  ArenaScale scale;
  scale.time = absl::GetFlag(FLAGS_time_scale);
  scale.service = absl::GetFlag(FLAGS_service_scale);
  if (!(scale.time > 0) || !(scale.service > 0)) {
    std::fprintf(stderr,
                 "arena: --time_scale and --service_scale must be positive\n");
    return 2;
  }
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "backend") {
    BackendRole b;
    b.scenario = scenario;
    b.scale = scale;
    b.shm = absl::GetFlag(FLAGS_shm);
    b.first = absl::GetFlag(FLAGS_first);
    b.count = absl::GetFlag(FLAGS_count);
    b.max_run_s = absl::GetFlag(FLAGS_max_run_s);
    return RunBackends(b);
  }
  if (role == "client") {
    ClientRole c;
    c.scenario = scenario;
    c.scale = scale;
    c.shm = absl::GetFlag(FLAGS_shm);
    c.index = absl::GetFlag(FLAGS_index);
    c.mode = absl::GetFlag(FLAGS_mode);
    c.target = absl::GetFlag(FLAGS_target);
    c.group = absl::GetFlag(FLAGS_group);
    c.addresses = absl::GetFlag(FLAGS_addresses);
    for (const std::string& r : absl::GetFlag(FLAGS_rates)) {
      double v = 0;
      if (!absl::SimpleAtod(r, &v) || !(v > 0)) {
        std::fprintf(stderr, "arena: bad rate %s\n", r.c_str());
        return 2;
      }
      c.rates.push_back(v);
    }
    c.period_ns = absl::GetFlag(FLAGS_period_ns);
    c.warmup_ns = absl::GetFlag(FLAGS_warmup_ns);
    c.duration_ns = absl::GetFlag(FLAGS_duration_ns);
    c.deadline_ns = absl::GetFlag(FLAGS_deadline_ns);
    c.seed = absl::GetFlag(FLAGS_seed);
    c.out = absl::GetFlag(FLAGS_out);
    return RunClient(c);
  }
  if (role != "coordinator") {
    std::fprintf(stderr, "arena: unknown role %s\n", role.c_str());
    return 2;
  }
  Flags flags;
  flags.scenario = scenario;
  flags.scale = scale;
  flags.smoke = absl::GetFlag(FLAGS_smoke);
  flags.policies = absl::GetFlag(FLAGS_policies);
  flags.grpc = absl::GetFlag(FLAGS_grpc);
  flags.grpc_js = absl::GetFlag(FLAGS_grpc_js);
  flags.backend_procs = absl::GetFlag(FLAGS_backend_procs);
  flags.json = absl::GetFlag(FLAGS_json);
  flags.verbose = absl::GetFlag(FLAGS_verbose);
  flags.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  if (flags.bin_dir.empty()) {
    flags.bin_dir = SelfPath();
    flags.bin_dir.resize(flags.bin_dir.rfind('/'));
  }
  return Coordinator(std::move(flags));
}

}  // namespace

absl::StatusOr<Scenario> LoadArenaScenario(const std::string& path,
                                           const ArenaScale& scale) {
  return LoadScaled(path, scale);
}

}  // namespace aside::bench

int main(int argc, char** argv) { return aside::bench::Main(argc, argv); }
