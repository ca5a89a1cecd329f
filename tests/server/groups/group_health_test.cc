// Health in groups: probe results reach tables and picks, panic and slow
// start shape them, outlier ejections come from load reports, targets are
// shared between groups and listed through Admin.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

constexpr char kToken[] = "health-test-token-0123";

// A TCP port on 127.0.0.1 that accepts connections while open (the kernel
// completes handshakes from the backlog) and refuses them once closed.
class Listener {
 public:
  Listener() { port_ = aside::testing::PickUnusedPort(); }
  ~Listener() { Close(); }
  bool Open() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    return bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
           listen(fd_, 1024) == 0;
  }
  void Close() {
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int port_ = 0;
  int fd_ = -1;
};

class GroupHealthTest : public ::testing::Test {
 protected:
  void Start(const std::string& groups) {
    const std::string tokens =
        dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    absl::StatusOr<ServerConfig> config = ParseConfig(
        absl::StrCat(
            "state_dir: ", dir_.path(), "\n",
            "listen: 127.0.0.1:0\nmetrics: \"\"\n",
            "health: {merge_window: 20ms}\n", "load_reports: {auth: open}\n",
            "admin: {token_file: ", tokens, "}\n", "groups:\n", groups),
        "t.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server_, AsideServer::Create(*config));
    ASSERT_OK(server_->Start());
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
    }
  }

  // Waits (bounded) until `done` holds, checking it after each rebuild of
  // `group`: probe results, ramps and ejections reach a table only through
  // a rebuild, so there is nothing to poll in between.
  bool Eventually(const std::string& group, const std::function<bool()>& done,
                  absl::Duration timeout = absl::Seconds(10)) {
    GroupPtr g = server_->groups().Find(group);
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      const uint64_t rebuilds = g->rebuilds();
      if (done()) {
        return true;
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return false;
      }
      g->AwaitRebuilds(rebuilds + 1, left);
    }
  }

  bool Ready(const std::string& group, const std::string& address) {
    TableConstPtr t = server_->groups().Find(group)->table();
    const int64_t i = t->Find(address);
    return i >= 0 && t->member(static_cast<uint32_t>(i)).ready;
  }

  std::set<std::string> Picks(const std::string& group, int n) {
    auto stub = v1::LoadBalancer::NewStub(channel_);
    std::set<std::string> out;
    for (int i = 0; i < n; ++i) {
      grpc::ClientContext c;
      v1::PickRequest r;
      r.set_group(group);
      v1::PickResponse resp;
      if (stub->Pick(&c, r, &resp).ok()) {
        out.insert(resp.backends(0).address());
      }
    }
    return out;
  }

  // Fast probes with fall 1: a closed port is refused at once, and the
  // timeout is as long as the interval allows, so that a loaded machine
  // (sanitizers, two cores) does not fail a probe of an open port.
  std::string Check(const std::string& extra = "") {
    return absl::StrCat(
        "    health_check: {kind: tcp, interval: 100ms, timeout: 100ms, rise: "
        "1, "
        "fall: 1",
        extra, "}\n");
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GroupHealthTest, ProbeResultsReachPicksWithinAProbe) {
  Listener up;
  Listener down;
  ASSERT_TRUE(up.Open());
  Start(absl::StrCat("  - name: web\n    panic_threshold: 0\n", Check(),
                     "    backends: [", up.address(), ", ", down.address(),
                     "]\n"));
  ASSERT_TRUE(Eventually("web", [&] {
    return Ready("web", up.address()) && !Ready("web", down.address());
  }));
  EXPECT_EQ(Picks("web", 10), std::set<std::string>{up.address()});

  // The closed port starts listening: it is picked again.
  ASSERT_TRUE(down.Open());
  ASSERT_TRUE(Eventually("web", [&] { return Ready("web", down.address()); }));
  EXPECT_EQ(Picks("web", 10).size(), 2u);
  // And the first one goes away.
  up.Close();
  ASSERT_TRUE(Eventually("web", [&] { return !Ready("web", up.address()); }));
  EXPECT_EQ(Picks("web", 10), std::set<std::string>{down.address()});
  TableConstPtr t = server_->groups().Find("web")->table();
  EXPECT_EQ(t->member(static_cast<uint32_t>(t->Find(up.address()))).health,
            HealthState::kUnhealthy);
  EXPECT_EQ(t->member(static_cast<uint32_t>(t->Find(down.address()))).health,
            HealthState::kHealthy);
}

TEST_F(GroupHealthTest, PanicSpreadsPicksOverEveryBackend) {
  Listener up;
  ASSERT_TRUE(up.Open());
  Listener d1, d2, d3;
  Start(absl::StrCat("  - name: web\n    panic_threshold: 50\n", Check(),
                     "    backends: [", up.address(), ", ", d1.address(), ", ",
                     d2.address(), ", ", d3.address(), "]\n"));
  ASSERT_TRUE(Eventually("web", [&] {
    TableConstPtr t = server_->groups().Find("web")->table();
    return t->ready_count() == 1 &&
           t->member(static_cast<uint32_t>(t->Find(d1.address()))).health ==
               HealthState::kUnhealthy;
  }));
  TableConstPtr t = server_->groups().Find("web")->table();
  EXPECT_TRUE(t->panic());
  EXPECT_EQ(Picks("web", 40).size(), 4u);  // 1 of 4 ready < 50 %: all of them
}

