// A rolling deploy with every kind of client at once, end to end: the real
// aside-server binary; one group of 10 backend processes
// (deploy_backend.cc, each its own process, stopped with SIGKILL); four
// services balancing with the stub (deploy_stub.cc, aside::Client over
// Watch), a stock grpc-js xDS client (tests/xds/node/xds_client.js) and a
// stock gRPC C++ grpclb client (tests/grpclb/stock_client.cc, the balancer
// found through a DNS SRV record), all calling at a steady rate. Each
// backend in turn runs its preStop hook (PreStop: drain itself with its
// self-drain credential, then wait until nobody calls it), is killed at
// once, and is replaced by a new backend on a new port that joins the
// group. No client may see a failed call.
//
// The figures (RecordProperty, and on stdout): calls per second and failed
// calls per client kind; for the drains (p50, p99 from the request): the
// acknowledgement, each kind's last call to the backend (and how many
// drains it outlived the acknowledgement), and "drained", the end of
// preStop, against the fixed 15 s preStop sleep deployments use instead.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "client/xds_bootstrap.h"
#include "tests/discovery/dns_test_servers.h"
#include "tests/integration/deploy_fixtures.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::BackendProcess;
using ::aside::testing::ClientTotals;
using ::aside::testing::FakeDnsServer;
using ::aside::testing::MonotonicNanos;
using ::aside::testing::Process;
using ::aside::testing::RunningServer;
using ::aside::testing::StartChild;
using ::aside::testing::TempDir;

constexpr char kGroup[] = "web";
constexpr char kAdminToken[] = "rolling-deploy-admin-token";
// What every backend pod holds: drains its own address, nothing else.
constexpr char kSelfDrainToken[] = "rolling-deploy-self-drain-token";
constexpr int kBackends = 10;
constexpr int kStubs = 4;
// The load, steady and the same on every run: each backend takes
// kBackendLatency to serve a call (so calls are in flight when a backend
// stops, and a client still sending to it fails calls); each stub calls at
// kStubCallsPerSecond on a fixed schedule; each stock client makes one call
// at a time and pauses kStockPauseMs between calls (about 100 calls/s for
// the C++ grpclb client, 60 to 75 for grpc-js here). About 550 calls/s in all,
// which this 2-core machine sustains beside the server, ten backends and
// the other tests.
constexpr absl::Duration kBackendLatency = absl::Milliseconds(5);
constexpr double kStubCallsPerSecond = 100;
constexpr int kStockPauseMs = 2;
// PreStop's wait: a caller has stopped calling the drained backend once it
// kept calling the others for kQuiet after its last call to it (each caller
// reaches each backend several times a second). Bounded by kDrainTimeout,
// the --timeout an operator would give `asidectl drain --wait`.
constexpr absl::Duration kQuiet = absl::Seconds(1);
constexpr absl::Duration kDrainTimeout = absl::Seconds(30);
// What deployments sleep in preStop today instead of waiting.
constexpr absl::Duration kFixedPreStopSleep = absl::Seconds(15);
// Bound of every other wait for the clients or servers; generous because
// the suite may share the machine's two cores with other tests.
constexpr absl::Duration kWait = absl::Seconds(30);

// The preStop hook as a backend's Deployment runs it (docs/operations.md,
// "A backend drains itself"): asidectl with the self-drain token, draining
// the backend's own port at its own IP.
//
// With kPreStopWaits the command gets `--wait --timeout 30s`: its exit 0
// is "drained" (every client of this replica confirmed a table without the
// backend, and no reporting stub has a call in flight to it). Without it,
// the hook is what an operator had to write before the wait existed: the
// drain returns once the server stored and published it, and PreStop then
// watches the backend until nobody calls it (WaitUntilUnused), for
// comparison.
constexpr bool kPreStopWaits = true;
std::vector<std::string> PreStopCommand(const std::string& server,
                                        const std::string& token_file,
                                        int port) {
  std::vector<std::string> argv = {aside::testing::BinDir() + "/asidectl",
                                   "--server",
                                   server,
                                   "--token-file",
                                   token_file,
                                   "drain",
                                   kGroup,
                                   "--self",
                                   absl::StrCat(port),
                                   "--self-ip",
                                   "127.0.0.1"};
  if (kPreStopWaits) {
    argv.insert(argv.end(),
                {"--wait", "--timeout",
                 absl::StrCat(absl::ToInt64Seconds(kDrainTimeout), "s")});
  }
  return argv;
}

