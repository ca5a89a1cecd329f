// The fleet (DESIGN.md §11): three real aside-server processes sharing a
// real 3-member etcd cluster on loopback. Groups created on one replica
// serve from every replica with the same generation; conflicting writes
// through two replicas: one wins, the other is ABORTED; losing etcd loses
// only Admin writes; compaction and bad values are survived; acknowledged
// mutations survive SIGKILLed etcd leaders.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
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
using ::aside::testing::RunningServer;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

constexpr char kToken[] = "fleet-admin-token";
// A `report` credential: load reports, and what replicas present to each
// other's LoadView.
constexpr char kReportToken[] = "fleet-report-token-0123";
constexpr char kPrefix[] = "/aside-fleet/";

v1::Group MakeGroup(const std::string& name, std::vector<int> ports) {
  v1::Group g;
  g.set_name(name);
  g.mutable_health_check()->set_kind(v1::HealthCheck::NONE);
  for (int port : ports) {
    g.add_backends()->set_address(absl::StrCat("127.0.0.1:", port));
  }
  return g;
}

// One replica and its stubs.
struct Replica {
  RunningServer server;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<v1::LoadBalancer::Stub> lb;

  grpc::Status Create(const v1::Group& g, v1::Group* out = nullptr) {
    v1::CreateGroupRequest req;
    *req.mutable_group() = g;
    v1::Group ignored;
    return admin->CreateGroup(Context(kToken).get(), req,
                              out != nullptr ? out : &ignored);
  }
  grpc::Status SetBackends(const std::string& name, std::vector<int> ports,
                           v1::Group* out = nullptr) {
    v1::UpdateGroupRequest req;
    *req.mutable_group() = MakeGroup(name, std::move(ports));
    req.mutable_update_mask()->add_paths("backends");
    v1::Group ignored;
    return admin->UpdateGroup(Context(kToken).get(), req,
                              out != nullptr ? out : &ignored);
  }
  grpc::Status Delete(const std::string& name) {
    v1::DeleteGroupRequest req;
    req.set_name(name);
    v1::DeleteGroupResponse resp;
    return admin->DeleteGroup(Context(kToken).get(), req, &resp);
  }
  std::optional<v1::Group> Get(const std::string& name) {
    v1::GetGroupRequest req;
    req.set_name(name);
    v1::Group g;
    if (!admin->GetGroup(Context(kToken).get(), req, &g).ok()) {
      return std::nullopt;
    }
    return g;
  }
  // The group's backend addresses as this replica serves them ("" when
  // it has no such group).
  std::string Backends(const std::string& name) {
    std::optional<v1::Group> g = Get(name);
    if (!g.has_value()) {
      return "";
    }
    std::vector<std::string> out;
    for (const v1::Backend& b : g->backends()) {
      out.push_back(b.address());
    }
    return absl::StrJoin(out, ",");
  }
  uint64_t Generation(const std::string& name) {
    v1::ListGroupsResponse resp;
    admin->ListGroups(Context(kToken).get(), v1::ListGroupsRequest(), &resp);
    for (const v1::Group& g : resp.groups()) {
      if (g.name() == name) {
        return g.generation();
      }
    }
    return 0;
  }
  v1::StoreState Store() {
    v1::ListTargetsResponse resp;
    admin->ListTargets(Context(kToken).get(), v1::ListTargetsRequest(), &resp);
    return resp.store();
  }
  grpc::Status Pick(const std::string& group, v1::PickResponse* out,
                    const std::string& token = "") {
    v1::PickRequest req;
    req.set_group(group);
    req.set_session_token(token);
    return lb->Pick(Context().get(), req, out);
  }
  std::string Metrics() {
    absl::StatusOr<aside::testing::HttpResponse> r =
        aside::testing::HttpGet("127.0.0.1", server.metrics_port, "/metrics");
    return r.ok() ? r->body : "";
  }
};

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster = EtcdCluster::Start();
    if (!cluster.ok() && absl::IsNotFound(cluster.status())) {
      GTEST_SKIP() << cluster.status();
    }
    ASSERT_OK(cluster.status());
    cluster_ = *std::move(cluster);
    tokens_ = dir_.WriteFile(
        "tokens", absl::StrCat(kToken, " admin\n", kReportToken, " report\n"));
    peer_token_ =
        dir_.WriteFile("peer-token", absl::StrCat(kReportToken, "\n"));
    for (int i = 0; i < 3; ++i) {
      AddReplica(cluster_->endpoints());
    }
  }

  std::string Config(const std::vector<std::string>& endpoints,
                     const std::string& extra = "") {
    return absl::StrCat(
        extra, "store:\n  type: etcd\n  etcd:\n    endpoints: [",
        absl::StrJoin(endpoints, ", "), "]\n    prefix: ", kPrefix,
        "\n    dial_timeout: 300ms\n    request_timeout: 2s\n",
        "admin:\n  token_file: ", tokens_, "\n",
        "fleet:\n  member_ttl: 2s\n  peer_token_file: ", peer_token_, "\n");
  }

  void AddReplica(const std::vector<std::string>& endpoints,
                  const std::string& extra = "") {
    const int i = static_cast<int>(replicas_.size());
    const std::string config = dir_.WriteFile(
        absl::StrCat("aside-", i, ".yaml"), Config(endpoints, extra));
    absl::StatusOr<RunningServer> server = aside::testing::StartServer(
        absl::StrCat(dir_.path(), "/state-", i), {"--config", config});
    ASSERT_OK(server.status());
    auto r = std::make_unique<Replica>();
    r->server = *std::move(server);
    auto channel = grpc::CreateChannel(r->server.target(),
                                       grpc::InsecureChannelCredentials());
    r->admin = v1::Admin::NewStub(channel);
    r->lb = v1::LoadBalancer::NewStub(channel);
    replicas_.push_back(std::move(r));
  }

  // Keeps the servers' stderr pipes from filling.
  void Drain() {
    for (auto& r : replicas_) {
      r->server.process->ReadAvailable();
    }
  }

  Replica& A() { return *replicas_[0]; }
  Replica& B() { return *replicas_[1]; }
  Replica& C() { return *replicas_[2]; }

  TempDir dir_;
  std::string tokens_;
  std::string peer_token_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TEST_F(FleetTest, GroupCreatedOnAServesFromBAndCWithTheSameGeneration) {
  // A Watch on C that starts before the group exists.
  grpc::ClientContext watch_context;
  watch_context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(30));
  v1::WatchRequest watch_request;
  watch_request.add_groups("web");
  auto stream = C().lb->Watch(&watch_context, watch_request);

  v1::Group created;
  ASSERT_TRUE(A().Create(MakeGroup("web", {8001, 8002}), &created).ok());
  const uint64_t generation = A().Generation("web");
  ASSERT_GT(generation, 0u);
  // Generations of stored groups are store revisions << 20.
  EXPECT_EQ(generation % (uint64_t{1} << 20), 0u);

  for (Replica* r : {&B(), &C()}) {
    ASSERT_TRUE(Eventually([&] { return r->Generation("web") != 0; }));
    EXPECT_EQ(r->Generation("web"), generation);
    v1::PickResponse pick;
    ASSERT_TRUE(r->Pick("web", &pick).ok());
    EXPECT_THAT(pick.backends(0).address(), HasSubstr("127.0.0.1:800"));
  }

  v1::GroupUpdate update;
  do {
    ASSERT_TRUE(stream->Read(&update));
  } while (update.has_removed());
  EXPECT_EQ(update.generation(), generation);
  EXPECT_EQ(update.full().backends_size(), 2);

  // A change through B reaches C's subscriber with a higher generation, the
  // same as on every replica.
  ASSERT_TRUE(B().SetBackends("web", {8003}).ok());
  ASSERT_TRUE(stream->Read(&update));
  EXPECT_GT(update.generation(), generation);
  for (Replica* r : {&A(), &B(), &C()}) {
    ASSERT_TRUE(Eventually([&] {
      return r->Generation("web") == update.generation();
    })) << r->Generation("web")
        << " vs " << update.generation();
  }

  // Deleting through C removes it everywhere.
  ASSERT_TRUE(C().Delete("web").ok());
  for (Replica* r : {&A(), &B()}) {
    ASSERT_TRUE(Eventually([&] { return !r->Get("web").has_value(); }));
  }
  watch_context.TryCancel();
}

