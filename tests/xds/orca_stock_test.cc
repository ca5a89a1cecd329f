// ORCA with stock servers: three Node.js backends publish their load with
// grpc-js 1.14's own ServerMetricRecorder (tests/xds/node/orca_backend.js,
// no Aside code); the real aside-server holds one out-of-band stream to each
// and turns the reports into weights (gRFC A58) that the server's Pick and
// the C++ stub's local picks both follow.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "client/client.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Eventually;
using ::aside::testing::Process;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;

constexpr absl::Duration kWait = absl::Seconds(30);
constexpr int kPicks = 900;

struct NodeBackend {
  std::unique_ptr<Process> process;
  std::string address;
};

class OrcaStockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::string(ASIDE_NODE).find("NOTFOUND") == std::string::npos)
        << "node is not installed (scripts/install-deps.sh)";
    // qps 100 each at utilisation 0.2, 0.2, 0.8: weights 500, 500, 125.
    // The first steps to 0.9 on SIGUSR1.
    StartBackend({"100", "0.2", "100", "0.9"});
    StartBackend({"100", "0.2"});
    StartBackend({"100", "0.8"});
    const std::string config =
        dir_.WriteFile("aside.yaml", absl::StrCat(R"(groups:
  - name: web
    policy: weighted_round_robin
    health_check: {kind: none}
    orca: {interval: 200ms, weights: true, blackout_period: 0s}
    backends: [)",
                                                  backends_[0].address, ", ",
                                                  backends_[1].address, ", ",
                                                  backends_[2].address, "]\n"));
    ASSERT_OK_AND_ASSIGN(server_,
                         aside::testing::StartServer(dir_.path() + "/state",
                                                     {"--config", config}));
    stub_ = v1::LoadBalancer::NewStub(grpc::CreateChannel(
        server_.target(), grpc::InsecureChannelCredentials()));
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create({.targets = {server_.target()}});
    ASSERT_OK(client.status());
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (server_.process != nullptr) {
      server_.process->Signal(SIGTERM);
      EXPECT_TRUE(server_.process->Wait(kWait).has_value());
    }
  }

  void StartBackend(std::vector<std::string> metrics) {
    std::vector<std::string> argv = {ASIDE_NODE, ASIDE_ORCA_BACKEND_JS};
    argv.insert(argv.end(), metrics.begin(), metrics.end());
    absl::StatusOr<std::unique_ptr<Process>> p = Process::Start(argv);
    ASSERT_OK(p.status());
    absl::StatusOr<std::string> line =
        (*p)->WaitForLine("event=backend.started", kWait);
    ASSERT_OK(line.status()) << (*p)->StderrText();
    backends_.push_back(
        {*std::move(p),
         absl::StrCat("127.0.0.1:", aside::testing::LogField(*line, "port"))});
  }

  // Each backend's share of kPicks picks through the server's Pick, or
  // through the stub's local picks.
  std::vector<double> ServerShares() {
    std::map<std::string, int> counts;
    for (int i = 0; i < kPicks; ++i) {
      grpc::ClientContext c;
      v1::PickRequest r;
      r.set_group("web");
      v1::PickResponse resp;
      if (!stub_->Pick(&c, r, &resp).ok()) {
        return {};
      }
      counts[resp.backends(0).address()]++;
    }
    return SharesOf(counts);
  }
  std::vector<double> StubShares() {
    std::map<std::string, int> counts;
    ClientGroup* group = client_->Group("web");
    for (int i = 0; i < kPicks; ++i) {
      absl::StatusOr<PickHandle> pick = group->Pick("");
      if (!pick.ok()) {
        return {};
      }
      counts[std::string(pick->address())]++;
      pick->Done(absl::OkStatus());
    }
    return SharesOf(counts);
  }
  std::vector<double> SharesOf(std::map<std::string, int>& counts) const {
    std::vector<double> out;
    for (const NodeBackend& b : backends_) {
      out.push_back(static_cast<double>(counts[b.address]) / kPicks);
    }
    return out;
  }
  static bool Near(const std::vector<double>& got,
                   const std::vector<double>& want) {
    if (got.size() != want.size()) {
      return false;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] < want[i] - 0.03 || got[i] > want[i] + 0.03) {
        return false;
      }
    }
    return true;
  }
  static std::string Print(const std::vector<double>& shares) {
    std::string out;
    for (double s : shares) {
      absl::StrAppend(&out, out.empty() ? "" : " : ", s);
    }
    return out;
  }

  TempDir dir_;
  std::vector<NodeBackend> backends_;
  RunningServer server_;
  std::unique_ptr<v1::LoadBalancer::Stub> stub_;
  std::unique_ptr<Client> client_;
};

TEST_F(OrcaStockTest, EveryPathFollowsTheStockServersReports) {
  const std::vector<double> want = {4.0 / 9, 4.0 / 9, 1.0 / 9};
  std::vector<double> got;
  ASSERT_TRUE(
      Eventually([&] { return Near(got = ServerShares(), want); }, kWait))
      << "Pick: " << Print(got);
  ASSERT_TRUE(Eventually([&] { return Near(got = StubShares(), want); }, kWait))
      << "stub: " << Print(got);
  RecordProperty("pick_shares", Print(ServerShares()));
  RecordProperty("stub_shares", Print(StubShares()));

  // The first backend gets busy: 100 / 0.9 against 500 and 125.
  const std::vector<double> step = {111.1 / 736.1, 500 / 736.1, 125 / 736.1};
  const absl::Time stepped = absl::Now();
  backends_[0].process->Signal(SIGUSR1);
  ASSERT_OK(backends_[0].process->WaitForLine("cpu=0.9", kWait));
  ASSERT_TRUE(
      Eventually([&] { return Near(got = ServerShares(), step); }, kWait))
      << "Pick after the step: " << Print(got);
  RecordProperty(
      "step_to_pick_ms",
      absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - stepped)));
  ASSERT_TRUE(Eventually([&] { return Near(got = StubShares(), step); }, kWait))
      << "stub after the step: " << Print(got);
  RecordProperty(
      "step_to_stub_ms",
      absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - stepped)));

  // One stream to each backend for the whole run.
  for (NodeBackend& b : backends_) {
    b.process->ReadAvailable();
    int streams = 0;
    for (const std::string& line : b.process->stderr_lines()) {
      streams += absl::StrContains(line, "event=orca.stream") ? 1 : 0;
    }
    EXPECT_EQ(streams, 1) << b.address << ":\n" << b.process->StderrText();
  }
}

}  // namespace
}  // namespace aside
