// The fleet (DESIGN.md §11): three real aside-server processes sharing a
// real 3-member etcd cluster on loopback. Groups created on one replica
// serve from every replica with the same generation; conflicting writes
// through two replicas: one wins, the other is ABORTED; losing etcd loses
// only Admin writes; compaction and bad values are survived; acknowledged
// mutations survive SIGKILLed etcd leaders; and a history of racing
// read-modify-writes through random replicas is linearisable (every stored
// version is the writes acknowledged at its revision, folded in some order,
// applied to its predecessor).
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "google/protobuf/util/json_util.h"
#include "lib/sync.h"
#include "tests/fleet/fleet_helpers.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Context;
using ::aside::testing::EtcdCluster;
using ::aside::testing::Eventually;
using ::aside::testing::MakeGroup;
using ::aside::testing::Replica;
using ::aside::testing::RunningServer;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kReportToken = ::aside::testing::kFleetReportToken;
constexpr const char* kPrefix = ::aside::testing::kFleetPrefix;

class FleetTest : public ::aside::testing::FleetTestBase {
 protected:
  void SetUp() override {
    StartCluster();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    for (int i = 0; i < 3; ++i) {
      AddReplica(cluster_->endpoints());
    }
  }

  Replica& A() { return *replicas_[0]; }
  Replica& B() { return *replicas_[1]; }
  Replica& C() { return *replicas_[2]; }

  // Waits until the three replicas agree on `name`'s single backend and
  // generation, then checks that the backend's port is the last
  // acknowledged write's or a later attempted one's (whose reply was lost).
  void ExpectReplicasAgreeOnALastWrite(const std::string& name, int acked,
                                       int attempted) {
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
    EXPECT_GE(port, acked) << name;
    EXPECT_LE(port, attempted) << name;
  }
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

// A replica stopped with SIGTERM says so at info level: an alert on
// store.down or store.watch_lost must not fire on every rollout.
TEST_F(FleetTest, ACleanShutdownLogsNoStoreDown) {
  ASSERT_TRUE(A().Create(MakeGroup("shutdown", {8711})).ok());
  Replica& a = A();
  a.server.process->Signal(SIGTERM);
  ASSERT_TRUE(a.server.process->Wait(absl::Seconds(15)).has_value());
  bool unfollowed = false;
  for (const std::string& line : a.server.process->stderr_lines()) {
    EXPECT_THAT(line, Not(HasSubstr("event=store.down")));
    EXPECT_THAT(line, Not(HasSubstr("event=store.watch_lost")));
    unfollowed =
        unfollowed || absl::StrContains(line, "event=store.unfollowed");
  }
  EXPECT_TRUE(unfollowed);
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
    ExpectReplicasAgreeOnALastWrite(name, acked[g], attempted[g]);
  }
}