TEST_F(FleetTest, ConflictingUpdatesThroughTwoReplicasOneWins) {
  ASSERT_TRUE(A().Create(MakeGroup("contested", {9000})).ok());
  ASSERT_TRUE(Eventually([&] { return B().Backends("contested") != ""; }));
  int conflicts = 0;
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> ready{0};
    grpc::Status status_a, status_b;
    const int port_a = 10000 + round, port_b = 20000 + round;
    auto run = [&](Replica& r, int port, grpc::Status* out) {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      *out = r.SetBackends("contested", {port});
    };
    std::thread ta(run, std::ref(A()), port_a, &status_a);
    std::thread tb(run, std::ref(B()), port_b, &status_b);
    ta.join();
    tb.join();
    for (const grpc::Status* s : {&status_a, &status_b}) {
      EXPECT_TRUE(s->ok() || s->error_code() == grpc::StatusCode::ABORTED)
          << s->error_code() << " " << s->error_message();
    }
    ASSERT_TRUE(status_a.ok() || status_b.ok()) << status_a.error_message();
    std::string expected;
    if (status_a.ok() != status_b.ok()) {
      ++conflicts;
      expected = absl::StrCat("127.0.0.1:", status_a.ok() ? port_a : port_b);
    }
    // Every replica converges on one state: the winner's when one lost.
    std::string converged;
    ASSERT_TRUE(Eventually([&] {
      converged = A().Backends("contested");
      return converged == B().Backends("contested") &&
             converged == C().Backends("contested") &&
             (expected.empty() || converged == expected);
    })) << "round "
        << round << ": " << A().Backends("contested") << " / "
        << B().Backends("contested") << " / " << C().Backends("contested")
        << " expected " << expected;
    Drain();
  }
  // Two writers released together almost always collide at least once.
  EXPECT_GT(conflicts, 0);
}

