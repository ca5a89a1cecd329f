// Aside as the xDS management server of stock gRPC clients, end to end: the
// real aside-server binary, real Greeter backends on loopback that log
// every call (caller, backend), Debian's Python grpcio 1.51 and a C++
// client built from gRPC and generated code only, each dialing xds:///web
// with a bootstrap that names the server. A raw ADS client on the generated
// stubs drives the protocol cases (rejections, unknown names).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/client.h"
#include "client/xds_bootstrap.h"
#include "envoy/config/cluster/v3/cluster.pb.h"
#include "envoy/config/listener/v3/listener.pb.h"
#include "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.pb.h"
#include "envoy/service/discovery/v3/discovery.grpc.pb.h"
#include "lib/status_macros.h"
#include "tests/grpclb/greeter_backends.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_orca.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

namespace discovery = envoy::service::discovery::v3;
using ::aside::testing::CallLog;
using ::aside::testing::GreeterBackends;
using ::aside::testing::Process;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::Ge;
using ::testing::HasSubstr;
using ::testing::Le;

constexpr char kAdminToken[] = "xds-stock-client-test-token";
constexpr char kListenerType[] =
    "type.googleapis.com/envoy.config.listener.v3.Listener";
constexpr char kClusterType[] =
    "type.googleapis.com/envoy.config.cluster.v3.Cluster";
constexpr char kEndpointType[] =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
constexpr int kBackends = 4;
// Bound of every wait for something the clients or servers do; generous
// because the suite may share the machine's two cores with other tests.
constexpr absl::Duration kWait = absl::Seconds(30);

absl::StatusOr<std::unique_ptr<Process>> StartChild(
    std::vector<std::string> argv) {
  if (access("/usr/bin/setpriv", X_OK) == 0) {
    argv.insert(argv.begin(), {"/usr/bin/setpriv", "--pdeathsig", "KILL"});
  }
  return Process::Start(std::move(argv));
}

struct StockClient {
  std::string name;
  std::unique_ptr<Process> process;
};

class XdsClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Every backend also publishes its load over ORCA (for groups that ask).
    ASSERT_OK_AND_ASSIGN(
        backends_, GreeterBackends::Start(
                       kBackends, &log_, [this](int i) { return &orcas_[i]; }));
    tokens_ = dir_.WriteSecret("tokens", absl::StrCat(kAdminToken, " admin\n"));
    // LRS reports every second (the grpclb report interval).
    config_ = dir_.WriteFile(
        "aside.yaml",
        absl::StrCat("admin: {token_file: ", tokens_, "}\n",
                     "grpclb: {client_stats_report_interval: 1s}\n",
                     // Stock xDS clients send LRS without credentials.
                     "load_reports: {auth: open}\n"));
    // The bootstrap names the port, so it is chosen up front and kept
    // across restarts (another one if it was taken meanwhile).
    absl::Status started;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = aside::testing::PickUnusedPort();
      started = StartAside();
      if (started.ok()) {
        break;
      }
    }
    ASSERT_OK(started);
    // The bootstrap `asidectl xds-bootstrap` prints.
    ASSERT_OK_AND_ASSIGN(const std::string bootstrap,
                         XdsBootstrapJson({.server = server_.target(),
                                           .node_id = "xds-clients-test"}));
    bootstrap_ = dir_.WriteFile("bootstrap.json", bootstrap);
  }

  // Starts aside-server on port_ with the state in dir_/state.
  absl::Status StartAside() {
    ASIDE_ASSIGN_OR_RETURN(server_, aside::testing::StartServer(
                                        dir_.path() + "/state",
                                        {"--config", config_, "--listen",
                                         absl::StrCat("127.0.0.1:", port_)}));
    if (server_.grpc_port != port_) {
      return absl::UnavailableError("aside-server did not take its port");
    }
    admin_ = v1::Admin::NewStub(grpc::CreateChannel(
        server_.target(), grpc::InsecureChannelCredentials()));
    return absl::OkStatus();
  }

  void TearDown() override {
    clients_.clear();
    EXPECT_OK(aside::testing::StopServer(server_, kWait));
  }

  std::unique_ptr<grpc::ClientContext> AdminContext() const {
    auto context = aside::testing::Context(kAdminToken);
    return context;
  }

  // Creates group `name`: backend i with weights[i]. With `probe`, the
  // backends are probed through their gRPC health service every 200 ms and
  // two failures in a row make one unhealthy; otherwise nothing is probed.
  void CreateGroup(const std::vector<uint32_t>& weights,
                   const std::string& policy = "weighted_round_robin",
                   const std::string& name = "web", bool probe = false) {
    v1::CreateGroupRequest request;
    v1::Group* g = request.mutable_group();
    g->set_name(name);
    if (policy == "ketama") {
      g->mutable_policy()->mutable_ketama();
    } else if (policy == "ring_hash") {
      g->mutable_policy()->mutable_ring_hash();
    } else if (policy == "round_robin") {
      g->mutable_policy()->mutable_round_robin();
    } else if (policy == "p2c") {
      g->mutable_policy()->mutable_p2c();
    } else {
      g->mutable_policy()->mutable_weighted_round_robin();
    }
    if (probe) {
      v1::HealthCheck* check = g->mutable_health_check();
      check->set_kind(v1::HealthCheck::GRPC);
      check->mutable_interval()->set_nanos(200'000'000);
      check->mutable_timeout()->set_nanos(150'000'000);
      check->set_fall(2);
      check->set_rise(1);
    } else {
      g->mutable_health_check()->set_kind(v1::HealthCheck::NONE);
    }
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

  // Group "web" of backends 0..2, unprobed (ready unless drained or
  // ejected), ejecting a backend after 5 consecutive failures, at most one
  // of the three at a time.
  void CreateEjectingGroup() {
    v1::CreateGroupRequest request;
    v1::Group* g = request.mutable_group();
    g->set_name("web");
    g->mutable_policy()->mutable_weighted_round_robin();
    g->mutable_health_check()->set_kind(v1::HealthCheck::NONE);
    v1::OutlierDetection* outliers = g->mutable_outlier_detection();
    outliers->set_enabled(true);
    outliers->set_consecutive_failures(5);
    outliers->set_max_ejection_percent(34);  // one of three
    for (int i = 0; i < 3; ++i) {
      g->add_backends()->set_address(backends_->address(i));
    }
    v1::Group created;
    const grpc::Status s =
        admin_->CreateGroup(AdminContext().get(), request, &created);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // Starts the Node stock client alone (named `name`, "node" unless the
  // arguments say otherwise) with the client's arguments after the script;
  // `env`: more NAME=VALUE settings for it.
  void StartNodeClient(const std::vector<std::string>& args,
                       const std::vector<std::string>& env = {}) {
    ASSERT_TRUE(std::string(ASIDE_NODE).find("NOTFOUND") == std::string::npos)
        << "node is not installed (scripts/install-deps.sh)";
    std::vector<std::string> argv = {"/usr/bin/env",
                                     "GRPC_XDS_BOOTSTRAP=" + bootstrap_};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.push_back(ASIDE_NODE);
    argv.push_back(ASIDE_XDS_CLIENT_JS);
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<std::unique_ptr<Process>> p = StartChild(argv);
    ASSERT_OK(p.status());
    clients_.push_back({args.size() >= 2 ? args[1] : "node", *std::move(p)});
    ASSERT_OK(
        clients_.back().process->WaitForLine("event=client.started", kWait));
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

  void Remove(int backend) {
    v1::RemoveBackendsRequest request;
    request.set_group("web");
    request.add_addresses(backends_->address(backend));
    v1::Group group;
    const grpc::Status s =
        admin_->RemoveBackends(AdminContext().get(), request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  void Add(int backend) {
    v1::AddBackendsRequest request;
    request.set_group("web");
    request.add_backends()->set_address(backends_->address(backend));
    v1::Group group;
    const grpc::Status s =
        admin_->AddBackends(AdminContext().get(), request, &group);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  // Waits until the registry holds `backend`'s target in `state`; returns
  // when it saw it (the poll runs every 10 ms, so within 10 ms of the flip).
  absl::Time WaitForTargetState(int backend, v1::HealthState state) const {
    const std::string address = backends_->address(backend);
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      v1::ListTargetsRequest request;
      v1::ListTargetsResponse response;
      const grpc::Status s =
          admin_->ListTargets(AdminContext().get(), request, &response);
      EXPECT_TRUE(s.ok()) << s.error_message();
      for (const v1::Target& t : response.targets()) {
        if (t.address() == address && t.state() == state) {
          return absl::Now();
        }
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    ADD_FAILURE() << address << " never reached state "
                  << v1::HealthState_Name(state);
    return absl::Now();
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

  // Starts the Python ("python") and, unless `python_only`, the C++
  // ("cpp", both gRPC 1.51) and Node ("node", grpc-js 1.14) stock clients
  // on xds:///<target>.
  void StartClients(const std::string& target = "web",
                    bool python_only = false) {
    const std::vector<std::string> env = {
        "/usr/bin/env", "GRPC_XDS_BOOTSTRAP=" + bootstrap_,
        "GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS=200"};
    auto start = [&](const std::string& name, std::vector<std::string> cmd) {
      std::vector<std::string> argv = env;
      argv.insert(argv.end(), cmd.begin(), cmd.end());
      absl::StatusOr<std::unique_ptr<Process>> p = StartChild(argv);
      ASSERT_OK(p.status());
      clients_.push_back({name, *std::move(p)});
    };
    const std::string url = "xds:///" + target;
    start("python", {"/usr/bin/python3", ASIDE_XDS_CLIENT_PY, url, "python"});
    if (!python_only) {
      start("cpp", {ASIDE_XDS_CLIENT_BIN, url, "cpp"});
      ASSERT_TRUE(std::string(ASIDE_NODE).find("NOTFOUND") == std::string::npos)
          << "node is not installed (scripts/install-deps.sh)";
      start("node", {ASIDE_NODE, ASIDE_XDS_CLIENT_JS, url, "node"});
    }
    for (StockClient& c : clients_) {
      ASSERT_OK(c.process->WaitForLine("event=client.started", kWait));
    }
  }

  // Waits until every client has called each of `backends` at least
  // `calls` times since since[name] (0 when absent).
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

  std::map<std::string, size_t> Positions() const {
    std::map<std::string, size_t> out;
    for (const StockClient& c : clients_) {
      out[c.name] = log_.Count(c.name);
    }
    return out;
  }

  void WaitForMoreCalls(const std::map<std::string, size_t>& since,
                        size_t calls) {
    for (const StockClient& c : clients_) {
      ASSERT_TRUE(log_.WaitForCount(c.name, since.at(c.name) + calls, kWait))
          << c.name << " made " << log_.Count(c.name) - since.at(c.name)
          << " of " << calls << " calls; " << Describe();
    }
  }

  static std::vector<int> PerBackend(const std::vector<int>& calls) {
    std::vector<int> out(kBackends, 0);
    for (int b : calls) {
      ++out[b];
    }
    return out;
  }

  std::string Describe() const {
    std::string out;
    for (const StockClient& c : clients_) {
      absl::StrAppend(&out, c.name, ": ");
      for (int n : PerBackend(log_.CallsSince(c.name, 0))) {
        absl::StrAppend(&out, n, " ");
      }
      absl::StrAppend(&out, "calls per backend; stderr:\n",
                      c.process->StderrText(), "\n");
    }
    return out;
  }

  // Checks that `calls` calls from each client split as `shares` (fractions
  // summing to 1) within ±3 percentage points, or five standard deviations
  // of a binomial share where that is wider: gRPC 1.51 clients pick a
  // locality at random (docs/xds.md), so their shares are binomial (over
  // 3000 calls a share of 1/3 has a sigma of 0.86 points, so ±3 points
  // alone, 3.5 sigma, was missed now and then by one of a run's checks).
  void ExpectSplit(const std::vector<double>& shares, size_t calls) {
    WaitUntilClientsCall(std::vector<int>([&] {
                           std::vector<int> all;
                           for (size_t i = 0; i < shares.size(); ++i) {
                             all.push_back(static_cast<int>(i));
                           }
                           return all;
                         }()),
                         5);
    const auto since = Positions();
    WaitForMoreCalls(since, calls);
    for (const StockClient& c : clients_) {
      std::vector<int> got = log_.CallsSince(c.name, since.at(c.name));
      got.resize(calls);
      const std::vector<int> per_backend = PerBackend(got);
      std::string split;
      for (size_t i = 0; i < shares.size(); ++i) {
        const double share =
            static_cast<double>(per_backend[i]) / static_cast<double>(calls);
        absl::StrAppend(&split, i == 0 ? "" : ":", per_backend[i]);
        const double tolerance =
            std::max(0.03, 5 * std::sqrt(shares[i] * (1 - shares[i]) /
                                         static_cast<double>(calls)));
        EXPECT_THAT(share,
                    AllOf(Ge(shares[i] - tolerance), Le(shares[i] + tolerance)))
            << c.name << " backend " << i;
      }
      RecordProperty(c.name + "_split", split);
    }
  }

  // The last index at which `backend` appears in `calls`, plus one (0 when
  // it never does).
  static size_t EndOf(const std::vector<int>& calls, int backend) {
    const auto last = std::find(calls.rbegin(), calls.rend(), backend);
    return last == calls.rend() ? 0 : static_cast<size_t>(calls.rend() - last);
  }

  // The client's failed-call count from a summary line written after every
  // call the backends have logged for it so far.
  uint64_t FailedSoFar(StockClient& client) {
    const uint64_t served = log_.Count(client.name);
    const absl::Time deadline = absl::Now() + kWait;
    while (absl::Now() < deadline) {
      absl::StatusOr<std::string> line =
          client.process->WaitForLine("event=calls ", deadline - absl::Now());
      if (!line.ok()) {
        break;
      }
      uint64_t ok = 0;
      uint64_t failed = 0;
      if (absl::SimpleAtoi(aside::testing::LogField(*line, "ok"), &ok) &&
          absl::SimpleAtoi(aside::testing::LogField(*line, "failed"),
                           &failed) &&
          ok >= served) {
        return failed;
      }
    }
    ADD_FAILURE() << client.name << ": no summary covering " << served
                  << " calls";
    return 0;
  }

  // The value of a counter line on /metrics that contains all of `parts`.
  double MetricValue(const std::vector<std::string>& parts) const {
    absl::StatusOr<aside::testing::HttpResponse> r =
        aside::testing::HttpGet("127.0.0.1", server_.metrics_port, "/metrics");
    EXPECT_OK(r.status());
    if (!r.ok()) {
      return -1;
    }
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      bool all = !line.empty() && line.front() != '#';
      for (const std::string& p : parts) {
        all = all && absl::StrContains(line, p);
      }
      double v = 0;
      if (all && absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) {
        return v;
      }
    }
    return 0;
  }

  TempDir dir_;
  CallLog log_;
  aside::testing::FakeOrca orcas_[kBackends];
  std::unique_ptr<GreeterBackends> backends_;
  RunningServer server_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::string tokens_;
  std::string config_;
  int port_ = 0;
  std::string bootstrap_;
  std::vector<StockClient> clients_;
};

TEST_F(XdsClientsTest, WeightsThreeToOneHoldInStockClients) {
  CreateGroup({300, 100});
  StartClients();
  ExpectSplit({0.75, 0.25}, 4000);
}

TEST_F(XdsClientsTest, WeightsFiveOneOneHoldInStockClients) {
  CreateGroup({500, 100, 100});
  StartClients();
  ExpectSplit({5.0 / 7, 1.0 / 7, 1.0 / 7}, 4000);
}

// grpc-js reads the typed policies: round_robin over every endpoint, a
// strict rotation; gRPC 1.51 keeps the enum form, a random pick among
// localities weighing 1. Both split evenly.
TEST_F(XdsClientsTest, RoundRobinRotatesStrictlyForTypedPolicyClients) {
  CreateGroup({100, 300, 100}, "round_robin");
  StartClients();
  ExpectSplit({1.0 / 3, 1.0 / 3, 1.0 / 3}, 3000);
  ASSERT_OK(server_.process->WaitForLine("typed_policies=yes", kWait));
  // Once the node client has reached all three, every three calls in a row
  // reach three backends.
  const auto since = Positions();
  WaitForMoreCalls(since, 300);
  std::vector<int> calls = log_.CallsSince("node", since.at("node"));
  calls.resize(300);
  int repeats = 0;
  for (size_t i = 0; i + 2 < calls.size(); i += 3) {
    repeats += calls[i] == calls[i + 1] || calls[i + 1] == calls[i + 2] ||
               calls[i] == calls[i + 2];
  }
  EXPECT_EQ(repeats, 0) << Describe();
  EXPECT_EQ(MetricValue({"aside_xds_requests_total", "cluster", "nack"}), 0);
}

// least_request comes first in the list for p2c groups; a client without
// it (grpc-js 1.14) takes the weighted fallback after it, and 1.51 keeps
// the enum form: the weights hold everywhere, and nobody rejects the
// cluster.
TEST_F(XdsClientsTest,
       LoadAwareGroupsKeepTheirWeightsWhereLeastRequestIsMissing) {
  CreateGroup({300, 100}, "p2c");
  StartClients();
  ExpectSplit({0.75, 0.25}, 4000);
  EXPECT_EQ(MetricValue({"aside_xds_requests_total", "cluster", "nack"}), 0);
}

TEST_F(XdsClientsTest, AnAliasResolvesToItsGroup) {
  // "web.prod.svc" names group web by its first label.
  CreateGroup({100, 100});
  StartClients("web.prod.svc", /*python_only=*/true);
  WaitUntilClientsCall({0, 1}, 20);
}

TEST_F(XdsClientsTest, DrainedAndRemovedBackendsGetNoCallsWithinOneSecond) {
  CreateGroup({100, 100, 100});
  StartClients();
  WaitUntilClientsCall({0, 1, 2}, 5);
  for (const auto& [backend, action] :
       std::vector<std::pair<int, const char*>>{{2, "drain"}, {1, "remove"}}) {
    if (std::string(action) == "drain") {
      Drain(backend);
    } else {
      Remove(backend);
    }
    const absl::Time acknowledged = absl::Now();
    const auto at_ack = Positions();
    // A measurement window, not synchronisation: the calls made in the
    // second after the acknowledgement may still reach the backend, none
    // after it.
    absl::SleepFor(absl::Seconds(1) - (absl::Now() - acknowledged));
    const auto after = Positions();
    WaitForMoreCalls(after, 200);
    for (const StockClient& c : clients_) {
      const std::vector<int> calls = log_.CallsSince(c.name, at_ack.at(c.name));
      const size_t window = after.at(c.name) - at_ack.at(c.name);
      const size_t end = EndOf(calls, backend);
      RecordProperty(
          absl::StrCat(c.name, "_", action, "_calls_to_backend_after_ack"),
          static_cast<int>(end));
      EXPECT_LE(end, window) << c.name << " " << action << ": " << Describe();
    }
  }
}

TEST_F(XdsClientsTest, AFailingBackendGetsNoCallsWithinOneSecondOfItsProbes) {
  CreateGroup({100, 100, 100}, "weighted_round_robin", "web", /*probe=*/true);
  StartClients();
  WaitUntilClientsCall({0, 1, 2}, 5);
  backends_->SetServing(1, false);
  const absl::Time unhealthy =
      WaitForTargetState(1, v1::HealthState::HEALTH_STATE_UNHEALTHY);
  const auto at_unhealthy = Positions();
  // A measurement window, not synchronisation (as above).
  absl::SleepFor(absl::Seconds(1) - (absl::Now() - unhealthy));
  const auto after = Positions();
  WaitForMoreCalls(after, 200);
  for (const StockClient& c : clients_) {
    const std::vector<int> calls =
        log_.CallsSince(c.name, at_unhealthy.at(c.name));
    const size_t window = after.at(c.name) - at_unhealthy.at(c.name);
    const size_t end = EndOf(calls, 1);
    RecordProperty(c.name + "_calls_to_failing_backend_after_unhealthy",
                   static_cast<int>(end));
    EXPECT_LE(end, window) << c.name << ": " << Describe();
  }
  // Healthy again: it is served again.
  backends_->SetServing(1, true);
  WaitForTargetState(1, v1::HealthState::HEALTH_STATE_HEALTHY);
  WaitUntilClientsCall({1}, 5, Positions());
}

TEST_F(XdsClientsTest, AddedBackendGetsCallsWithinOneSecond) {
  CreateGroup({100, 100});
  StartClients();
  WaitUntilClientsCall({0, 1}, 5);
  Add(2);
  const absl::Time acknowledged = absl::Now();
  const auto at_ack = Positions();
  absl::SleepFor(absl::Seconds(1) - (absl::Now() - acknowledged));
  const auto after = Positions();
  for (const StockClient& c : clients_) {
    std::vector<int> calls = log_.CallsSince(c.name, at_ack.at(c.name));
    calls.resize(after.at(c.name) - at_ack.at(c.name));
    const std::vector<int> per_backend = PerBackend(calls);
    RecordProperty(c.name + "_calls_to_new_backend_in_first_second",
                   per_backend[2]);
    EXPECT_GT(per_backend[2], 0) << c.name << ": " << Describe();
  }
}

TEST_F(XdsClientsTest, HashGroupIsServedWeightedToOldClientsWithoutCrashing) {
  CreateGroup({100, 100}, "ketama");
  StartClients();
  WaitUntilClientsCall({0, 1}, 20);
  WaitForMoreCalls(Positions(), 200);
  for (StockClient& c : clients_) {
    EXPECT_FALSE(c.process->Wait(absl::ZeroDuration()).has_value())
        << c.name << " exited";
    for (const std::string& line : c.process->stderr_lines()) {
      EXPECT_THAT(line, ::testing::Not(HasSubstr("event=call.failed")));
    }
  }
  ASSERT_OK_AND_ASSIGN(
      const std::string line,
      server_.process->WaitForLine("event=xds.ring_hash_fallback", kWait));
  EXPECT_THAT(line, HasSubstr("group=web"));
  EXPECT_GE(MetricValue({"aside_xds_ring_hash_fallbacks_total", "web"}), 1);
  // What the clients said they are, for the record.
  ASSERT_OK_AND_ASSIGN(const std::string stream,
                       server_.process->WaitForLine("event=xds.stream", kWait));
  RecordProperty("client_stream", stream);
}

TEST_F(XdsClientsTest, LoadReportsReachTheGroupsLoadView) {
  CreateGroup({100, 100});
  StartClients("web", /*python_only=*/true);
  WaitUntilClientsCall({0, 1}, 20);
  // Reports arrive every second; poll the load view until both backends
  // show the client's requests.
  v1::Group group;
  const absl::Time deadline = absl::Now() + kWait;
  auto reported = [&] {
    int n = 0;
    for (const v1::TableBackend& b : group.state()) {
      if (b.has_load() && b.load().reporters() >= 1 &&
          b.load().requests_per_second() > 0) {
        ++n;
      }
    }
    return n;
  };
  while (absl::Now() < deadline) {
    group = GetGroup();
    if (reported() == 2) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(reported(), 2) << group.DebugString();
  EXPECT_GE(MetricValue({"aside_xds_load_reports_total", "accepted"}), 2);
}

TEST_F(XdsClientsTest, ClientsKeepTheirConfigWhileAsideIsDownThenFollowIt) {
  CreateGroup({100, 100});
  StartClients();
  WaitUntilClientsCall({0, 1}, 5);

  server_.process->Signal(SIGKILL);
  ASSERT_TRUE(server_.process->Wait(kWait).has_value());
  // The management server is gone: the clients keep calling the last
  // assignment's backends and nothing fails.
  const auto down = Positions();
  WaitForMoreCalls(down, 300);
  for (const StockClient& c : clients_) {
    const std::vector<int> per_backend =
        PerBackend(log_.CallsSince(c.name, down.at(c.name)));
    EXPECT_GT(per_backend[0], 50) << c.name;
    EXPECT_GT(per_backend[1], 50) << c.name;
  }

  // Back on the same port with its state: a change made after the restart
  // reaches the clients through their reconnected streams.
  const absl::Time restarted = absl::Now();
  ASSERT_OK(StartAside());
  Add(2);
  Drain(1);
  WaitUntilClientsCall({2}, 50, Positions());
  RecordProperty("seconds_to_follow_the_restarted_server",
                 absl::StrCat(absl::ToDoubleSeconds(absl::Now() - restarted)));
  const auto followed = Positions();
  WaitForMoreCalls(followed, 200);
  for (const StockClient& c : clients_) {
    const std::vector<int> per_backend =
        PerBackend(log_.CallsSince(c.name, followed.at(c.name)));
    EXPECT_EQ(per_backend[1], 0) << c.name;
    EXPECT_GT(per_backend[0], 50) << c.name;
    EXPECT_GT(per_backend[2], 50) << c.name;
    for (const std::string& line : c.process->stderr_lines()) {
      EXPECT_THAT(line, ::testing::Not(HasSubstr("event=call.failed")))
          << c.name;
    }
  }
}

TEST_F(XdsClientsTest, PanicDropsReachStockClients) {
  // Backend 0 answers; the second member's port has no listener, so its
  // TCP probe fails at once. With a panic threshold of 100 % the group is
  // in panic from then on, and drop_in_panic_percent tells clients to drop
  // half their calls, as grpclb clients do.
  v1::CreateGroupRequest request;
  v1::Group* g = request.mutable_group();
  g->set_name("web");
  g->mutable_policy()->mutable_weighted_round_robin();
  v1::HealthCheck* check = g->mutable_health_check();
  check->set_kind(v1::HealthCheck::TCP);
  check->mutable_interval()->set_nanos(100'000'000);
  check->mutable_timeout()->set_nanos(100'000'000);
  check->set_fall(1);
  check->set_rise(1);
  g->set_panic_threshold(100);
  g->mutable_grpclb()->set_drop_in_panic_percent(50);
  g->add_backends()->set_address(backends_->address(0));
  g->add_backends()->set_address(
      absl::StrCat("127.0.0.1:", aside::testing::PickUnusedPort()));
  v1::Group created;
  const grpc::Status s =
      admin_->CreateGroup(AdminContext().get(), request, &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  StartClients();
  for (StockClient& c : clients_) {
    ASSERT_OK_AND_ASSIGN(const std::string failure,
                         c.process->WaitForLine("event=call.failed", kWait));
    RecordProperty(c.name + "_drop", failure);
    EXPECT_EQ(aside::testing::LogField(failure, "code"), "14") << failure;
    EXPECT_THAT(failure, HasSubstr("drop")) << failure;
  }
  // Calls that are not dropped still reach the answering backend.
  WaitUntilClientsCall({0}, 20);
}

TEST_F(XdsClientsTest, OverloadDropsFollowTheReportedRate) {
  // The clients offer hundreds of calls a second; the group takes 20. Once
  // their load reports show the rate, the assignment asks them to drop the
  // excess; lifting the cap ends the drops.
  v1::CreateGroupRequest request;
  v1::Group* g = request.mutable_group();
  g->set_name("web");
  g->mutable_policy()->mutable_weighted_round_robin();
  g->mutable_health_check()->set_kind(v1::HealthCheck::NONE);
  g->mutable_grpclb()->set_max_requests_per_second(20);
  g->add_backends()->set_address(backends_->address(0));
  g->add_backends()->set_address(backends_->address(1));
  v1::Group created;
  grpc::Status s = admin_->CreateGroup(AdminContext().get(), request, &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const absl::Time calling = absl::Now();
  StartClients();
  for (StockClient& c : clients_) {
    ASSERT_OK_AND_ASSIGN(const std::string failure,
                         c.process->WaitForLine("event=call.failed", kWait));
    RecordProperty(c.name + "_seconds_to_first_drop",
                   absl::StrCat(absl::ToDoubleSeconds(absl::Now() - calling)));
    // C-core: "EDS-configured drop: overload"; grpc-js: "Call dropped by
    // load balancing policy. Category: overload".
    EXPECT_THAT(failure, AnyOf(HasSubstr("EDS-configured drop: overload"),
                               HasSubstr("Category: overload")))
        << failure;
  }

  v1::UpdateGroupRequest update;
  update.mutable_group()->set_name("web");
  update.mutable_update_mask()->add_paths("grpclb");
  v1::Group updated;
  s = admin_->UpdateGroup(AdminContext().get(), update, &updated);
  ASSERT_TRUE(s.ok()) << s.error_message();
  // Once the next assignment is in, no call fails: the clients' own
  // failure counts stop moving.
  WaitForMoreCalls(Positions(), 100);
  std::map<std::string, uint64_t> failed;
  for (StockClient& c : clients_) {
    failed[c.name] = FailedSoFar(c);
  }
  WaitForMoreCalls(Positions(), 300);
  for (StockClient& c : clients_) {
    EXPECT_EQ(FailedSoFar(c), failed[c.name]) << c.name;
  }
}

TEST_F(XdsClientsTest, ABackendFailingEveryCallIsEjectedThroughLoadReports) {
  // The clients' LRS reports (every second) are their only failure signal:
  // an interval in which every call to a backend failed extends its run of
  // consecutive failures, as a stub's report does.
  CreateEjectingGroup();
  StartClients();
  WaitUntilClientsCall({0, 1, 2}, 3);
  backends_->SetFailing(0, true);
  const absl::Time failing = absl::Now();
  // Unprobed backends (health_check none) are ready unless drained or
  // ejected: not ready here means ejected.
  auto ejected = [&] {
    const v1::Group group = GetGroup();
    int n = 0;
    bool first = false;
    for (const v1::TableBackend& b : group.state()) {
      n += b.ready() ? 0 : 1;
      first = first ||
              (b.backend().address() == backends_->address(0) && !b.ready());
    }
    return std::make_pair(n, first);
  };
  ASSERT_TRUE(
      aside::testing::Eventually([&] { return ejected().second; }, kWait))
      << "backend 0 was never ejected; " << GetGroup().DebugString()
      << Describe();
  RecordProperty("seconds_to_ejection",
                 absl::StrCat(absl::ToDoubleSeconds(absl::Now() - failing)));
  // Every client family accepted the Cluster with its outlier detection.
  EXPECT_GE(MetricValue({"aside_xds_requests_total", "cluster", "ack"}), 3);
  EXPECT_EQ(MetricValue({"aside_xds_requests_total", "cluster", "nack"}), 0);
  // The next assignment leaves it out: after a short run of calls (the
  // push), every client's calls go to the other two only.
  WaitForMoreCalls(Positions(), 30);
  const auto since = Positions();
  WaitForMoreCalls(since, 150);
  for (const StockClient& c : clients_) {
    const std::vector<int> calls = log_.CallsSince(c.name, since.at(c.name));
    EXPECT_EQ(std::count(calls.begin(), calls.end(), 0), 0)
        << c.name << " still calls the ejected backend; " << Describe();
  }
  // Never more than max_ejection_percent: the healthy two stay.
  EXPECT_EQ(ejected().first, 1);
}

// A raw ADS client on the generated stubs.
class AdsClient {
 public:
  // `user_agent`: the node's user_agent_name (what client it says it is).
  explicit AdsClient(const std::string& target, std::string user_agent = "")
      : user_agent_(std::move(user_agent)),
        stub_(discovery::AggregatedDiscoveryService::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
    stream_ = stub_->StreamAggregatedResources(&context_);
  }

  bool Send(const std::string& type, std::vector<std::string> names,
            const std::string& version = "", const std::string& nonce = "",
            const std::string& error = "") {
    discovery::DiscoveryRequest r;
    r.mutable_node()->set_id("raw-ads-client");
    r.mutable_node()->set_user_agent_name(user_agent_);
    r.set_type_url(type);
    for (std::string& n : names) {
      r.add_resource_names(std::move(n));
    }
    r.set_version_info(version);
    r.set_response_nonce(nonce);
    if (!error.empty()) {
      r.mutable_error_detail()->set_code(3);
      r.mutable_error_detail()->set_message(error);
    }
    return stream_->Write(r);
  }

  // The next response (the stream's deadline bounds the wait).
  std::optional<discovery::DiscoveryResponse> Read() {
    discovery::DiscoveryResponse r;
    if (!stream_->Read(&r)) {
      return std::nullopt;
    }
    return r;
  }

 private:
  const std::string user_agent_;
  std::unique_ptr<discovery::AggregatedDiscoveryService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<discovery::DiscoveryRequest,
                                           discovery::DiscoveryResponse>>
      stream_;
};

TEST_F(XdsClientsTest, ARejectedVersionIsLoggedCountedAndNotSentAgain) {
  CreateGroup({100, 100});
  AdsClient ads(server_.target());
  ASSERT_TRUE(ads.Send(kListenerType, {"web"}));
  std::optional<discovery::DiscoveryResponse> listener = ads.Read();
  ASSERT_TRUE(listener.has_value());
  ASSERT_EQ(listener->type_url(), kListenerType);
  ASSERT_EQ(listener->resources_size(), 1);
  ASSERT_TRUE(ads.Send(kListenerType, {"web"}, "", listener->nonce(),
                       "listener rejected by the test"));
  ASSERT_OK_AND_ASSIGN(const std::string nack,
                       server_.process->WaitForLine("event=xds.nack", kWait));
  EXPECT_THAT(nack, HasSubstr("node=raw-ads-client"));
  EXPECT_THAT(nack, HasSubstr("listener rejected by the test"));

  // Publications re-evaluate the stream: the rejected listener stays
  // unsent, so the next responses are the cluster and then the endpoints
  // asked for after each change (a pending listener would go first).
  ASSERT_TRUE(ads.Send(kClusterType, {"web"}));
  std::optional<discovery::DiscoveryResponse> cluster = ads.Read();
  ASSERT_TRUE(cluster.has_value());
  EXPECT_EQ(cluster->type_url(), kClusterType);
  ASSERT_TRUE(ads.Send(kClusterType, {"web"}, cluster->version_info(),
                       cluster->nonce()));
  Drain(1);
  ASSERT_TRUE(ads.Send(kEndpointType, {"web"}));
  std::optional<discovery::DiscoveryResponse> endpoints = ads.Read();
  ASSERT_TRUE(endpoints.has_value());
  EXPECT_EQ(endpoints->type_url(), kEndpointType);
  EXPECT_EQ(MetricValue({"aside_xds_requests_total", "listener", "nack"}), 1);
  EXPECT_GE(MetricValue({"aside_xds_requests_total", "cluster", "ack"}), 1);
}

TEST_F(XdsClientsTest, AnUnknownNameIsLeftOutForCoreClientsAndCounted) {
  CreateGroup({100});
  AdsClient ads(server_.target(), "gRPC C-core linux");
  ASSERT_TRUE(ads.Send(kListenerType, {"nosuch", "web"}));
  std::optional<discovery::DiscoveryResponse> r = ads.Read();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->resources_size(), 1);
  EXPECT_EQ(MetricValue({"aside_xds_unknown_resources_total", "listener"}), 1);
  // Created later, the group is sent without the client asking again.
  CreateGroup({100}, "weighted_round_robin", "nosuch");
  r = ads.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->resources_size(), 2);
}

TEST_F(XdsClientsTest, AnUnknownNameIsAnsweredWithANoRouteListenerForNode) {
  CreateGroup({100});
  AdsClient ads(server_.target(), "gRPC Node Pure JS");
  ASSERT_TRUE(ads.Send(kListenerType, {"nosuch", "web"}));
  std::optional<discovery::DiscoveryResponse> r = ads.Read();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->resources_size(), 2);
  EXPECT_EQ(MetricValue({"aside_xds_unknown_resources_total", "listener"}), 1);
  // The unknown name's listener routes nothing, so calls fail at once.
  auto routes_of = [](const google::protobuf::Any& any, std::string* name) {
    envoy::config::listener::v3::Listener listener;
    EXPECT_TRUE(any.UnpackTo(&listener));
    *name = listener.name();
    envoy::extensions::filters::network::http_connection_manager::v3::
        HttpConnectionManager manager;
    EXPECT_TRUE(listener.api_listener().api_listener().UnpackTo(&manager));
    return manager.route_config().virtual_hosts(0).routes_size();
  };
  for (const google::protobuf::Any& any : r->resources()) {
    std::string name;
    const int routes = routes_of(any, &name);
    EXPECT_EQ(routes, name == "nosuch" ? 0 : 1) << name;
  }
  ASSERT_TRUE(ads.Send(kListenerType, {"nosuch", "web"}, r->version_info(),
                       r->nonce()));
  // Created later, the group is sent without the client asking again.
  CreateGroup({100}, "weighted_round_robin", "nosuch");
  r = ads.Read();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->resources_size(), 2);
  for (const google::protobuf::Any& any : r->resources()) {
    std::string name;
    EXPECT_EQ(routes_of(any, &name), 1) << name;
  }
  ASSERT_TRUE(ads.Send(kListenerType, {"nosuch", "web"}, r->version_info(),
                       r->nonce()));
  // Deleted, it leaves the next response (a client that ignores deletions
  // keeps the group's last configuration; it is not told to fail).
  v1::DeleteGroupRequest request;
  request.set_name("nosuch");
  v1::DeleteGroupResponse deleted;
  const grpc::Status s =
      admin_->DeleteGroup(AdminContext().get(), request, &deleted);
  ASSERT_TRUE(s.ok()) << s.error_message();
  r = ads.Read();
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->resources_size(), 1);
  envoy::config::listener::v3::Listener listener;
  ASSERT_TRUE(r->resources(0).UnpackTo(&listener));
  EXPECT_EQ(listener.name(), "web");
}

// A grpc-js client fails calls to a name no group answers at once with
// UNAVAILABLE (wait_for_ready or not) instead of waiting to its deadline;
// gRPC 1.51 clients, which are left the name out, wait. All of them
// follow the group once it is created, and none rejects a response.
TEST_F(XdsClientsTest, AnUnknownNameFailsNodeCallsAtOnceThenAllFollowItsGroup) {
  CreateGroup({100});
  StartClients("nosuch");
  for (StockClient& c : clients_) {
    ASSERT_OK_AND_ASSIGN(const std::string line,
                         c.process->WaitForLine("event=call.failed", kWait));
    RecordProperty(c.name + "_failure", line);
    if (c.name == "node") {
      EXPECT_EQ(aside::testing::LogField(line, "code"), "14") << line;
    }
  }
  CreateGroup({100}, "weighted_round_robin", "nosuch");
  WaitUntilClientsCall({0}, 5);
  EXPECT_EQ(MetricValue({"aside_xds_requests_total", "listener", "nack"}), 0);
}

TEST_F(XdsClientsTest, RingHashKeysReachTheSameBackendOnEveryPath) {
  constexpr int kKeys = 1000;
  CreateGroup({1, 2, 3}, "ring_hash");
  StartNodeClient(
      {"xds:///web", "node", "0", absl::StrCat("x-aside-hash-key=@", kKeys)});
  auto lb = v1::LoadBalancer::NewStub(grpc::CreateChannel(
      server_.target(), grpc::InsecureChannelCredentials()));
  ClientOptions options;
  options.targets = {server_.target()};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> stub,
                       Client::Create(std::move(options)));
  ClientGroup* stub_group = stub->Group("web");
  auto index_of = [&](absl::string_view address) {
    for (int i = 0; i < kBackends; ++i) {
      if (backends_->address(i) == address) {
        return i;
      }
    }
    return -1;
  };
  // One full cycle of the Node client's keys after `since` (each key's call
  // count then), compared with Pick and the stub for the same keys; returns
  // the number of keys on which all three agree.
  auto agreement = [&](std::string* detail) {
    std::vector<size_t> since(kKeys);
    for (int k = 0; k < kKeys; ++k) {
      since[k] = log_.Count(absl::StrCat("node/key-", k));
    }
    const bool cycled = log_.WaitUntil(
        [&](const CallLog::Calls& calls) {
          for (int k = 0; k < kKeys; ++k) {
            auto it = calls.find(absl::StrCat("node/key-", k));
            if (it == calls.end() || it->second.size() <= since[k]) {
              return false;
            }
          }
          return true;
        },
        kWait);
    if (!cycled) {
      *detail = "the node client did not call every key; " + Describe();
      return 0;
    }
    int agree = 0;
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = absl::StrCat("key-", k);
      const int by_node =
          log_.CallsSince(absl::StrCat("node/", key), since[k]).back();
      v1::PickRequest request;
      request.set_group("web");
      request.set_key(key);
      v1::PickResponse response;
      grpc::ClientContext context;
      const grpc::Status s = lb->Pick(&context, request, &response);
      const int by_pick = s.ok() && response.backends_size() > 0
                              ? index_of(response.backends(0).address())
                              : -1;
      absl::StatusOr<PickHandle> local = stub_group->Pick(key);
      const int by_stub = local.ok() ? index_of(local->address()) : -1;
      if (local.ok()) {
        local->Done(true);
      }
      if (by_node == by_pick && by_pick == by_stub) {
        ++agree;
      } else if (detail->size() < 2000) {
        absl::StrAppend(detail, key, ": node ", by_node, " pick ", by_pick,
                        " stub ", by_stub, "\n");
      }
    }
    return agree;
  };
  // Waits (bounded) until one full cycle agrees on every key; records how
  // many agreed in the last cycle as `property`.
  auto expect_all_agree = [&](const std::string& property) {
    int agree = 0;
    std::string detail;
    EXPECT_TRUE(aside::testing::Eventually(
        [&] {
          detail.clear();
          agree = agreement(&detail);
          return agree == kKeys;
        },
        kWait))
        << agree << " of " << kKeys << " keys agree (" << property << "):\n"
        << detail;
    RecordProperty(property, absl::StrCat(agree, "/", kKeys));
  };
  // Until the node client has the group (its first calls wait for it).
  expect_all_agree("keys_agreeing");
  // All three backends take keys, in proportion to their weights 1:2:3.
  std::vector<int> per_backend(kBackends, 0);
  for (int k = 0; k < kKeys; ++k) {
    ++per_backend[log_.CallsSince(absl::StrCat("node/key-", k), 0).back()];
  }
  EXPECT_GT(per_backend[0], 0);
  EXPECT_GT(per_backend[1], per_backend[0]);
  EXPECT_GT(per_backend[2], per_backend[1]);
  // A backend removed and another added: the three rings change alike.
  Remove(0);
  Add(3);
  expect_all_agree("keys_agreeing_after_change");
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_NE(log_.CallsSince(absl::StrCat("node/key-", k), 0).back(), 0);
  }
}

// Clients Aside does not know are offered a ring through the typed policy
// list rather than given round robin: grpc-js-xds 1.14 saying it is nothing
// at all, or a client no rule here names, keeps every key on one backend.
TEST_F(XdsClientsTest, ClientsOfUnknownOrEmptyUserAgentKeepKeyAffinity) {
  constexpr int kKeys = 100;
  constexpr size_t kCycles = 3;
  CreateGroup({1, 2, 3}, "ring_hash");
  const std::string keys = absl::StrCat("x-aside-hash-key=@", kKeys);
  StartNodeClient(
      {"xds:///web", "empty", "0", keys},
      {"ASIDE_XDS_USER_AGENT_NAME=", "ASIDE_XDS_USER_AGENT_VERSION="});
  StartNodeClient({"xds:///web", "unknown", "0", keys},
                  {"ASIDE_XDS_USER_AGENT_NAME=Some xDS Client",
                   "ASIDE_XDS_USER_AGENT_VERSION=0.1.0"});
  // Every key's first call waits for the configuration; then kCycles
  // cycles of every key, from each client.
  const bool cycled = log_.WaitUntil(
      [&](const CallLog::Calls& calls) {
        for (const char* client : {"empty", "unknown"}) {
          for (int k = 0; k < kKeys; ++k) {
            auto it = calls.find(absl::StrCat(client, "/key-", k));
            if (it == calls.end() || it->second.size() < kCycles) {
              return false;
            }
          }
        }
        return true;
      },
      kWait);
  ASSERT_TRUE(cycled) << Describe();
  for (const char* client : {"empty", "unknown"}) {
    int sticky = 0;
    std::vector<int> per_backend(kBackends, 0);
    for (int k = 0; k < kKeys; ++k) {
      const std::vector<int> calls =
          log_.CallsSince(absl::StrCat(client, "/key-", k), 0);
      const bool one = std::all_of(calls.begin(), calls.end(),
                                   [&](int b) { return b == calls.front(); });
      sticky += one ? 1 : 0;
      ++per_backend[calls.front()];
    }
    EXPECT_EQ(sticky, kKeys) << client << ": keys that kept one backend";
    // A ring over the group's three backends, not one for every key.
    EXPECT_GT(*std::min_element(per_backend.begin(), per_backend.begin() + 3),
              0)
        << client;
    RecordProperty(absl::StrCat(client, "_keys_on_one_backend"),
                   absl::StrCat(sticky, "/", kKeys));
  }
  // Neither was served the fallback without a ring.
  EXPECT_EQ(MetricValue({"aside_xds_ring_hash_fallbacks_total", "web"}), 0);
}

// Groups with outlier detection send gRPC's (gRFC A50) in the Cluster: a
// grpc-js client stops calling a backend that fails every call on its own,
// with no load report reaching Aside (its LRS streams are refused here).
TEST_F(XdsClientsTest, NodeClientsEjectAFailingBackendThemselves) {
  server_.process->Signal(SIGTERM);
  ASSERT_TRUE(server_.process->Wait(kWait).has_value());
  dir_.WriteFile("aside.yaml",
                 absl::StrCat("admin: {token_file: ", tokens_, "}\n",
                              "grpclb: {client_stats_report_interval: 1s}\n",
                              "load_reports: {auth: token}\n"));
  ASSERT_OK(StartAside());
  CreateEjectingGroup();
  StartNodeClient({"xds:///web", "node"});
  WaitUntilClientsCall({0, 1, 2}, 5);
  backends_->SetFailing(0, true);
  const absl::Time failing = absl::Now();
  // Ejected: a run of 300 calls with none to backend 0.
  ASSERT_TRUE(aside::testing::Eventually(
      [&] {
        const auto since = Positions();
        WaitForMoreCalls(since, 300);
        const std::vector<int> calls =
            log_.CallsSince("node", since.at("node"));
        return std::count(calls.begin(), calls.end(), 0) == 0;
      },
      kWait))
      << "the node client kept calling the failing backend; " << Describe();
  RecordProperty("seconds_to_local_ejection",
                 absl::StrCat(absl::ToDoubleSeconds(absl::Now() - failing)));
  // Aside itself heard nothing: the backend is still ready in its table,
  // so the client ejected it on its own.
  const v1::Group group = GetGroup();
  for (const v1::TableBackend& b : group.state()) {
    EXPECT_TRUE(b.ready()) << b.backend().address();
  }
  // Never more than max_ejection_percent: the other two keep their calls.
  const auto since = Positions();
  WaitForMoreCalls(since, 300);
  const std::vector<int> per_backend =
      PerBackend(log_.CallsSince("node", since.at("node")));
  EXPECT_GT(per_backend[1], 0);
  EXPECT_GT(per_backend[2], 0);
}

}  // namespace
// grpc-js has neither TLS nor call credentials towards its management
// server, so its LRS reports carry no credential: with token auth they
// count only from a trusted network.
TEST_F(XdsClientsTest, NodeLoadReportsCountFromATrustedNetworkOnly) {
  auto restart = [&](const std::string& networks) {
    server_.process->Signal(SIGTERM);
    ASSERT_TRUE(server_.process->Wait(kWait).has_value());
    dir_.WriteFile(
        "aside.yaml",
        absl::StrCat("admin: {token_file: ", tokens_, "}\n",
                     "load_reports: {auth: token, trusted_networks: [",
                     networks, "]}\n"));
    ASSERT_OK(StartAside());
  };
  auto reporters = [&] {
    int n = 0;
    const v1::Group group = GetGroup();
    for (const v1::TableBackend& b : group.state()) {
      n += b.has_load() && b.load().reporters() >= 1 ? 1 : 0;
    }
    return n;
  };
  // Loopback is not in 10.0.0.0/8: the reports are refused.
  restart("10.0.0.0/8, \"fd00::/8\"");
  CreateGroup({100, 100});
  StartNodeClient({"xds:///web", "node"});
  WaitUntilClientsCall({0, 1}, 20);
  ASSERT_TRUE(aside::testing::Eventually(
      [&] {
        return MetricValue({"aside_load_reports_refused_total", "lrs"}) > 0;
      },
      kWait));
  EXPECT_EQ(reporters(), 0);
  clients_.clear();

  // From 127.0.0.0/8 they count, under the client's host.
  restart("127.0.0.0/8");
  StartNodeClient({"xds:///web", "node"});
  WaitUntilClientsCall({0, 1}, 20);
  EXPECT_TRUE(
      aside::testing::Eventually([&] { return reporters() == 2; }, kWait));
  EXPECT_GE(MetricValue({"aside_xds_load_reports_total", "accepted"}), 2);
  EXPECT_EQ(MetricValue({"aside_load_reports_refused_total", "lrs"}), 0);
}