// The same with eight writers at once through replica A, so that their
// writes share etcd Txns (group commit), while etcd leaders are SIGKILLed
// after a random number of acknowledged writes: every acknowledged write
// survives, on every replica.
TEST_F(FleetTest, ConcurrentBatchedWritesSurviveLeaderKills) {
  constexpr int kWriters = 8;
  constexpr int kKills = 3;
  constexpr int kMaxPerWriter = 5000;
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_TRUE(A().Create(MakeGroup(absl::StrCat("b", w), {1})).ok());
  }
  std::vector<int> acked(kWriters, 1), attempted(kWriters, 1);
  aside::Mutex mu;
  int acknowledged = 0;       // guarded by mu
  bool stop = false;          // guarded by mu
  bool writers_done = false;  // guarded by mu
  // Reads the replicas' stderr while the writers run, so that their logs
  // never fill the pipes and stall them.
  std::thread drainer([&] {
    for (;;) {
      {
        aside::MutexLock lock(&mu);
        if (mu.AwaitWithTimeout(aside::Cond(&writers_done),
                                absl::Milliseconds(50))) {
          return;
        }
      }
      Drain();
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      const std::string name = absl::StrCat("b", w);
      for (int i = 0; i < kMaxPerWriter; ++i) {
        {
          aside::MutexLock lock(&mu);
          if (stop) {
            return;
          }
        }
        const int port = 2 + i;
        attempted[w] = port;
        v1::Group out;
        if (A().SetBackends(name, {port}, &out).ok()) {
          acked[w] = port;
          aside::MutexLock lock(&mu);
          ++acknowledged;
        }
      }
    });
  }
  std::mt19937 rng(11);
  for (int kill = 0; kill < kKills; ++kill) {
    bool progressed = false;
    {
      aside::MutexLock lock(&mu);
      const int target = acknowledged + 20 + static_cast<int>(rng() % 100);
      progressed = mu.AwaitWithTimeout(
          [&] {
            mu.AssertHeld();
            return acknowledged >= target;
          },
          absl::Seconds(60));
    }
    ASSERT_TRUE(progressed) << "no acknowledged writes before kill " << kill;
    absl::StatusOr<int> leader = cluster_->Leader(absl::Seconds(5));
    ASSERT_OK(leader.status());
    cluster_->Kill(*leader);
    ASSERT_OK(cluster_->Restart(*leader, absl::Seconds(30)));
  }
  {
    // Some writes after the last restart, then stop.
    aside::MutexLock lock(&mu);
    const int target = acknowledged + 50;
    EXPECT_TRUE(mu.AwaitWithTimeout(
        [&] {
          mu.AssertHeld();
          return acknowledged >= target;
        },
        absl::Seconds(60)));
    stop = true;
  }
  for (std::thread& t : writers) {
    t.join();
  }
  {
    aside::MutexLock lock(&mu);
    writers_done = true;
  }
  drainer.join();
  Drain();
  for (int w = 0; w < kWriters; ++w) {
    const std::string name = absl::StrCat("b", w);
    ExpectReplicasAgreeOnALastWrite(name, acked[w], attempted[w]);
  }
  aside::MutexLock lock(&mu);
  RecordProperty("acknowledged", acknowledged);
}

// One Admin operation of the history test and what it got.
struct HistoryOp {
  enum Kind { kDrain, kUndrain, kAdd, kRemove } kind;
  int group = 0;
  std::string address;
  absl::Time start, end;
  grpc::StatusCode code = grpc::StatusCode::OK;
  int64_t revision = 0;  // of an acknowledged write
  // An acknowledged write's reply: its backends, address -> drained.
  std::map<std::string, bool> reply;
};

// A group's backends as stored: address -> drained.
using StoredBackends = std::map<std::string, bool>;

std::string Describe(const HistoryOp& op) {
  static constexpr const char* kNames[] = {"drain", "undrain", "add", "remove"};
  return absl::StrCat(kNames[op.kind], " ", op.address, " in h", op.group,
                      " -> ", op.code, " @", op.revision);
}

// What `op` makes of `before` (nullopt: its precondition fails there).
std::optional<StoredBackends> ApplyOp(const HistoryOp& op,
                                      const StoredBackends& before) {
  StoredBackends after = before;
  auto it = after.find(op.address);
  switch (op.kind) {
    case HistoryOp::kAdd:
      if (it != after.end()) return std::nullopt;
      after[op.address] = false;
      break;
    case HistoryOp::kRemove:
      if (it == after.end()) return std::nullopt;
      after.erase(it);
      break;
    case HistoryOp::kDrain:
    case HistoryOp::kUndrain:
      if (it == after.end()) return std::nullopt;
      it->second = op.kind == HistoryOp::kDrain;
      break;
  }
  return after;
}

// Whether `ops`, applied one after another in some order to `before`, each
// accepted where it is applied, give `after`: the writes folded into one
// stored version (StoreSync::Mutate) were all waiting at once, so any
// order of them is one their callers could have seen.
bool SomeOrderGives(std::vector<const HistoryOp*> ops,
                    const StoredBackends& before, const StoredBackends& after) {
  std::sort(ops.begin(), ops.end());
  do {
    std::optional<StoredBackends> value = before;
    for (const HistoryOp* op : ops) {
      if (value.has_value()) value = ApplyOp(*op, *value);
    }
    if (value.has_value() && *value == after) return true;
  } while (std::next_permutation(ops.begin(), ops.end()));
  return false;
}

