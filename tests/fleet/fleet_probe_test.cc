// One probe per target per fleet (DESIGN.md §11): three real aside-server
// processes on a real 3-member etcd cluster, 30 loopback backends (TCP and
// gRPC checks) that count the probes they receive, each held by 1 to 5
// groups. Every target is probed once per interval by the whole fleet, the
// replicas agree on health, and a replica killed with SIGKILL has its
// targets taken over within the lease TTL plus one interval.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "aside/v1/admin.grpc.pb.h"
#include "tests/health/test_backends.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_client.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Context;
using ::aside::testing::EtcdCluster;
using ::aside::testing::Eventually;
using ::aside::testing::FakeBackend;
using ::aside::testing::GrpcBackend;
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;

constexpr char kToken[] = "fleet-admin-token";
constexpr absl::Duration kInterval = absl::Milliseconds(250);
constexpr absl::Duration kTtl = absl::Seconds(2);
constexpr int kFall = 2;
constexpr int kTcpBackends = 20;
constexpr int kGrpcBackends = 10;

struct Replica {
  RunningServer server;
  std::unique_ptr<v1::Admin::Stub> admin;
  bool alive = true;

  // The value of an unlabelled metric; -1 when absent.
  double Metric(const std::string& name) {
    absl::StatusOr<aside::testing::HttpResponse> r =
        aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
    if (!r.ok()) {
      return -1;
    }
    for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
      if (absl::ConsumePrefix(&line, name) && absl::ConsumePrefix(&line, " ")) {
        double v = 0;
        if (absl::SimpleAtod(line, &v)) {
          return v;
        }
      }
    }
    return -1;
  }
  std::vector<v1::Target> Targets() {
    v1::ListTargetsResponse resp;
    admin->ListTargets(Context(kToken).get(), v1::ListTargetsRequest(), &resp);
    return {resp.targets().begin(), resp.targets().end()};
  }
  // address -> state
  std::map<std::string, v1::HealthState> States() {
    std::map<std::string, v1::HealthState> out;
    for (const v1::Target& t : Targets()) {
      out[t.address()] = t.state();
    }
    return out;
  }
};

class FleetProbeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start();
    if (!cluster.ok() && absl::IsNotFound(cluster.status())) {
      GTEST_SKIP() << cluster.status();
    }
    ASSERT_OK(cluster.status());
    cluster_ = *std::move(cluster);
    tokens_ = dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    // The servers first: a child process would inherit the backends'
    // listening sockets (Asio does not set close-on-exec), and a backend
    // stopped here would still accept connections there.
    for (int i = 0; i < 3; ++i) {
      AddReplica();
    }
    for (int i = 0; i < kTcpBackends; ++i) {
      tcp_.push_back(
          std::make_unique<FakeBackend>(FakeBackend::Mode::kAcceptClose));
      ASSERT_OK_AND_ASSIGN(uint16_t port, tcp_.back()->Listen());
      tcp_ports_.push_back(port);
    }
    for (int i = 0; i < kGrpcBackends; ++i) {
      ASSERT_OK_AND_ASSIGN(std::unique_ptr<GrpcBackend> b,
                           GrpcBackend::Start(true));
      b->health().Set("", 1);  // SERVING
      grpc_.push_back(std::move(b));
    }
    CreateGroups();
  }

  void AddReplica(const std::string& extra = "") {
    const int i = static_cast<int>(replicas_.size());
    const std::string config = dir_.WriteFile(
        absl::StrCat("aside-", i, ".yaml"),
        absl::StrCat("store:\n  type: etcd\n  etcd:\n    endpoints: [",
                     absl::StrJoin(cluster_->endpoints(), ", "),
                     "]\n    prefix: /aside-probe/\n    dial_timeout: 300ms\n"
                     "    request_timeout: 2s\n",
                     "fleet:\n  member_ttl: 2s\n  replica_id: replica-", i,
                     "\nadmin:\n  token_file: ", tokens_, "\n", extra));
    absl::StatusOr<RunningServer> server = aside::testing::StartServer(
        absl::StrCat(dir_.path(), "/state-", i), {"--config", config});
    ASSERT_OK(server.status());
    auto r = std::make_unique<Replica>();
    r->server = *std::move(server);
    r->admin = v1::Admin::NewStub(grpc::CreateChannel(
        r->server.target(), grpc::InsecureChannelCredentials()));
    replicas_.push_back(std::move(r));
  }

  static void SetCheck(v1::Group& g, v1::HealthCheck::Kind kind) {
    v1::HealthCheck* hc = g.mutable_health_check();
    hc->set_kind(kind);
    hc->mutable_interval()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(kInterval)));
    hc->mutable_timeout()->set_nanos(200'000'000);
    hc->set_jitter(0);
    hc->set_rise(1);
    hc->set_fall(kFall);
  }

  // TCP backend i is in 1 + i % 5 of the groups tcp-0..tcp-5; gRPC backend
  // j in 1 + j % 4 of grpc-0..grpc-3.
  void CreateGroups() {
    std::vector<v1::Group> groups(10);
    for (int g = 0; g < 10; ++g) {
      groups[g].set_name(g < 6 ? absl::StrCat("tcp-", g)
                               : absl::StrCat("grpc-", g - 6));
      SetCheck(groups[g], g < 6 ? v1::HealthCheck::TCP : v1::HealthCheck::GRPC);
    }
    for (int i = 0; i < kTcpBackends; ++i) {
      for (int k = 0; k < 1 + i % 5; ++k) {
        groups[(i + k) % 6].add_backends()->set_address(
            absl::StrCat("127.0.0.1:", tcp_ports_[i]));
      }
    }
    for (int j = 0; j < kGrpcBackends; ++j) {
      for (int k = 0; k < 1 + j % 4; ++k) {
        groups[6 + (j + k) % 4].add_backends()->set_address(
            grpc_[j]->address());
      }
    }
    for (const v1::Group& g : groups) {
      v1::CreateGroupRequest req;
      *req.mutable_group() = g;
      v1::Group out;
      grpc::Status s =
          replicas_[0]->admin->CreateGroup(Context(kToken).get(), req, &out);
      ASSERT_TRUE(s.ok()) << g.name() << ": " << s.error_message();
    }
  }

  // Every live replica sees `members` members and the targets owned add up
  // to 30, each probed by one replica.
  bool Converged(size_t members) {
    double owned = 0;
    for (auto& r : replicas_) {
      if (!r->alive) {
        continue;
      }
      if (r->Metric("aside_fleet_members") != static_cast<double>(members) ||
          r->Targets().size() != kTcpBackends + kGrpcBackends) {
        return false;
      }
      owned += r->Metric("aside_fleet_targets_owned");
    }
    return owned == kTcpBackends + kGrpcBackends;
  }

  // Probes received so far, per backend (TCP first, then gRPC).
  std::vector<uint64_t> Counts() const {
    std::vector<uint64_t> out;
    for (const auto& b : tcp_) {
      out.push_back(b->accepted());
    }
    for (const auto& b : grpc_) {
      out.push_back(b->health().checks());
    }
    return out;
  }

  void Drain() {
    for (auto& r : replicas_) {
      if (r->alive) {
        r->server.process->ReadAvailable();
      }
    }
  }

  TempDir dir_;
  std::string tokens_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::vector<std::unique_ptr<FakeBackend>> tcp_;
  std::vector<uint16_t> tcp_ports_;
  std::vector<std::unique_ptr<GrpcBackend>> grpc_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TEST_F(FleetProbeTest, EachTargetIsProbedOncePerIntervalAndHealthAgrees) {
  ASSERT_TRUE(Eventually([&] { return Converged(3); }, absl::Seconds(20)));
  // Every target is probed by exactly one replica.
  std::map<std::string, int> probers;
  for (auto& r : replicas_) {
    for (const v1::Target& t : r->Targets()) {
      probers[t.address()] += t.probed_here() ? 1 : 0;
    }
  }
  for (const auto& [address, n] : probers) {
    EXPECT_EQ(n, 1) << address;
  }
  // ListMembers: every replica sees the same three, itself marked, and the
  // targets they probe add up (members report counts within a second).
  for (auto& r : replicas_) {
    v1::ListMembersResponse members;
    ASSERT_TRUE(r->admin
                    ->ListMembers(Context(kToken).get(),
                                  v1::ListMembersRequest(), &members)
                    .ok());
    EXPECT_TRUE(members.confirmed());
    ASSERT_EQ(members.members_size(), 3);
    int selves = 0;
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(members.members(i).id(), absl::StrCat("replica-", i));
      EXPECT_THAT(members.members(i).address(),
                  ::testing::StartsWith("127.0.0.1:"));
      selves += members.members(i).self() ? 1 : 0;
    }
    EXPECT_EQ(selves, 1);
    EXPECT_TRUE(Eventually(
        [&] {
          v1::ListMembersResponse m;
          r->admin->ListMembers(Context(kToken).get(), v1::ListMembersRequest(),
                                &m);
          uint32_t owned = 0;
          for (const v1::FleetMember& fm : m.members()) {
            owned += fm.targets_owned();
          }
          return owned == kTcpBackends + kGrpcBackends;
        },
        absl::Seconds(5)));
  }

  // Ten intervals: one probe per interval per target for the whole fleet
  // (three replicas each probing everything would give three).
  const std::vector<uint64_t> before = Counts();
  const absl::Time start = absl::Now();
  absl::SleepFor(10 * kInterval);  // the measurement window itself
  const std::vector<uint64_t> after = Counts();
  const double intervals = (absl::Now() - start) / kInterval;
  uint64_t total = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    const uint64_t n = after[i] - before[i];
    total += n;
    EXPECT_GE(static_cast<double>(n), intervals - 1.5) << "backend " << i;
    EXPECT_LE(static_cast<double>(n), intervals + 1.5) << "backend " << i;
  }
  std::cout << "probes per target per interval: "
            << static_cast<double>(total) / before.size() / intervals << "\n";
  Drain();

  // A backend that starts failing is unready on all three replicas within
  // fall x interval + 2 s, whichever replica probes it.
  const std::string failing = grpc_[3]->address();
  grpc_[3]->health().Set("", 2);  // NOT_SERVING
  const absl::Time failed_at = absl::Now();
  for (auto& r : replicas_) {
    EXPECT_TRUE(Eventually(
        [&] { return r->States()[failing] == v1::HEALTH_STATE_UNHEALTHY; },
        kFall * kInterval + absl::Seconds(2) - (absl::Now() - failed_at)))
        << "replica " << r->server.target();
  }
  for (auto& r : replicas_) {
    EXPECT_GE(r->Metric("aside_fleet_health_transitions_published_total") +
                  r->Metric("aside_fleet_health_transitions_applied_total"),
              1);
  }
  // Targets removed from every group take their published state with them
  // (the owners delete their keys within a few seconds).
  auto health_keys = [&] {
    absl::StatusOr<std::string> out = cluster_->Etcdctl(
        {"get", "--prefix", "/aside-probe/health/", "--keys-only"});
    return out.ok() ? *out : std::string("error");
  };
  EXPECT_NE(health_keys(), "");
  for (const std::string name :
       {"tcp-0", "tcp-1", "tcp-2", "tcp-3", "tcp-4", "tcp-5", "grpc-0",
        "grpc-1", "grpc-2", "grpc-3"}) {
    v1::DeleteGroupRequest req;
    req.set_name(name);
    v1::DeleteGroupResponse resp;
    ASSERT_TRUE(replicas_[1]
                    ->admin->DeleteGroup(Context(kToken).get(), req, &resp)
                    .ok());
  }
  EXPECT_TRUE(Eventually(
      [&] { return absl::StripAsciiWhitespace(health_keys()).empty(); },
      absl::Seconds(12)))
      << health_keys();
  Drain();
}