// A client process: `name` is what it puts in HelloRequest.name (the
// caller the backends count), `kind` its client kind.
struct Caller {
  std::string name;
  std::string kind;
  std::unique_ptr<Process> process;
};

// One drain's times, from the request (PreStop's start): to the drain's
// acknowledgement (the command exited: stored and published), to the last
// call the backend served from each client kind (zero: none after the
// request), and to the end of PreStop ("drained").
struct DrainTime {
  absl::Duration acknowledged;
  std::map<std::string, absl::Duration> last_call;
  absl::Duration drained;
};

class RollingDeployTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens_ = dir_.WriteSecret(
        "tokens", absl::StrCat(kAdminToken, " admin\n", kSelfDrainToken,
                               " self-drain backends\n"));
    self_drain_token_ = dir_.WriteSecret("self-drain-token", kSelfDrainToken);
    const std::string config = dir_.WriteFile(
        "aside.yaml", absl::StrCat("admin: {token_file: ", tokens_, "}\n",
                                   // Stock clients report load without
                                   // credentials.
                                   "load_reports: {auth: open}\n"));
    ASSERT_OK_AND_ASSIGN(server_,
                         aside::testing::StartServer(dir_.path() + "/state",
                                                     {"--config", config}));
    admin_ = v1::Admin::NewStub(grpc::CreateChannel(
        server_.target(), grpc::InsecureChannelCredentials()));

    for (int i = 0; i < kBackends; ++i) {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<BackendProcess> b,
                           BackendProcess::Start(kBackendLatency));
      live_.push_back(std::move(b));
    }
    CreateGroup();

    // The stock grpclb client finds the balancer by the SRV record
    // _grpclb._tcp.web.lb.test, from a DNS server on a port the kernel
    // chose.
    const int aside_port = server_.grpc_port;
    ASSERT_OK_AND_ASSIGN(
        dns_,
        FakeDnsServer::Start([aside_port](const std::string& name, int qtype) {
          FakeDnsServer::Answer answer;
          if (qtype == 33 && name == "_grpclb._tcp.web.lb.test") {
            answer.srv = {{.target = "lb.lb.test", .port = aside_port}};
          } else if (qtype == 1 &&
                     (name == "lb.lb.test" || name == "web.lb.test")) {
            answer.addresses = {"127.0.0.1"};
          }
          return answer;  // anything else: no data
        }));
    // The grpc-js client finds it through the bootstrap asidectl prints.
    ASSERT_OK_AND_ASSIGN(const std::string bootstrap,
                         XdsBootstrapJson({.server = server_.target(),
                                           .node_id = "rolling-deploy"}));
    bootstrap_ = dir_.WriteFile("bootstrap.json", bootstrap);
    StartClients();
  }

  void TearDown() override {
    callers_.clear();
    live_.clear();
    EXPECT_OK(aside::testing::StopServer(server_, kWait));
  }

  std::unique_ptr<grpc::ClientContext> AdminContext() const {
    return aside::testing::Context(kAdminToken);
  }

  void CreateGroup() {
    v1::CreateGroupRequest request;
    v1::Group* g = request.mutable_group();
    g->set_name(kGroup);
    g->mutable_policy()->mutable_round_robin();
    g->mutable_health_check()->set_kind(v1::HealthCheck::NONE);
    for (const auto& b : live_) {
      g->add_backends()->set_address(b->address());
    }
    v1::Group created;
    const grpc::Status s =
        admin_->CreateGroup(AdminContext().get(), request, &created);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void AddBackend(const std::string& address) {
    v1::AddBackendsRequest request;
    request.set_group(kGroup);
    request.add_backends()->set_address(address);
    v1::Group group;
    const grpc::Status s =
        admin_->AddBackends(AdminContext().get(), request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void RemoveBackend(const std::string& address) {
    v1::RemoveBackendsRequest request;
    request.set_group(kGroup);
    request.add_addresses(address);
    v1::Group group;
    const grpc::Status s =
        admin_->RemoveBackends(AdminContext().get(), request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void StartClients() {
    for (int i = 0; i < kStubs; ++i) {
      const std::string name = absl::StrCat("stub-", i);
      StartCaller(name, "stub",
                  {ASIDE_DEPLOY_STUB_BIN, "--aside", server_.target(),
                   "--group", kGroup, "--name", name, "--rate",
                   absl::StrCat(kStubCallsPerSecond)});
    }
    StartCaller("grpclb", "grpclb",
                {ASIDE_GRPCLB_STOCK_CLIENT_BIN,
                 absl::StrCat("dns://127.0.0.1:", dns_->port(),
                              // The name's own address (used only if the
                              // client fell back from its balancer) is the
                              // Aside server: a fallback call fails.
                              "/web.lb.test:", server_.grpc_port),
                 "grpclb", absl::StrCat(kStockPauseMs)});
    ASSERT_TRUE(std::string(ASIDE_NODE).find("NOTFOUND") == std::string::npos)
        << "node is not installed (scripts/install-deps.sh)";
    StartCaller("xds", "xds",
                {"/usr/bin/env", "GRPC_XDS_BOOTSTRAP=" + bootstrap_, ASIDE_NODE,
                 ASIDE_XDS_CLIENT_JS, absl::StrCat("xds:///", kGroup), "xds",
                 absl::StrCat(kStockPauseMs)});
    for (Caller& c : callers_) {
      ASSERT_OK(c.process->WaitForLine("event=client.started", kWait));
    }
  }

  void StartCaller(const std::string& name, const std::string& kind,
                   std::vector<std::string> argv) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Process> p,
                         StartChild(std::move(argv)));
    callers_.push_back({name, kind, std::move(p)});
  }

  // Reads every backend's reports, and keeps the clients' pipes empty.
  void PollAll() {
    for (auto& b : live_) {
      b->Poll();
    }
    for (Caller& c : callers_) {
      c.process->ReadAvailable();
    }
  }

  // Waits until every caller has called `backend`.
  bool WaitUntilEveryCallerCalls(BackendProcess& backend) {
    return aside::testing::Eventually(
        [&] {
          PollAll();
          return std::all_of(
              callers_.begin(), callers_.end(),
              [&](const Caller& c) { return backend.Calls(c.name).count > 0; });
        },
        kWait);
  }

  // Whether every caller has stopped calling live_[index]: since both the
  // drain request (`since_nanos`) and its last call to it, it kept calling
  // the other backends for kQuiet (so it is alive and picks elsewhere), and
  // the backend says it got no call from it in that time.
  bool Unused(size_t index, int64_t since_nanos) const {
    const int64_t quiet = absl::ToInt64Nanoseconds(kQuiet);
    for (const Caller& c : callers_) {
      const int64_t here =
          std::max(live_[index]->Calls(c.name).last_nanos, since_nanos);
      if (live_[index]->reported_nanos() < here + quiet) {
        return false;
      }
      int64_t elsewhere = 0;
      for (size_t i = 0; i < live_.size(); ++i) {
        if (i != index) {
          elsewhere = std::max(elsewhere, live_[i]->Calls(c.name).last_nanos);
        }
      }
      if (elsewhere < here + quiet) {
        return false;
      }
    }
    return true;
  }

  // What a careful operator's preStop does while the drain cannot be
  // waited for: watch the backend's own per-caller call counts until every
  // caller has moved off it (Unused), at most kDrainTimeout.
  absl::Status WaitUntilUnused(size_t index, int64_t since_nanos) {
    if (aside::testing::Eventually(
            [&] {
              PollAll();
              return Unused(index, since_nanos);
            },
            kDrainTimeout)) {
      return absl::OkStatus();
    }
    std::string still;
    for (const Caller& c : callers_) {
      absl::StrAppend(
          &still, c.name, " last called it ",
          (MonotonicNanos() - live_[index]->Calls(c.name).last_nanos) /
              1'000'000,
          " ms ago; ");
    }
    return absl::DeadlineExceededError(
        absl::StrCat(live_[index]->address(), " still called after ",
                     absl::FormatDuration(kDrainTimeout), ": ", still));
  }

  // The backend's preStop hook: drain itself and wait until its clients
  // let go (PreStopCommand). Returns its times.
  absl::StatusOr<DrainTime> PreStop(size_t index) {
    const int64_t start = MonotonicNanos();
    const aside::testing::CommandResult drain = aside::testing::RunCommand(
        PreStopCommand(server_.target(), self_drain_token_,
                       live_[index]->port()),
        kDrainTimeout + absl::Seconds(5));
    if (drain.exit_code != 0) {
      return absl::InternalError(
          absl::StrCat("preStop exited ", drain.exit_code, ": ", drain.output));
    }
    DrainTime time;
    time.acknowledged = absl::Nanoseconds(MonotonicNanos() - start);
    if (!kPreStopWaits) {
      if (absl::Status waited = WaitUntilUnused(index, start); !waited.ok()) {
        return waited;
      }
    }
    time.drained = absl::Nanoseconds(MonotonicNanos() - start);
    PollAll();
    for (const Caller& c : callers_) {
      absl::Duration& last = time.last_call[c.kind];
      last = std::max(last,
                      absl::Nanoseconds(std::max<int64_t>(
                          live_[index]->Calls(c.name).last_nanos - start, 0)));
    }
    return time;
  }

  // Calls served per client kind so far, by every backend (the live ones
  // as of their last report, the stopped ones in full).
  std::map<std::string, uint64_t> ServedPerKind() const {
    std::map<std::string, uint64_t> out;
    for (const Caller& c : callers_) {
      uint64_t& n = out[c.kind];
      for (const auto& b : live_) {
        n += b->Calls(c.name).count;
      }
      for (const auto& b : stopped_) {
        n += b->Calls(c.name).count;
      }
    }
    return out;
  }

  TempDir dir_;
  std::string tokens_;
  std::string self_drain_token_;
  std::string bootstrap_;
  RunningServer server_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<FakeDnsServer> dns_;
  std::vector<std::unique_ptr<BackendProcess>> live_;
  std::vector<std::unique_ptr<BackendProcess>> stopped_;
  std::vector<Caller> callers_;
};

TEST_F(RollingDeployTest, EveryBackendReplacedWithoutAFailedCall) {
  // Every caller reaches every backend before the deploy starts.
  for (auto& b : live_) {
    ASSERT_TRUE(WaitUntilEveryCallerCalls(*b))
        << b->address() << " is not called by every client";
  }
  PollAll();
  const std::map<std::string, uint64_t> served_before = ServedPerKind();
  const absl::Time deploy_start = absl::Now();

  std::vector<DrainTime> drains;
  for (size_t i = 0; i < live_.size(); ++i) {
    absl::StatusOr<DrainTime> drained = PreStop(i);
    ASSERT_OK(drained.status()) << "backend " << i;
    drains.push_back(*drained);
    // SIGTERM, and the backend exits at once.
    live_[i]->Kill();
    const std::string old_address = live_[i]->address();
    stopped_.push_back(std::move(live_[i]));
    RemoveBackend(old_address);
    // The new pod: a new process on a new port, added once it listens.
    ASSERT_OK_AND_ASSIGN(live_[i], BackendProcess::Start(kBackendLatency));
    AddBackend(live_[i]->address());
    ASSERT_TRUE(WaitUntilEveryCallerCalls(*live_[i]))
        << "new backend " << live_[i]->address()
        << " is not called by every client";
  }
  PollAll();
  const absl::Duration deploy_time = absl::Now() - deploy_start;
  const std::map<std::string, uint64_t> served_after = ServedPerKind();

  // Stop the clients and read their own counts: the stubs write their
  // totals on SIGTERM; the stock clients' last summary (at most a second
  // old) and every failure line, written as it happens.
  std::map<std::string, ClientTotals> per_kind;
  for (Caller& c : callers_) {
    c.process->Signal(c.kind == "stub" ? SIGTERM : SIGKILL);
    ASSERT_TRUE(c.process->Wait(kWait).has_value()) << c.name;
    c.process->DrainStderr(absl::Seconds(5));
    const ClientTotals t = aside::testing::TotalsOf(*c.process);
    ClientTotals& k = per_kind[c.kind];
    k.ok += t.ok;
    k.failed += t.failed;
    for (const std::string& f : t.failures) {
      k.failures.push_back(c.name + ": " + f);
    }
  }

  // The figures: rates and failures per client kind, and the drains.
  const double seconds = absl::ToDoubleSeconds(deploy_time);
  uint64_t total = 0;
  std::string figures;
  for (const auto& [kind, after] : served_after) {
    const uint64_t calls = after - served_before.at(kind);
    total += calls;
    const int rate = static_cast<int>(static_cast<double>(calls) / seconds);
    RecordProperty(kind + "_calls_per_second", rate);
    RecordProperty(kind + "_failed_calls",
                   static_cast<int>(per_kind[kind].failed));
    absl::StrAppend(&figures, "  ", kind, ": ", rate, " calls/s, ",
                    per_kind[kind].failed, " failed of ", per_kind[kind].ok,
                    "\n");
  }
  const int total_rate = static_cast<int>(static_cast<double>(total) / seconds);
  RecordProperty("calls_per_second", total_rate);
  // "p50 X ms, p99 Y ms" of one time of every drain, recorded as
  // <name>_p50_ms and <name>_p99_ms.
  auto percentiles = [&](const std::string& name,
                         absl::Duration DrainTime::*field,
                         const std::string& kind = "") {
    std::vector<absl::Duration> values;
    for (const DrainTime& d : drains) {
      values.push_back(kind.empty() ? d.*field : d.last_call.at(kind));
    }
    const int64_t p50 =
        absl::ToInt64Milliseconds(aside::testing::Percentile(values, 50));
    const int64_t p99 =
        absl::ToInt64Milliseconds(aside::testing::Percentile(values, 99));
    RecordProperty(name + "_p50_ms", p50);
    RecordProperty(name + "_p99_ms", p99);
    return absl::StrCat("p50 ", p50, " ms, p99 ", p99, " ms");
  };
  absl::StrAppend(&figures, "  drain acknowledged: ",
                  percentiles("drain_acknowledged", &DrainTime::acknowledged),
                  "\n");
  for (const auto& [kind, totals] : per_kind) {
    // Drains this kind still called the backend after: a preStop that
    // ended at the acknowledgement would have cut those calls off.
    int late = 0;
    absl::Duration latest;
    for (const DrainTime& d : drains) {
      if (d.last_call.at(kind) > d.acknowledged) {
        ++late;
        latest = std::max(latest, d.last_call.at(kind) - d.acknowledged);
      }
    }
    RecordProperty(kind + "_called_after_acknowledgement", late);
    absl::StrAppend(&figures, "  last call from ", kind, ": ",
                    percentiles(kind + "_last_call", nullptr, kind),
                    "; after the acknowledgement in ", late, " of ",
                    drains.size(), " drains (at most ",
                    absl::ToInt64Milliseconds(latest), " ms after)\n");
  }
  absl::StrAppend(&figures, "  drained (end of preStop): ",
                  percentiles("drained", &DrainTime::drained), " against ",
                  absl::ToInt64Milliseconds(kFixedPreStopSleep),
                  " ms of the fixed sleep\n");
  RecordProperty("fixed_prestop_sleep_ms",
                 absl::ToInt64Milliseconds(kFixedPreStopSleep));
  std::cout << "rolling deploy of " << kBackends << " backends in "
            << absl::FormatDuration(
                   absl::Trunc(deploy_time, absl::Milliseconds(1)))
            << ", " << total_rate << " calls/s in all\n"
            << figures;

  for (const auto& [kind, totals] : per_kind) {
    EXPECT_GT(totals.ok, 0u) << kind;
    EXPECT_EQ(totals.failed, 0u) << kind << " failed calls:\n"
                                 << absl::StrJoin(totals.failures, "\n");
  }
}

}  // namespace
}  // namespace aside