// Every stored version of one key, oldest first, read from etcd itself
// (not through the client under test): {mod_revision, value}.
std::vector<std::pair<int64_t, std::string>> KeyHistory(
    etcdserverpb::KV::Stub& kv, const std::string& key) {
  std::vector<std::pair<int64_t, std::string>> out;
  int64_t at = 0;  // newest
  for (;;) {
    etcdserverpb::RangeRequest req;
    req.set_key(key);
    req.set_revision(at);
    etcdserverpb::RangeResponse resp;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    if (!kv.Range(&context, req, &resp).ok() || resp.kvs().empty()) {
      break;
    }
    const auto& found = resp.kvs(0);
    out.emplace_back(found.mod_revision(), found.value());
    if (found.version() == 1) {
      break;
    }
    at = found.mod_revision() - 1;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

TEST_F(FleetTest, RacingWritesThroughRandomReplicasFormALinearisableHistory) {
  constexpr int kGroups = 2;
  constexpr int kWriters = 4;
  constexpr int kOpsPerWriter = 200;
  constexpr int kPool = 6;  // backend ports per group
  for (int g = 0; g < kGroups; ++g) {
    ASSERT_TRUE(
        A().Create(MakeGroup(absl::StrCat("h", g), {7000, 7001, 7002, 7003}))
            .ok());
  }
  for (int g = 0; g < kGroups; ++g) {
    ASSERT_TRUE(Eventually([&] {
      return !B().Backends(absl::StrCat("h", g)).empty() &&
             !C().Backends(absl::StrCat("h", g)).empty();
    }));
  }
  std::vector<std::vector<HistoryOp>> ops(kWriters);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::mt19937 rng(100 + w);
      for (int i = 0; i < kOpsPerWriter; ++i) {
        HistoryOp op{
            .kind = static_cast<HistoryOp::Kind>(rng() % 4),
            .group = static_cast<int>(rng() % kGroups),
            .address = absl::StrCat("127.0.0.1:", 7000 + rng() % kPool)};
        Replica& r = *replicas_[rng() % replicas_.size()];
        const std::string name = absl::StrCat("h", op.group);
        v1::Group out;
        grpc::Status s;
        op.start = absl::Now();
        if (op.kind == HistoryOp::kAdd) {
          v1::AddBackendsRequest req;
          req.set_group(name);
          req.add_backends()->set_address(op.address);
          s = r.admin->AddBackends(
              Context(::aside::testing::kFleetAdminToken).get(), req, &out);
        } else if (op.kind == HistoryOp::kRemove) {
          v1::RemoveBackendsRequest req;
          req.set_group(name);
          req.add_addresses(op.address);
          s = r.admin->RemoveBackends(
              Context(::aside::testing::kFleetAdminToken).get(), req, &out);
        } else {
          v1::DrainBackendsRequest req;
          req.set_group(name);
          req.add_addresses(op.address);
          req.set_drained(op.kind == HistoryOp::kDrain);
          s = r.admin->DrainBackends(
              Context(::aside::testing::kFleetAdminToken).get(), req, &out);
        }
        op.end = absl::Now();
        op.code = s.error_code();
        if (s.ok()) {
          op.revision = out.store_revision();
          for (const v1::Backend& b : out.backends()) {
            op.reply[b.address()] = b.drained();
          }
        }
        ops[w].push_back(op);
      }
    });
  }
  for (std::thread& t : writers) {
    t.join();
  }
  Drain();
  auto channel = grpc::CreateChannel(cluster_->endpoint(0),
                                     grpc::InsecureChannelCredentials());
  auto kv = etcdserverpb::KV::NewStub(channel);
  int acknowledged = 0, refused = 0, aborted = 0;
  size_t folded = 0;
  for (int g = 0; g < kGroups; ++g) {
    // The stored versions of the group, decoded.
    std::vector<std::pair<int64_t, StoredBackends>> versions;
    for (const auto& [revision, value] :
         KeyHistory(*kv, absl::StrCat(kPrefix, "groups/h", g))) {
      v1::Group stored;
      ASSERT_TRUE(
          google::protobuf::util::JsonStringToMessage(value, &stored).ok());
      StoredBackends backends;
      for (const v1::Backend& b : stored.backends()) {
        backends[b.address()] = b.drained();
      }
      versions.emplace_back(revision, std::move(backends));
    }
    ASSERT_FALSE(versions.empty());
    std::map<int64_t, std::vector<const HistoryOp*>> by_revision;
    std::vector<const HistoryOp*> indeterminate, group_ops;
    for (const auto& writer : ops) {
      for (const HistoryOp& op : writer) {
        if (op.group != g) continue;
        group_ops.push_back(&op);
        if (op.code == grpc::StatusCode::OK) {
          ++acknowledged;
          ASSERT_GT(op.revision, 0) << Describe(op);
          by_revision[op.revision].push_back(&op);
        } else if (op.code == grpc::StatusCode::NOT_FOUND ||
                   op.code == grpc::StatusCode::ALREADY_EXISTS) {
          ++refused;
        } else if (op.code == grpc::StatusCode::ABORTED) {
          ++aborted;
        } else {
          indeterminate.push_back(&op);
        }
      }
    }
    // 1. Every version after the first is the writes acknowledged at its
    // revision (several when one replica folded them into one write),
    // applied to the version before it; or one write whose reply was lost.
    // A write computed from an older version shows here as a version that
    // undoes someone else's change.
    for (size_t i = 1; i < versions.size(); ++i) {
      const auto& [revision, after] = versions[i];
      const StoredBackends& before = versions[i - 1].second;
      auto acked = by_revision.find(revision);
      if (acked != by_revision.end()) {
        folded += acked->second.size() - 1;
        bool explained = SomeOrderGives(acked->second, before, after);
        for (const HistoryOp* op : indeterminate) {
          if (explained) break;
          std::vector<const HistoryOp*> with = acked->second;
          with.push_back(op);
          explained = SomeOrderGives(with, before, after);
        }
        std::string which;
        for (const HistoryOp* op : acked->second) {
          absl::StrAppend(&which, " [", Describe(*op), "]");
        }
        EXPECT_TRUE(explained)
            << "h" << g << " revision " << revision << " is not" << which
            << " applied to revision " << versions[i - 1].first;
        by_revision.erase(acked);
        continue;
      }
      bool explained = false;
      for (const HistoryOp* op : indeterminate) {
        explained = explained || SomeOrderGives({op}, before, after);
      }
      EXPECT_TRUE(explained) << "h" << g << " revision " << revision
                             << " was written by no operation";
    }
    // 0. A reply describes the group as its write stored it, at its own
    // revision: never with a later writer's change that may undo it.
    for (const HistoryOp* op : group_ops) {
      if (op->code != grpc::StatusCode::OK) continue;
      auto stored =
          std::find_if(versions.begin(), versions.end(),
                       [&](const auto& v) { return v.first == op->revision; });
      if (stored != versions.end()) {
        EXPECT_EQ(op->reply, stored->second)
            << "the reply is not the group at its revision: " << Describe(*op);
      }
    }
    // 2. Every acknowledged write is in the history.
    for (const auto& [revision, acked] : by_revision) {
      for (const HistoryOp* op : acked) {
        ADD_FAILURE() << "acknowledged but not stored: " << Describe(*op);
      }
    }
    // 3. A refusal (NOT_FOUND, ALREADY_EXISTS) was true of a version the
    // group held while the call ran: not older than every write
    // acknowledged before it started, not newer than any acknowledged
    // write that started after it ended.
    for (const HistoryOp* op : group_ops) {
      if (op->code != grpc::StatusCode::NOT_FOUND &&
          op->code != grpc::StatusCode::ALREADY_EXISTS) {
        continue;
      }
      int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
      for (const HistoryOp* other : group_ops) {
        if (other->code != grpc::StatusCode::OK) continue;
        if (other->end < op->start) lo = std::max(lo, other->revision);
        if (other->start > op->end) hi = std::min(hi, other->revision);
      }
      bool justified = false;
      for (size_t i = 0; i < versions.size(); ++i) {
        const int64_t next = i + 1 < versions.size()
                                 ? versions[i + 1].first
                                 : std::numeric_limits<int64_t>::max();
        // Version i was current over [revision_i, next).
        if (next <= lo || versions[i].first >= hi) continue;
        justified = justified || !ApplyOp(*op, versions[i].second).has_value();
      }
      EXPECT_TRUE(justified)
          << Describe(*op) << ": no version current during the call says so";
    }
  }
  // Most writes are acknowledged: the commuting ones are retried on the
  // stored value rather than ABORTED.
  EXPECT_GT(acknowledged, kWriters * kOpsPerWriter / 3)
      << "refused " << refused << ", aborted " << aborted;
  RecordProperty("folded", static_cast<int>(folded));
}

}  // namespace
}  // namespace aside