TEST_F(FleetTest, LosingEtcdLosesOnlyAdminWritesAndReplicasResync) {
  ASSERT_TRUE(A().Create(MakeGroup("steady", {8100, 8101})).ok());
  ASSERT_TRUE(Eventually([&] { return C().Backends("steady") != ""; }));
  grpc::ClientContext watch_context;
  watch_context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(60));
  v1::WatchRequest watch_request;
  watch_request.add_groups("steady");
  auto stream = C().lb->Watch(&watch_context, watch_request);
  v1::GroupUpdate update;
  ASSERT_TRUE(stream->Read(&update));
  ASSERT_EQ(update.full().backends_size(), 2);

  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Kill(i);
  }
  // Every replica notices and says so.
  for (Replica* r : {&A(), &B(), &C()}) {
    ASSERT_TRUE(Eventually([&] { return !r->Store().up(); }));
  }
  EXPECT_THAT(A().Metrics(), HasSubstr("aside_store_up{type=\"etcd\"} 0"));
  const absl::Time down_until = absl::Now() + absl::Seconds(8);
  while (absl::Now() < down_until) {
    for (Replica* r : {&A(), &B(), &C()}) {
      v1::PickResponse pick;
      ASSERT_TRUE(r->Pick("steady", &pick).ok());
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  const grpc::Status refused = B().Create(MakeGroup("during", {8200}));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr(cluster_->endpoint(0)));
  EXPECT_FALSE(B().Get("during").has_value());

  for (int i = 0; i < cluster_->size(); ++i) {
    ASSERT_OK(cluster_->StartMember(i));
  }
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(30)));
  for (Replica* r : {&A(), &B(), &C()}) {
    ASSERT_TRUE(Eventually([&] { return r->Store().up(); }, absl::Seconds(30)));
  }
  // Writes work again and reach every replica, and C's subscriber (whose
  // stream never ended) sees them.
  ASSERT_TRUE(Eventually([&] { return B().SetBackends("steady", {8102}).ok(); },
                         absl::Seconds(20)));
  for (Replica* r : {&A(), &C()}) {
    ASSERT_TRUE(
        Eventually([&] { return r->Backends("steady") == "127.0.0.1:8102"; }));
  }
  ASSERT_TRUE(stream->Read(&update));
  EXPECT_TRUE(update.has_delta() || update.has_full());
  watch_context.TryCancel();
}