TEST_F(FleetProbeTest, KilledReplicasTargetsAreTakenOverWithinTtl) {
  ASSERT_TRUE(Eventually([&] { return Converged(3); }, absl::Seconds(20)));
  // The TCP targets replica 2 probes; one of them is stopped during the
  // takeover.
  std::set<std::string> victims;
  for (const v1::Target& t : replicas_[2]->Targets()) {
    if (t.probed_here()) {
      victims.insert(t.address());
    }
  }
  ASSERT_FALSE(victims.empty());
  int stopped = -1;
  for (int i = 0; i < kTcpBackends && stopped < 0; ++i) {
    if (victims.contains(absl::StrCat("127.0.0.1:", tcp_ports_[i]))) {
      stopped = i;
    }
  }

  replicas_[2]->server.process->Signal(SIGKILL);
  replicas_[2]->server.process->Wait(absl::Seconds(5));
  replicas_[2]->alive = false;
  const absl::Time killed = absl::Now();
  if (stopped >= 0) {
    tcp_[stopped]->Stop();
  }

  // The longest silence of any (running) backend after the kill: its
  // targets go unprobed until the lease expires and a survivor's next due
  // probe.
  const absl::Duration bound = kTtl + kInterval + absl::Seconds(3);
  std::vector<uint64_t> last = Counts();
  std::vector<absl::Time> last_probe(last.size(), killed);
  absl::Duration longest;
  const absl::Time end = killed + kTtl + 6 * kInterval + absl::Seconds(2);
  while (absl::Now() < end) {
    absl::SleepFor(absl::Milliseconds(20));
    const std::vector<uint64_t> now = Counts();
    for (size_t i = 0; i < now.size(); ++i) {
      if (static_cast<int>(i) == stopped) {
        continue;
      }
      if (now[i] != last[i]) {
        longest = std::max(longest, absl::Now() - last_probe[i]);
        last_probe[i] = absl::Now();
        last[i] = now[i];
      }
    }
  }
  for (size_t i = 0; i < last.size(); ++i) {
    if (static_cast<int>(i) == stopped) {
      continue;
    }
    // Every running backend is being probed again at the end.
    EXPECT_LT(absl::Now() - last_probe[i], 3 * kInterval) << "backend " << i;
  }
  std::cout << "takeover: longest silence " << longest << " (TTL " << kTtl
            << ", interval " << kInterval << ")\n";
  EXPECT_LE(longest, bound);
  EXPECT_GT(longest, kTtl / 2);  // replica 2 did own targets until it died

  for (int i : {0, 1}) {
    EXPECT_TRUE(Eventually([&] { return Converged(2); }, absl::Seconds(10)));
    EXPECT_GE(replicas_[i]->Metric("aside_fleet_members"), 2);
  }
  EXPECT_GE(replicas_[0]->Metric("aside_fleet_takeovers_total") +
                replicas_[1]->Metric("aside_fleet_takeovers_total"),
            1);
  if (stopped >= 0) {
    const std::string address = absl::StrCat("127.0.0.1:", tcp_ports_[stopped]);
    for (int i : {0, 1}) {
      EXPECT_TRUE(Eventually(
          [&] {
            return replicas_[i]->States()[address] ==
                   v1::HEALTH_STATE_UNHEALTHY;
          },
          kFall * kInterval + absl::Seconds(3)))
          << "replica " << i << ": " << [&] {
               std::string out;
               for (const v1::Target& t : replicas_[i]->Targets()) {
                 if (t.address() == address) {
                   out = t.DebugString();
                 }
               }
               return out;
             }();
    }
  }
  Drain();
}