TEST_F(GroupHealthTest, SharedTargetsAreProbedOnceAndListed) {
  Listener up;
  ASSERT_TRUE(up.Open());
  Start(absl::StrCat("  - name: a\n", Check(), "    backends: [", up.address(),
                     "]\n  - name: b\n", Check(), "    backends: [",
                     up.address(), "]\n"));
  // Ready comes before the first probe (a new target counts as healthy
  // until its first result): wait for the result itself, which a rebuild
  // carries into the table as the member's health.
  ASSERT_TRUE(Eventually("a", [&] {
    TableConstPtr t = server_->groups().Find("a")->table();
    const int64_t i = t->Find(up.address());
    return i >= 0 &&
           t->member(static_cast<uint32_t>(i)).health == HealthState::kHealthy;
  }));
  auto admin = v1::Admin::NewStub(channel_);
  grpc::ClientContext c;
  c.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  v1::ListTargetsRequest r;
  v1::ListTargetsResponse targets;
  ASSERT_TRUE(admin->ListTargets(&c, r, &targets).ok());
  ASSERT_EQ(targets.targets_size(), 1);  // one target for both groups
  const v1::Target& t = targets.targets(0);
  EXPECT_EQ(t.address(), up.address());
  EXPECT_EQ(t.state(), v1::HEALTH_STATE_HEALTHY);
  EXPECT_THAT(t.groups(), ::testing::ElementsAre("a", "b"));
  EXPECT_TRUE(t.last_result().success());
  EXPECT_GE(t.probes(), 1u);
  EXPECT_EQ(t.health_check().kind(), v1::HealthCheck::TCP);
}

TEST_F(GroupHealthTest, SlowStartRampsANewBackendsWeight) {
  Listener a, b;
  ASSERT_TRUE(a.Open());
  ASSERT_TRUE(b.Open());
  Start(absl::StrCat("  - name: web\n    policy: weighted_round_robin\n",
                     "    slow_start: 2s\n", Check(), "    backends: [",
                     a.address(), "]\n"));
  ASSERT_TRUE(Eventually("web", [&] { return Ready("web", a.address()); }));
  GroupPtr web = server_->groups().Find("web");
  GroupSpec spec = web->spec();
  Backend added;
  added.address = b.address();
  spec.backends.push_back(added);
  ASSERT_OK(web->Update(spec));
  auto weight = [&] {
    TableConstPtr t = web->table();
    const int64_t i = t->Find(b.address());
    return t->member(static_cast<uint32_t>(i)).ready
               ? t->member(static_cast<uint32_t>(i)).weight
               : 0u;
  };
  ASSERT_TRUE(Eventually("web", [&] { return weight() > 0; }));
  const uint32_t first = weight();
  EXPECT_LE(first, 40u);  // starts near 10 % of 100
  ASSERT_TRUE(Eventually(
      "web", [&] { return weight() == 100; }, absl::Seconds(10)));
}

TEST_F(GroupHealthTest, LoadReportsEjectOutliers) {
  Listener a, b, c;
  ASSERT_TRUE(a.Open());
  ASSERT_TRUE(b.Open());
  ASSERT_TRUE(c.Open());
  Start(absl::StrCat("  - name: web\n    panic_threshold: 0\n", Check(),
                     "    outlier_detection: {consecutive_failures: 3, "
                     "max_ejection_percent: 50}\n",
                     "    backends: [", a.address(), ", ", b.address(), ", ",
                     c.address(), "]\n"));
  ASSERT_TRUE(Eventually("web", [&] {
    return Ready("web", a.address()) && Ready("web", b.address()) &&
           Ready("web", c.address());
  }));
  auto lb = v1::LoadBalancer::NewStub(channel_);
  auto report = [&](uint64_t requests, uint64_t failures, uint32_t run) {
    grpc::ClientContext ctx;
    v1::ReportLoadResponse response;
    auto writer = lb->ReportLoad(&ctx, &response);
    v1::LoadReport r;
    r.set_reporter("pod-1");
    v1::BackendLoad* l = r.add_loads();
    l->set_group("web");
    l->set_address(b.address());
    l->set_requests(requests);
    l->set_failures(failures);
    l->set_consecutive_failures(run);
    writer->Write(r);
    writer->WritesDone();
    EXPECT_TRUE(writer->Finish().ok());
    EXPECT_EQ(response.accepted(), 1u);
  };
  report(10, 0, 0);  // baseline
  report(15, 5, 5);  // five failures in a row
  ASSERT_TRUE(Eventually("web", [&] { return !Ready("web", b.address()); }));
  EXPECT_EQ(Picks("web", 20).count(b.address()), 0u);
  std::vector<OutlierDetector::Ejection> ejections =
      server_->groups().Find("web")->Ejections();
  ASSERT_EQ(ejections.size(), 1u);
  EXPECT_EQ(ejections[0].address, b.address());
  EXPECT_EQ(ejections[0].count, 1u);
}

}  // namespace
}  // namespace aside::server