TEST_F(FleetTest, StickyTokenFromAIsHonouredByB) {
  v1::Group g = MakeGroup("sticky", {8301, 8302, 8303, 8304});
  g.mutable_policy()->mutable_sticky();
  ASSERT_TRUE(A().Create(g).ok());
  ASSERT_TRUE(Eventually([&] { return B().Backends("sticky") != ""; }));
  for (int i = 0; i < 8; ++i) {
    v1::PickResponse first;
    ASSERT_TRUE(A().Pick("sticky", &first).ok());
    ASSERT_FALSE(first.session_token().empty());
    v1::PickResponse again;
    ASSERT_TRUE(B().Pick("sticky", &again, first.session_token()).ok());
    EXPECT_EQ(again.backends(0).address(), first.backends(0).address());
  }
}

TEST_F(FleetTest, CompactionPastAReplicasWatchResyncs) {
  // D follows etcd through member 2 only: with it down, D falls behind.
  AddReplica({cluster_->endpoint(2)});
  Replica& d = *replicas_.back();
  ASSERT_TRUE(A().Create(MakeGroup("stays", {8401})).ok());
  ASSERT_TRUE(A().Create(MakeGroup("goes", {8402})).ok());
  ASSERT_TRUE(A().Create(MakeGroup("changes", {8403})).ok());
  ASSERT_TRUE(Eventually([&] { return d.Backends("changes") != ""; }));

  cluster_->Kill(2);
  ASSERT_TRUE(Eventually([&] { return !d.Store().up(); }));
  // Member 2 may have led: writes wait for the others to elect a leader.
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(20)));
  const grpc::Status deleted = A().Delete("goes");
  ASSERT_TRUE(deleted.ok()) << deleted.error_message();
  ASSERT_TRUE(A().SetBackends("changes", {8404}).ok());
  ASSERT_TRUE(A().Create(MakeGroup("new", {8405})).ok());
  const int64_t revision = A().Store().revision();
  ASSERT_GT(revision, 0);
  ASSERT_OK(cluster_->Etcdctl({"compact", absl::StrCat(revision)}).status());
  ASSERT_OK(cluster_->Restart(2));

  ASSERT_OK(
      d.server.process->WaitForLine("event=store.compacted", absl::Seconds(30))
          .status());
  ASSERT_TRUE(Eventually([&] {
    return !d.Get("goes").has_value() &&
           d.Backends("changes") == "127.0.0.1:8404" &&
           d.Backends("new") == "127.0.0.1:8405" &&
           d.Backends("stays") == "127.0.0.1:8401";
  }));
  EXPECT_EQ(d.Generation("changes"), A().Generation("changes"));
}

TEST_F(FleetTest, AValueThatDoesNotParseIsLoggedCountedAndSkipped) {
  ASSERT_TRUE(A().Create(MakeGroup("fine", {8501})).ok());
  ASSERT_OK(cluster_
                ->Etcdctl({"put", absl::StrCat(kPrefix, "groups/broken"),
                           "this is not a group"})
                .status());
  ASSERT_OK_AND_ASSIGN(std::string line,
                       B().server.process->WaitForLine("event=store.bad_value",
                                                       absl::Seconds(15)));
  EXPECT_THAT(line, HasSubstr("groups/broken"));
  EXPECT_THAT(B().Metrics(),
              HasSubstr("aside_store_errors_total{kind=\"bad_value\"}"));
  v1::PickResponse pick;
  EXPECT_TRUE(B().Pick("fine", &pick).ok());
  EXPECT_FALSE(B().Get("broken").has_value());
  // Admin can replace the bad value.
  ASSERT_TRUE(
      Eventually([&] { return A().Create(MakeGroup("broken", {8502})).ok(); }));
  ASSERT_TRUE(
      Eventually([&] { return C().Backends("broken") == "127.0.0.1:8502"; }));
}