TEST_F(FleetProbeTest, ATargetOnlyOneReplicaHasIsProbedThere) {
  ASSERT_TRUE(Eventually([&] { return Converged(3); }, absl::Seconds(20)));
  // A config-file group that only a fourth replica has: whichever member
  // the target hashes to, it is probed (by its owner if that is the fourth
  // replica, else by the fourth replica itself once no state was published
  // for it within its timeout + 3 s).
  FakeBackend solo(FakeBackend::Mode::kAcceptClose);
  ASSERT_OK_AND_ASSIGN(uint16_t port, solo.Listen());
  const std::string address = absl::StrCat("127.0.0.1:", port);
  AddReplica(absl::StrCat(
      "groups:\n  - name: solo\n    health_check: {kind: tcp, interval: "
      "250ms, timeout: 200ms, jitter: 0}\n    backends: [",
      address, "]\n"));
  Replica& fourth = *replicas_.back();
  ASSERT_TRUE(Eventually(
      [&] {
        for (auto& r : replicas_) {
          if (r->Metric("aside_fleet_members") != 4) {
            return false;
          }
        }
        v1::ListMembersResponse m;
        return fourth.admin
                   ->ListMembers(Context(kToken).get(),
                                 v1::ListMembersRequest(), &m)
                   .ok() &&
               m.confirmed();
      },
      absl::Seconds(20)));
  EXPECT_EQ(fourth.States()[address], v1::HEALTH_STATE_HEALTHY);
  // Probed again at the latest once the grace after confirmation is over.
  const uint64_t confirmed = solo.accepted();
  EXPECT_TRUE(Eventually(
      [&] { return solo.accepted() >= confirmed + 2; },
      absl::Milliseconds(200) + absl::Seconds(3) + absl::Seconds(3)));
  const uint64_t before = solo.accepted();
  absl::SleepFor(8 * kInterval);  // the measurement window itself
  const uint64_t probes = solo.accepted() - before;
  EXPECT_GE(probes, 6u);
  EXPECT_LE(probes, 10u);
  Drain();
}

