// Stock gRPC clients using Aside as their grpclb balancer, end to end:
// dnsmasq on a loopback port serves _grpclb._tcp.web.lb.test (SRV → the
// real aside-server binary) and A records on 127.0.0.1; a C++ client built
// from gRPC and generated code only, and Debian's Python grpcio 1.51, dial
// dns://127.0.0.1:<dns port>/web.lb.test:<port> with SRV queries on and
// the grpclb policy from service config, and call Greeter backends the
// test runs. The backends log every call (caller, backend, lb-token), so
// the test sees exactly where each client sent each call.
//
// Backends 0..2 are the group's members; backend 3 listens on the port of
// the target name itself (web.lb.test:<port 3>), so a client only calls it
// when it falls back from the balancer to the resolver's addresses.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "lib/status_macros.h"
#include "tests/discovery/dns_test_servers.h"
#include "tests/grpclb/greeter_backends.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::CallLog;
using ::aside::testing::Dnsmasq;
using ::aside::testing::GreeterBackends;
using ::aside::testing::Process;
using ::aside::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Le;

constexpr char kAdminToken[] = "grpclb-stock-client-test-token";
constexpr int kMembers = 3;
constexpr int kFallback = 3;
// Bound of every wait for something the clients or servers do; generous
// because the suite may share the machine's two cores with other tests.
constexpr absl::Duration kWait = absl::Seconds(30);

// Starts `argv` so that it dies with the test process even if the test
// never reaches its destructors (setpriv execs in place: the pid is the
// program's own).
absl::StatusOr<std::unique_ptr<Process>> StartChild(
    std::vector<std::string> argv) {
  if (access("/usr/bin/setpriv", X_OK) == 0) {
    argv.insert(argv.begin(), {"/usr/bin/setpriv", "--pdeathsig", "KILL"});
  }
  return Process::Start(std::move(argv));
}

// A stock client process and the name it puts in its calls (the caller
// name the backends log).
struct StockClient {
  std::string name;
  std::unique_ptr<Process> process;
};

// Cumulative call counts a client reported on stderr.
struct ClientTotals {
  uint64_t ok = 0;
  uint64_t failed = 0;
};

class StockClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(backends_,
                         GreeterBackends::Start(kMembers + 1, &log_));
    // Clients find the balancer by SRV, so its port is chosen up front and
    // kept across restarts. Aside starts before dnsmasq picks a port, and
    // again on another port if the one chosen was taken meanwhile.
    tokens_ = dir_.WriteSecret("tokens", absl::StrCat(kAdminToken, " admin\n"));
    absl::Status started;
    for (int attempt = 0; attempt < 5; ++attempt) {
      aside_port_ = aside::testing::PickUnusedPort();
      started = StartAside();
      if (started.ok()) {
        break;
      }
    }
    ASSERT_OK(started);
    Dnsmasq::Options dns;
    dns.hosts = "127.0.0.1 lb.lb.test\n127.0.0.1 web.lb.test\n";
    dns.args = {absl::StrCat("--srv-host=_grpclb._tcp.web.lb.test,lb.lb.test,",
                             aside_port_)};
    ASSERT_OK_AND_ASSIGN(dnsmasq_, Dnsmasq::Start(std::move(dns)));
  }

  // Stops the clients, then Aside with SIGTERM: it must exit cleanly (and,
  // in sanitizer builds, without reports) after serving them.
  void TearDown() override {
    clients_.clear();
    if (aside_ == nullptr) {
      return;
    }
    aside_->Signal(SIGTERM);
    const std::optional<int> status = aside_->Wait(kWait);
    ASSERT_TRUE(status.has_value()) << "aside-server did not exit";
    aside_->DrainStderr(absl::Seconds(5));
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << "aside-server exit status " << *status << "; stderr:\n"
        << aside_->StderrText();
  }

  // The target every stock client dials.
  std::string Target() const {
    return absl::StrCat("dns://127.0.0.1:", dnsmasq_->port(),
                        "/web.lb.test:", backends_->port(kFallback));
  }

  // Starts aside-server listening on aside_port_.
  absl::Status StartAside() {
    const std::string config = dir_.WriteFile(
        "aside.yaml",
        absl::StrCat("listen: 127.0.0.1:", aside_port_, "\n", "metrics: \"\"\n",
                     "state_dir: ", dir_.path(), "/state\n",
                     "admin: {token_file: ", tokens_, "}\n",
                     "grpclb: {client_stats_report_interval: 1s}\n",
                     // Stock grpclb clients send ClientStats without
                     // credentials.
                     "load_reports: {auth: open}\n"));
    ASIDE_ASSIGN_OR_RETURN(
        aside_, StartChild({aside::testing::BinDir() + "/aside-server",
                            "--config", config}));
    ASIDE_RETURN_IF_ERROR(
        aside_->WaitForLine("event=server.started", kWait).status());
    admin_ = v1::Admin::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", aside_port_),
                            grpc::InsecureChannelCredentials()));
    return absl::OkStatus();
  }

  void KillAside() {
    aside_->Signal(SIGKILL);
    ASSERT_TRUE(aside_->Wait(kWait).has_value());
  }

  std::unique_ptr<grpc::ClientContext> AdminContext() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    context->AddMetadata("authorization", absl::StrCat("Bearer ", kAdminToken));
    return context;
  }

  // Creates group "web" through Admin: backend i with weights[i] (for the
  // first weights.size() backends).
  void CreateGroup(const std::vector<uint32_t>& weights,
                   double max_requests_per_second = 0) {
    v1::CreateGroupRequest request;
    v1::Group* g = request.mutable_group();
    g->set_name("web");
    g->mutable_policy()->mutable_weighted_round_robin();
    g->mutable_health_check()->set_kind(v1::HealthCheck::NONE);
    g->mutable_grpclb()->set_max_requests_per_second(max_requests_per_second);
    for (size_t i = 0; i < weights.size(); ++i) {
      v1::Backend* b = g->add_backends();
      b->set_address(backends_->address(static_cast<int>(i)));
      b->set_weight(weights[i]);
    }
    v1::Group created;
    const grpc::Status s =
        admin_->CreateGroup(AdminContext().get(), request, &created);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void Drain(int backend) {
    v1::DrainBackendsRequest request;
    request.set_group("web");
    request.add_addresses(backends_->address(backend));
    request.set_drained(true);
    v1::Group group;
    const grpc::Status s =
        admin_->DrainBackends(AdminContext().get(), request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void AddMember(int backend) {
    v1::AddBackendsRequest request;
    request.set_group("web");
    request.add_backends()->set_address(backends_->address(backend));
    v1::Group group;
    const grpc::Status s =
        admin_->AddBackends(AdminContext().get(), request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  v1::Group GetGroup() const {
    v1::GetGroupRequest request;
    request.set_name("web");
    v1::Group group;
    const grpc::Status s =
        admin_->GetGroup(AdminContext().get(), request, &group);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return group;
  }

  // Starts the C++ ("cpp") and the Python ("python") stock clients.
  void StartClients() {
    const std::string pause_ms = "3";
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<Process> cpp,
        StartChild({ASIDE_STOCK_CLIENT_BIN, Target(), "cpp", pause_ms}));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Process> python,
                         StartChild({"/usr/bin/python3", ASIDE_STOCK_CLIENT_PY,
                                     Target(), "python", pause_ms}));
    clients_.push_back({"cpp", std::move(cpp)});
    clients_.push_back({"python", std::move(python)});
    for (StockClient& c : clients_) {
      ASSERT_OK(c.process->WaitForLine("event=client.started", kWait));
    }
  }

  // Waits until every client has called each of `backends` at least
  // `calls` times since position since[name] (0 when absent).
  void WaitUntilClientsCall(const std::vector<int>& backends, int calls,
                            const std::map<std::string, size_t>& since = {}) {
    const bool done = log_.WaitUntil(
        [&](const CallLog::Calls& log) {
          for (const StockClient& c : clients_) {
            auto it = log.find(c.name);
            if (it == log.end()) {
              return false;
            }
            const size_t from = since.contains(c.name) ? since.at(c.name) : 0;
            for (int b : backends) {
              if (std::count(
                      it->second.begin() + static_cast<ptrdiff_t>(std::min(
                                               from, it->second.size())),
                      it->second.end(), b) < calls) {
                return false;
              }
            }
          }
          return true;
        },
        kWait);
    ASSERT_TRUE(done) << "clients did not reach backends within " << kWait
                      << "; " << Describe();
  }

  // Every client's position in the call log now.
  std::map<std::string, size_t> Positions() const {
    std::map<std::string, size_t> out;
    for (const StockClient& c : clients_) {
      out[c.name] = log_.Count(c.name);
    }
    return out;
  }

  // Waits until every client has made `calls` more calls since `since`.
  void WaitForMoreCalls(const std::map<std::string, size_t>& since,
                        size_t calls) {
    for (const StockClient& c : clients_) {
      ASSERT_TRUE(log_.WaitForCount(c.name, since.at(c.name) + calls, kWait))
          << c.name << " made " << log_.Count(c.name) - since.at(c.name)
          << " of " << calls << " calls; " << Describe();
    }
  }

  // Calls per backend in `calls`, indexed 0..kFallback.
  static std::vector<int> PerBackend(const std::vector<int>& calls) {
    std::vector<int> out(kMembers + 1, 0);
    for (int b : calls) {
      ++out[b];
    }
    return out;
  }

  // The client's own count of its calls, from a summary line written after
  // it had at least `min_ok` successful calls.
  ClientTotals Totals(StockClient& client, uint64_t min_ok) {
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::string> line =
          client.process->WaitForLine("event=calls ", deadline - absl::Now());
      if (!line.ok()) {
        break;
      }
      ClientTotals t;
      if (absl::SimpleAtoi(aside::testing::LogField(*line, "ok"), &t.ok) &&
          absl::SimpleAtoi(aside::testing::LogField(*line, "failed"),
                           &t.failed) &&
          t.ok >= min_ok) {
        return t;
      }
    }
    ADD_FAILURE() << client.name << ": no summary with ok >= " << min_ok
                  << "; stderr:\n"
                  << client.process->StderrText();
    return {};
  }

  // The failure lines a client wrote so far.
  static std::vector<std::string> FailureLines(const StockClient& client) {
    std::vector<std::string> out;
    for (const std::string& line : client.process->stderr_lines()) {
      if (line.find("event=call.failed") != std::string::npos) {
        out.push_back(line);
      }
    }
    return out;
  }

  // What the clients did so far, for failure messages.
  std::string Describe() const {
    std::string out;
    for (const StockClient& c : clients_) {
      absl::StrAppend(&out, c.name, ": ");
      for (int n : PerBackend(log_.CallsSince(c.name, 0))) {
        absl::StrAppend(&out, n, " ");
      }
      absl::StrAppend(&out, "calls per backend; ");
    }
    return out;
  }

  std::string Token(int backend) const {
    return absl::StrCat("web/", backends_->address(backend));
  }

  // Declared in start order; destroyed in reverse (clients first).
  TempDir dir_;
  CallLog log_;
  std::unique_ptr<GreeterBackends> backends_;
  std::string tokens_;
  int aside_port_ = 0;
  std::unique_ptr<Process> aside_;
  std::unique_ptr<Dnsmasq> dnsmasq_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::vector<StockClient> clients_;
};

TEST_F(StockClientsTest, WeightsThreeToOneSplitCallsThreeToOne) {
  CreateGroup({300, 100});
  StartClients();
  // Both backends connected in every client (until then round robin only
  // uses the ready ones).
  WaitUntilClientsCall({0, 1}, 5);
  const auto since = Positions();
  constexpr int kCalls = 400;
  WaitForMoreCalls(since, kCalls);
  for (const StockClient& c : clients_) {
    std::vector<int> calls = log_.CallsSince(c.name, since.at(c.name));
    calls.resize(kCalls);
    const std::vector<int> per_backend = PerBackend(calls);
    RecordProperty(c.name + "_split",
                   absl::StrCat(per_backend[0], ":", per_backend[1]));
    // 3:1 within a few percent: 300 ± 12 of 400.
    EXPECT_THAT(per_backend[0], AllOf(Ge(288), Le(312))) << c.name;
    EXPECT_EQ(per_backend[0] + per_backend[1], kCalls) << c.name;
  }
  // Each backend received its own token; nobody fell back.
  EXPECT_THAT(log_.Tokens(0), ElementsAre(Token(0)));
  EXPECT_THAT(log_.Tokens(1), ElementsAre(Token(1)));
  EXPECT_TRUE(log_.Tokens(kFallback).empty());
}

TEST_F(StockClientsTest, DrainedBackendStopsGettingCallsWithinOneUpdate) {
  CreateGroup({100, 100, 100});
  StartClients();
  WaitUntilClientsCall({0, 1, 2}, 5);
  Drain(2);
  // The drain is acknowledged; the next ServerList leaves backend 2 out.
  // Calls already on their way may still reach it, then none.
  const auto since = Positions();
  constexpr size_t kCalls = 300;
  WaitForMoreCalls(since, kCalls);
  for (const StockClient& c : clients_) {
    std::vector<int> calls = log_.CallsSince(c.name, since.at(c.name));
    calls.resize(kCalls);
    const auto last_on_drained = std::find(calls.rbegin(), calls.rend(), 2);
    const size_t after_drain =
        last_on_drained == calls.rend()
            ? 0
            : static_cast<size_t>(calls.rend() - last_on_drained);
    RecordProperty(c.name + "_calls_to_drained_backend_after_ack",
                   static_cast<int>(after_drain));
    // One update takes milliseconds; 50 calls take at least 150 ms.
    EXPECT_LT(after_drain, 50u) << c.name << ": " << Describe();
    const std::vector<int> tail =
        PerBackend(std::vector<int>(calls.begin() + 100, calls.end()));
    EXPECT_EQ(tail[2], 0) << c.name;
    EXPECT_GT(tail[0], 80) << c.name;
    EXPECT_GT(tail[1], 80) << c.name;
  }
  EXPECT_TRUE(log_.Tokens(kFallback).empty());
}

TEST_F(StockClientsTest, ClientsKeepTheLastListWhileAsideIsDownThenFollowIt) {
  CreateGroup({100, 100});
  StartClients();
  WaitUntilClientsCall({0, 1}, 5);

  KillAside();
  // The balancer is gone: the clients keep calling the last list's backends
  // and nothing fails.
  const auto down = Positions();
  WaitForMoreCalls(down, 150);
  for (const StockClient& c : clients_) {
    const std::vector<int> per_backend =
        PerBackend(log_.CallsSince(c.name, down.at(c.name)));
    EXPECT_GT(per_backend[0], 50) << c.name;
    EXPECT_GT(per_backend[1], 50) << c.name;
    EXPECT_EQ(per_backend[2] + per_backend[kFallback], 0) << c.name;
  }

  // Back on the same port (the group is in its state database): a change
  // made after the restart reaches the clients through the new server.
  const absl::Time restarted = absl::Now();
  ASSERT_OK(StartAside());
  AddMember(2);
  Drain(1);
  const auto back = Positions();
  WaitUntilClientsCall({2}, 50, back);
  RecordProperty("seconds_to_follow_the_restarted_server",
                 absl::StrCat(absl::ToDoubleSeconds(absl::Now() - restarted)));
  const auto followed = Positions();
  WaitForMoreCalls(followed, 100);
  for (const StockClient& c : clients_) {
    const std::vector<int> per_backend =
        PerBackend(log_.CallsSince(c.name, followed.at(c.name)));
    EXPECT_EQ(per_backend[1], 0) << c.name;
    EXPECT_GT(per_backend[0], 30) << c.name;
    EXPECT_GT(per_backend[2], 30) << c.name;
  }
  EXPECT_THAT(log_.Tokens(2), ElementsAre(Token(2)));
  EXPECT_TRUE(log_.Tokens(kFallback).empty());
  // Not one call failed, while the balancer was down or since.
  for (StockClient& c : clients_) {
    const ClientTotals totals = Totals(c, log_.Count(c.name));
    EXPECT_EQ(totals.failed, 0u)
        << c.name << ": " << ::testing::PrintToString(FailureLines(c));
  }
}

TEST_F(StockClientsTest, ClientStatsShowInTheGroupsLoadView) {
  CreateGroup({100, 100});
  StartClients();
  WaitUntilClientsCall({0, 1}, 20);
  uint64_t served = 0;
  for (const auto& [name, n] : Positions()) {
    served += n;
  }
  // Reports arrive every second (grpclb.client_stats_report_interval); poll
  // the load view until they cover the calls served so far.
  v1::Group group;
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    group = GetGroup();
    if (group.client_stats().calls_finished() >= served) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  uint64_t served_now = 0;
  for (const auto& [name, n] : Positions()) {
    served_now += n;
  }
  const v1::ClientStatsView& stats = group.client_stats();
  // Every finished call was served (a client finishes a call after the
  // backend logs it) and answered; at most one call per client in flight.
  EXPECT_THAT(stats.calls_finished(), AllOf(Ge(served), Le(served_now)));
  EXPECT_EQ(stats.calls_finished_known_received(), stats.calls_finished());
  EXPECT_THAT(stats.calls_started(),
              AllOf(Ge(stats.calls_finished()),
                    Le(stats.calls_finished() + clients_.size())));
  EXPECT_EQ(stats.calls_finished_with_client_failed_to_send(), 0u);
  EXPECT_TRUE(stats.calls_dropped().empty());
  EXPECT_EQ(stats.streams(), clients_.size());
  EXPECT_GT(stats.last_report().seconds(), 0);
  EXPECT_THAT(log_.Tokens(0), ElementsAre(Token(0)));
  EXPECT_THAT(log_.Tokens(1), ElementsAre(Token(1)));
}

TEST_F(StockClientsTest, OverloadDropsReachStockClientsAndTheirStats) {
  // The clients offer a few hundred calls a second; the group takes 20.
  CreateGroup({100, 100}, /*max_requests_per_second=*/20);
  StartClients();
  WaitUntilClientsCall({0, 1}, 5);
  const absl::Time calling = absl::Now();
  // Once their reports show the rate (within a few seconds), the server
  // lists drop entries and the clients drop calls without sending them.
  for (StockClient& c : clients_) {
    ASSERT_OK_AND_ASSIGN(const std::string failure,
                         c.process->WaitForLine("event=call.failed", kWait));
    RecordProperty(c.name + "_seconds_to_first_drop",
                   absl::StrCat(absl::ToDoubleSeconds(absl::Now() - calling)));
    RecordProperty(c.name + "_drop", failure);
    EXPECT_EQ(aside::testing::LogField(failure, "code"), "14") << failure;
    EXPECT_THAT(absl::AsciiStrToLower(failure), HasSubstr("drop")) << failure;
  }
  v1::Group group;
  const absl::Time deadline = absl::Now() + kWait;
  while (absl::Now() < deadline) {
    group = GetGroup();
    if (group.client_stats().calls_dropped().contains("drop/web/overload")) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(
      group.client_stats().calls_dropped().contains("drop/web/overload"))
      << group.client_stats().DebugString();
  EXPECT_EQ(group.client_stats().calls_dropped().size(), 1u);

  // Lifting the cap sends lists without drops: calls stop failing.
  v1::UpdateGroupRequest update;
  update.mutable_group()->set_name("web");
  update.mutable_update_mask()->add_paths("grpclb");
  v1::Group updated;
  const grpc::Status s =
      admin_->UpdateGroup(AdminContext().get(), update, &updated);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const auto lifted = Positions();
  WaitForMoreCalls(lifted, 100);
  std::map<std::string, ClientTotals> before;
  for (StockClient& c : clients_) {
    before[c.name] = Totals(c, log_.Count(c.name));
  }
  WaitForMoreCalls(Positions(), 200);
  for (StockClient& c : clients_) {
    EXPECT_EQ(Totals(c, log_.Count(c.name)).failed, before[c.name].failed)
        << c.name;
  }
}

TEST_F(StockClientsTest, WithoutABalancerClientsFallBackToTheNamesAddresses) {
  // A name whose SRV record points where nothing listens, and one whose
  // balancer answers NOT_FOUND (no group of that name): the clients use
  // the name's own A record (the fallback backend) instead.
  const int closed = aside::testing::PickUnusedPort();
  ASSERT_OK(dnsmasq_->Restart(
      {absl::StrCat("--srv-host=_grpclb._tcp.nolb.lb.test,lb.lb.test,", closed),
       absl::StrCat("--srv-host=_grpclb._tcp.nogroup.lb.test,lb.lb.test,",
                    aside_port_)}));
  ASSERT_OK(
      dnsmasq_->SetHosts("127.0.0.1 lb.lb.test\n127.0.0.1 nolb.lb.test\n"
                         "127.0.0.1 nogroup.lb.test\n"));
  const absl::Time start = absl::Now();
  for (const char* host : {"nolb", "nogroup"}) {
    const std::string target =
        absl::StrCat("dns://127.0.0.1:", dnsmasq_->port(), "/", host,
                     ".lb.test:", backends_->port(kFallback));
    const std::string cpp = absl::StrCat(host, "-cpp");
    const std::string python = absl::StrCat(host, "-python");
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Process> cpp_client,
                         StartChild({ASIDE_STOCK_CLIENT_BIN, target, cpp}));
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Process> python_client,
                         StartChild({"/usr/bin/python3", ASIDE_STOCK_CLIENT_PY,
                                     target, python}));
    clients_.push_back({cpp, std::move(cpp_client)});
    clients_.push_back({python, std::move(python_client)});
  }
  WaitUntilClientsCall({kFallback}, 20);
  RecordProperty("seconds_to_fall_back",
                 absl::StrCat(absl::ToDoubleSeconds(absl::Now() - start)));
  // Calls to a fallback address carry no token.
  EXPECT_THAT(log_.Tokens(kFallback), ElementsAre(""));

  // The clients keep asking the balancer: once the group exists, those
  // that asked for it leave fallback for its list.
  v1::CreateGroupRequest request;
  request.mutable_group()->set_name("nogroup");
  request.mutable_group()->mutable_health_check()->set_kind(
      v1::HealthCheck::NONE);
  request.mutable_group()->add_backends()->set_address(backends_->address(0));
  v1::Group created;
  const grpc::Status s =
      admin_->CreateGroup(AdminContext().get(), request, &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const absl::Time created_at = absl::Now();
  ASSERT_TRUE(log_.WaitUntil(
      [](const CallLog::Calls& calls) {
        for (const char* name : {"nogroup-cpp", "nogroup-python"}) {
          auto it = calls.find(name);
          if (it == calls.end() ||
              std::count(it->second.begin(), it->second.end(), 0) < 20) {
            return false;
          }
        }
        return true;
      },
      kWait))
      << Describe();
  RecordProperty("seconds_to_leave_fallback",
                 absl::StrCat(absl::ToDoubleSeconds(absl::Now() - created_at)));
  EXPECT_THAT(log_.Tokens(0), ElementsAre("nogroup/" + backends_->address(0)));
  EXPECT_EQ(PerBackend(log_.CallsSince("nolb-cpp", 0))[0], 0);
}

}  // namespace
}  // namespace aside