TEST_F(FleetTest, AReplicaStartedWithoutEtcdServesTheFileAndCatchesUp) {
  ASSERT_TRUE(A().Create(MakeGroup("stored", {8601})).ok());
  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Kill(i);
  }
  AddReplica(cluster_->endpoints(),
             "groups:\n  - name: from-file\n    health_check: {kind: none}\n"
             "    backends: [{address: 127.0.0.1:8602}]\n");
  Replica& late = *replicas_.back();
  ASSERT_OK(late.server.process
                ->WaitForLine("event=store.unavailable", absl::Seconds(10))
                .status());
  v1::PickResponse pick;
  ASSERT_TRUE(late.Pick("from-file", &pick).ok());
  EXPECT_EQ(pick.backends(0).address(), "127.0.0.1:8602");
  EXPECT_FALSE(late.Store().up());
  EXPECT_EQ(late.Create(MakeGroup("refused", {8603})).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  for (int i = 0; i < cluster_->size(); ++i) {
    ASSERT_OK(cluster_->StartMember(i));
  }
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(30)));
  ASSERT_TRUE(
      Eventually([&] { return late.Backends("stored") == "127.0.0.1:8601"; },
                 absl::Seconds(30)));
  EXPECT_EQ(late.Generation("stored"), A().Generation("stored"));
  ASSERT_TRUE(late.Pick("from-file", &pick).ok());
}

TEST_F(FleetTest, GroupsMoveFromASqliteStateDirectoryIntoEtcd) {
  const std::string sqlite_dir = dir_.path() + "/single";
  {
    absl::StatusOr<RunningServer> single = aside::testing::StartServer(
        sqlite_dir, {"--admin-token-file", tokens_});
    ASSERT_OK(single.status());
    Replica r;
    r.server = *std::move(single);
    auto channel = grpc::CreateChannel(r.server.target(),
                                       grpc::InsecureChannelCredentials());
    r.admin = v1::Admin::NewStub(channel);
    ASSERT_TRUE(r.Create(MakeGroup("moved-1", {8701})).ok());
    ASSERT_TRUE(r.Create(MakeGroup("moved-2", {8702})).ok());
    r.server.process->Signal(SIGTERM);
    ASSERT_TRUE(r.server.process->Wait(absl::Seconds(15)).has_value());
  }
  const std::string file = dir_.path() + "/groups.json";
  aside::testing::CommandResult exported = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--state-dir", sqlite_dir,
       "--export-state", file});
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_THAT(exported.output, HasSubstr("2 groups exported"));

  // One of them exists in the fleet already: the import leaves it alone.
  ASSERT_TRUE(A().Create(MakeGroup("moved-2", {8799})).ok());
  aside::testing::CommandResult imported = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--config",
       dir_.path() + "/aside-0.yaml", "--import-state", file});
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  EXPECT_THAT(imported.output, HasSubstr("1 groups imported"));
  EXPECT_THAT(imported.output, HasSubstr("left alone: moved-2"));
  for (Replica* r : {&A(), &B(), &C()}) {
    ASSERT_TRUE(
        Eventually([&] { return r->Backends("moved-1") == "127.0.0.1:8701"; }));
    EXPECT_EQ(r->Backends("moved-2"), "127.0.0.1:8799");
  }

  // A file that is not an export is refused, naming it.
  const std::string bad = dir_.WriteFile("bad.json", "{\"groups\": 3}");
  aside::testing::CommandResult refused = aside::testing::RunCommand(
      {aside::testing::BinDir() + "/aside-server", "--config",
       dir_.path() + "/aside-0.yaml", "--import-state", bad});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.output, HasSubstr("bad.json"));
}