// Probes per target per interval over `n` intervals.
double Rate(const std::vector<uint64_t>& before,
            const std::vector<uint64_t>& after, double intervals) {
  uint64_t total = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    total += after[i] - before[i];
  }
  return static_cast<double>(total) / before.size() / intervals;
}

TEST_F(FleetProbeTest, WithoutEtcdEveryReplicaProbesEverythingUntilItReturns) {
  ASSERT_TRUE(Eventually([&] { return Converged(3); }, absl::Seconds(20)));
  for (int i = 0; i < 3; ++i) {
    cluster_->Kill(i);
  }
  // Once a replica cannot renew its lease within the TTL its membership is
  // unconfirmed: it probes every target rather than risk leaving some
  // unprobed.
  for (auto& r : replicas_) {
    EXPECT_TRUE(Eventually(
        [&] {
          return r->Metric("aside_fleet_targets_owned") ==
                 kTcpBackends + kGrpcBackends;
        },
        kTtl + absl::Seconds(8)));
  }
  std::vector<uint64_t> before = Counts();
  absl::Time start = absl::Now();
  absl::SleepFor(6 * kInterval);  // the measurement window itself
  double rate = Rate(before, Counts(), (absl::Now() - start) / kInterval);
  std::cout << "probes per target per interval without etcd: " << rate << "\n";
  EXPECT_GT(rate, 2.5);
  Drain();

  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(cluster_->StartMember(i));
  }
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(30)));
  // Registered again: back to one probe per target per interval.
  ASSERT_TRUE(Eventually([&] { return Converged(3); }, absl::Seconds(20)));
  before = Counts();
  start = absl::Now();
  absl::SleepFor(6 * kInterval);
  rate = Rate(before, Counts(), (absl::Now() - start) / kInterval);
  std::cout << "probes per target per interval after etcd returned: " << rate
            << "\n";
  EXPECT_LT(rate, 1.3);
  Drain();
}

}  // namespace
}  // namespace aside