// Weights from the backends' own ORCA reports reach every stock client
// through the endpoint weights: 100 qps at utilisation 0.2 and 0.8 weigh
// 500 : 125 (gRFC A58), so every client splits its calls 0.8 : 0.2.
TEST_F(XdsClientsTest, OrcaWeightsReachStockClients) {
  orcas_[0].Set(aside::testing::OrcaReport(100, 0.2));
  orcas_[1].Set(aside::testing::OrcaReport(100, 0.8));
  v1::CreateGroupRequest request;
  v1::Group* g = request.mutable_group();
  g->set_name("web");
  g->mutable_policy()->mutable_weighted_round_robin();
  g->mutable_health_check()->set_kind(v1::HealthCheck::NONE);
  v1::OrcaOptions* orca = g->mutable_orca();
  orca->set_enabled(true);
  orca->set_weights(true);
  orca->mutable_interval()->set_nanos(200'000'000);
  orca->mutable_blackout_period()->set_seconds(0);
  for (int i = 0; i < 2; ++i) {
    g->add_backends()->set_address(backends_->address(i));
  }
  v1::Group created;
  const grpc::Status s =
      admin_->CreateGroup(AdminContext().get(), request, &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(aside::testing::Eventually([&] {
    const v1::Group group = GetGroup();
    return group.state_size() == 2 &&
           group.state(0).effective_weight() +
                   group.state(1).effective_weight() ==
               1250;
  }));
  StartClients();
  ExpectSplit({0.8, 0.2}, 2000);
}

}  // namespace aside