TEST_F(FleetTest, LoadReportedToAReachesBAndCThroughTheMembership) {
  // No fleet.peers: the replicas find each other through their member keys.
  ASSERT_TRUE(A().Create(MakeGroup("loaded", {9201, 9202})).ok());
  auto in_flight_on = [&](Replica& r) -> uint64_t {
    std::optional<v1::Group> g = r.Get("loaded");
    if (!g.has_value()) {
      return 0;
    }
    for (const v1::TableBackend& tb : g->state()) {
      if (tb.backend().address() == "127.0.0.1:9201" && tb.has_load()) {
        return tb.load().in_flight();
      }
    }
    return 0;
  };
  std::unique_ptr<grpc::ClientContext> context = Context(kReportToken);
  v1::ReportLoadResponse response;
  auto writer = A().lb->ReportLoad(context.get(), &response);
  v1::LoadReport report;
  report.set_reporter("pod-on-a");
  v1::BackendLoad* load = report.add_loads();
  load->set_group("loaded");
  load->set_address("127.0.0.1:9201");
  load->set_in_flight(7);
  ASSERT_TRUE(writer->Write(report));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  ASSERT_EQ(response.accepted(), 1u);
  for (Replica* r : {&B(), &C()}) {
    EXPECT_TRUE(Eventually([&] { return in_flight_on(*r) == 7; }))
        << "in flight on a peer: " << in_flight_on(*r);
  }
  // A replica that dies stops counting on the others once its membership
  // goes (lease TTL 2 s) or its stream stays silent past the grace.
  A().server.process->Signal(SIGKILL);
  EXPECT_TRUE(
      Eventually([&] { return in_flight_on(B()) == 0; }, absl::Seconds(20)))
      << "in flight on B after A died: " << in_flight_on(B());
}

TEST_F(FleetTest, AcknowledgedMutationsSurviveLeaderKills) {
  constexpr int kGroups = 20;
  // At least kMutations, and on until the leader was killed kKills times
  // (a fast machine would otherwise finish before the first kill), but
  // never more than kMaxMutations.
  constexpr int kMutations = 500;
  constexpr int kKills = 3;
  constexpr int kMaxMutations = 20000;
  for (int g = 0; g < kGroups; ++g) {
    ASSERT_TRUE(
        replicas_[g % 3]->Create(MakeGroup(absl::StrCat("d", g), {1})).ok());
  }
  // Per group: the port of the last acknowledged write and the highest
  // attempted; generations each replica returned, in order.
  std::vector<int> acked(kGroups, 1), attempted(kGroups, 1);
  std::map<std::pair<int, int>, uint64_t> last_generation;
  std::atomic<bool> done{false};
  std::atomic<int> kills{0};
  int acknowledged = 0;
  int mutations = 0;
  std::thread writer([&] {
    for (int i = 0; i < kMaxMutations && (i < kMutations || kills < kKills);
         ++i, ++mutations) {
      const int g = i % kGroups;
      const int r = i % 3;
      const int port = 2 + i;
      attempted[g] = port;
      v1::Group out;
      grpc::Status s =
          replicas_[r]->SetBackends(absl::StrCat("d", g), {port}, &out);
      if (s.ok()) {
        acked[g] = port;
        ++acknowledged;
        uint64_t& last = last_generation[{r, g}];
        EXPECT_GT(out.generation(), last) << "group d" << g;
        last = out.generation();
      }
    }
    done = true;
  });
  std::mt19937 rng(7);
  while (!done) {
    absl::SleepFor(absl::Milliseconds(300 + rng() % 700));
    if (done) {
      break;
    }
    absl::StatusOr<int> leader = cluster_->Leader(absl::Seconds(5));
    if (!leader.ok()) {
      continue;
    }
    cluster_->Kill(*leader);
    ++kills;
    absl::SleepFor(absl::Milliseconds(rng() % 500));
    ASSERT_OK(cluster_->Restart(*leader, absl::Seconds(30)));
    Drain();
  }
  writer.join();
  EXPECT_GE(kills, kKills);
  EXPECT_GT(acknowledged, mutations / 2);
  for (int g = 0; g < kGroups; ++g) {
    const std::string name = absl::StrCat("d", g);
    std::string final_backends;
    ASSERT_TRUE(Eventually(
        [&] {
          final_backends = A().Backends(name);
          return final_backends == B().Backends(name) &&
                 final_backends == C().Backends(name) &&
                 A().Generation(name) == C().Generation(name) &&
                 B().Generation(name) == C().Generation(name);
        },
        absl::Seconds(30)))
        << name;
    const int port =
        std::stoi(final_backends.substr(final_backends.find(':') + 1));
    // The acknowledged write, or a later one that failed only in its reply.
    EXPECT_GE(port, acked[g]) << name;
    EXPECT_LE(port, attempted[g]) << name;
  }
}

}  // namespace
}  // namespace aside
