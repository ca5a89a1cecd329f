// The fleet's shared load view, in process: LoadAggregator's export and
// merge (a peer's sources weigh in like its own reporters, bounded
// influence holds across replicas, nothing is re-shared, a peer that
// leaves stops counting, bad peer entries are refused with the field), and
// the LoadView encoding (only what changed, ids for keys).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "server/config/config.h"
#include "server/config_check.h"
#include "server/load/load_aggregator.h"
#include "server/load/load_view_codec.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

constexpr char kBackend[] = "10.0.0.1:80";

bool Known(const std::string& group, const std::string& address) {
  return group == "web" && (address == kBackend || address == "10.0.0.2:80");
}

// One replica's aggregator, its listener's log, on a shared clock.
struct Replica {
  explicit Replica(const Clock* clock, double share = 1.0)
      : loads(clock, absl::Seconds(10), Known, share) {
    loads.set_listener(
        [this](const LoadAggregator::Accepted& a) { heard.push_back(a); });
  }
  LoadAggregator loads;
  std::vector<LoadAggregator::Accepted> heard;
};

LoadObservation Obs(const std::string& source, uint64_t requests,
                    absl::Duration latency_sum, uint64_t in_flight = 0) {
  LoadObservation o;
  o.source = source;
  o.group = "web";
  o.address = kBackend;
  o.requests = requests;
  o.latency_sum_nanos = absl::ToInt64Nanoseconds(latency_sum);
  o.in_flight = in_flight;
  return o;
}

// What `from` would send `to` as a snapshot, applied.
std::vector<std::pair<size_t, std::string>> Share(Replica& from, Replica& to,
                                                  const std::string& peer) {
  PeerLoadUpdate u;
  u.snapshot = true;
  LocalLoads l = from.loads.ExportLocal();
  u.loads = std::move(l.sources);
  u.calls = std::move(l.calls);
  return to.loads.ApplyPeer(peer, u);
}

class LoadViewTest : public ::testing::Test {
 protected:
  FakeClock clock_;
};

TEST_F(LoadViewTest, PeerReportsCountOnTheOtherReplica) {
  Replica a(&clock_), b(&clock_);
  ASSERT_OK(a.loads.Add("pod-1", Obs("tok", 0, absl::ZeroDuration(), 3)));
  EXPECT_THAT(Share(a, b, "A"), IsEmpty());  // the baseline
  clock_.Advance(absl::Seconds(1));
  ASSERT_OK(a.loads.Add("pod-1", Obs("tok", 100, absl::Seconds(5), 4)));
  EXPECT_THAT(Share(a, b, "A"), IsEmpty());

  const LoadSnapshot s = b.loads.Snapshot("web", kBackend);
  EXPECT_EQ(s.window_requests, 100u);
  EXPECT_EQ(s.mean_latency, absl::Milliseconds(50));
  EXPECT_EQ(s.reporters, 1u);
  EXPECT_EQ(s.in_flight, 4u);
  // B's load models heard of it with the fleet's latency.
  ASSERT_THAT(b.heard, SizeIs(1));
  EXPECT_EQ(b.heard[0].new_requests, 100u);
  EXPECT_EQ(b.heard[0].mean_latency, absl::Milliseconds(50));
  // What B learnt from A is not B's to share: no echo.
  EXPECT_THAT(b.loads.ExportLocal().sources, IsEmpty());
  EXPECT_THAT(b.loads.Peers(), SizeIs(1));
}

TEST_F(LoadViewTest, ALiarOnTwoReplicasIsStillOneSource) {
  // Four honest sources report 10 ms to B; "liar" reports 5 s through A
  // and through B with far more requests. Capped at a quarter of the
  // weight, the liar cannot move B's median off 10 ms.
  Replica a(&clock_), b(&clock_, 0.25);
  for (int round = 0; round < 2; ++round) {
    const uint64_t n = round * 100;
    for (int i = 0; i < 4; ++i) {
      ASSERT_OK(b.loads.Add(
          absl::StrCat("honest-", i),
          Obs(absl::StrCat("h", i), n, n * absl::Milliseconds(10))));
    }
    ASSERT_OK(b.loads.Add("liar-b",
                          Obs("liar", n * 100, n * 100 * absl::Seconds(5))));
    ASSERT_OK(a.loads.Add("liar-a",
                          Obs("liar", n * 100, n * 100 * absl::Seconds(5))));
    Share(a, b, "A");
    clock_.Advance(absl::Seconds(1));
  }
  ASSERT_FALSE(b.heard.empty());
  EXPECT_EQ(b.heard.back().mean_latency, absl::Milliseconds(10));
  // One source "liar" on two replicas: B's view sees 6 reporters (4 honest,
  // liar-b, A's liar entry) in 5 sources.
  EXPECT_EQ(b.loads.Snapshot("web", kBackend).reporters, 6u);
}

TEST_F(LoadViewTest, APeerThatLeavesStopsCounting) {
  Replica a(&clock_), b(&clock_);
  ASSERT_OK(a.loads.Add("pod-1", Obs("tok", 0, absl::ZeroDuration(), 7)));
  Share(a, b, "A");
  EXPECT_EQ(b.loads.Snapshot("web", kBackend).in_flight, 7u);
  b.loads.RemovePeer("A");
  const LoadSnapshot s = b.loads.Snapshot("web", kBackend);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.reporters, 0u);
  EXPECT_THAT(b.loads.Peers(), IsEmpty());
}

TEST_F(LoadViewTest, PeerUtilisationAndFailuresReachZonesAndOutliers) {
  Replica b(&clock_);
  PeerLoadUpdate u;
  u.loads.push_back({.group = "web",
                     .address = kBackend,
                     .source = "s",
                     .requests = 10,
                     .reporters = 1,
                     .utilization = 0.9});
  EXPECT_THAT(b.loads.ApplyPeer("A", u), IsEmpty());
  clock_.Advance(absl::Seconds(2));
  // Unchanged values are not resent; the peer's heartbeat keeps them fresh.
  EXPECT_THAT(b.loads.ApplyPeer("A", PeerLoadUpdate{}), IsEmpty());
  LoadSnapshot s = b.loads.Snapshot("web", kBackend);
  ASSERT_TRUE(s.utilization.has_value());
  EXPECT_DOUBLE_EQ(*s.utilization, 0.9);
  EXPECT_EQ(s.utilization_at, clock_.WallNow());
  // Ten failed requests, failing in a row: outlier detection hears a
  // corroborated failing batch.
  u.loads[0].requests = 20;
  u.loads[0].failures = 10;
  u.loads[0].consecutive_failures = 10;
  EXPECT_THAT(b.loads.ApplyPeer("A", u), IsEmpty());
  ASSERT_THAT(b.heard, SizeIs(1));
  EXPECT_EQ(b.heard[0].new_failures, 10u);
  EXPECT_TRUE(b.heard[0].failed);
  EXPECT_TRUE(b.heard[0].failures_corroborated);
  b.loads.RemovePeer("A");
  EXPECT_FALSE(b.loads.Snapshot("web", kBackend).utilization.has_value());
}

TEST_F(LoadViewTest, ASnapshotReplacesWhatThePeerSaidBefore) {
  Replica b(&clock_);
  PeerLoadUpdate u;
  u.snapshot = true;
  u.loads.push_back({.group = "web",
                     .address = kBackend,
                     .source = "s1",
                     .in_flight = 2,
                     .reporters = 1});
  u.loads.push_back({.group = "web",
                     .address = "10.0.0.2:80",
                     .source = "s1",
                     .in_flight = 5,
                     .reporters = 1});
  EXPECT_THAT(b.loads.ApplyPeer("A", u), IsEmpty());
  u.loads.erase(u.loads.begin() + 1);
  EXPECT_THAT(b.loads.ApplyPeer("A", u), IsEmpty());
  EXPECT_EQ(b.loads.Snapshot("web", "10.0.0.2:80").in_flight, 0u);
  EXPECT_EQ(b.loads.Snapshot("web", kBackend).in_flight, 2u);
  // An update that is no snapshot removes by key.
  PeerLoadUpdate removal;
  removal.removed.push_back({"web", kBackend, "s1"});
  EXPECT_THAT(b.loads.ApplyPeer("A", removal), IsEmpty());
  EXPECT_EQ(b.loads.Snapshot("web", kBackend).in_flight, 0u);
}

TEST_F(LoadViewTest, BadPeerEntriesAreRefusedWithTheField) {
  Replica b(&clock_);
  PeerLoadUpdate u;
  u.loads.push_back({.group = "web",
                     .address = kBackend,
                     .source = "s",
                     .requests = 1,
                     .failures = 2});
  u.loads.push_back({.group = "web", .address = "10.9.9.9:1", .source = "s"});
  u.loads.push_back({.group = "web",
                     .address = kBackend,
                     .source = "s",
                     .latency_sum_nanos = -1});
  u.loads.push_back(
      {.group = "web", .address = kBackend, .source = "s", .utilization = NAN});
  u.loads.push_back({.group = "web", .address = kBackend, .source = ""});
  const auto rejected = b.loads.ApplyPeer("A", u);
  ASSERT_THAT(rejected, SizeIs(5));
  EXPECT_THAT(rejected[0].second, HasSubstr("failures: 2 exceeds requests"));
  EXPECT_THAT(rejected[1].second, HasSubstr("address: 10.9.9.9:1 is not"));
  EXPECT_THAT(rejected[2].second, HasSubstr("latency_sum_nanos: negative"));
  EXPECT_THAT(rejected[3].second, HasSubstr("utilization.value"));
  EXPECT_THAT(rejected[4].second, HasSubstr("source: required"));
  EXPECT_EQ(b.loads.Snapshot("web", kBackend).reporters, 0u);

  // Counters that grow failures faster than requests are refused; ones
  // that go backwards start a new baseline.
  PeerLoadUpdate good;
  good.loads.push_back({.group = "web",
                        .address = kBackend,
                        .source = "s",
                        .requests = 10,
                        .failures = 0});
  EXPECT_THAT(b.loads.ApplyPeer("A", good), IsEmpty());
  good.loads[0].requests = 11;
  good.loads[0].failures = 5;
  ASSERT_THAT(b.loads.ApplyPeer("A", good), SizeIs(1));
  good.loads[0].requests = 3;
  good.loads[0].failures = 0;
  EXPECT_THAT(b.loads.ApplyPeer("A", good), IsEmpty());
  EXPECT_EQ(b.loads.Snapshot("web", kBackend).window_requests, 0u);
}

TEST_F(LoadViewTest, GroupCallsMergeIntoClientStatsAndTheRate) {
  Replica a(&clock_), b(&clock_);
  ASSERT_OK(a.loads.AddClientStats("web", 10, 10, 0, 10, {{"drop/x", 2}}));
  Share(a, b, "A");  // baseline for the rate
  ASSERT_OK(a.loads.AddClientStats("web", 50, 50, 0, 50, {}));
  a.loads.AddDroppedCalls("web", 20);
  Share(a, b, "A");
  const ClientStatsTotals t = b.loads.ClientStats("web");
  EXPECT_EQ(t.calls_started, 60u);
  EXPECT_EQ(t.dropped.at("drop/x"), 2u);
  EXPECT_DOUBLE_EQ(b.loads.GroupRequestsPerSecond("web"), 7.0);  // 70 / 10 s
  b.loads.RemovePeer("A");
  EXPECT_EQ(b.loads.ClientStats("web").calls_started, 0u);
}

// The codec: ids name entries after their first message; unchanged
// entries cost nothing.
TEST(LoadViewCodecTest, OnlyWhatChangedIsSent) {
  ExportIds ids;
  LocalLoads first;
  first.sources.push_back({.group = "web",
                           .address = "a:1",
                           .source = "s",
                           .requests = 1,
                           .reporters = 1});
  first.sources.push_back({.group = "web",
                           .address = "b:1",
                           .source = "s",
                           .requests = 1,
                           .reporters = 1});
  first.calls.push_back({.group = "web", .calls_started = 3});
  auto e1 = ids.Next(first);
  const v1::LoadViewUpdate snapshot = DiffExports(nullptr, *e1);
  EXPECT_TRUE(snapshot.snapshot());
  ASSERT_EQ(snapshot.loads_size(), 2);
  EXPECT_EQ(snapshot.loads(0).group(), "web");
  EXPECT_EQ(snapshot.group_calls_size(), 1);

  LocalLoads second = first;
  second.sources[1].requests = 5;
  second.sources.erase(second.sources.begin());
  second.sources.push_back({.group = "web", .address = "c:1", .source = "s"});
  auto e2 = ids.Next(second);
  const v1::LoadViewUpdate delta = DiffExports(e1.get(), *e2);
  EXPECT_FALSE(delta.snapshot());
  EXPECT_THAT(delta.removed(), ElementsAre(snapshot.loads(0).id()));
  ASSERT_EQ(delta.loads_size(), 2);
  EXPECT_EQ(delta.loads(0).id(), snapshot.loads(1).id());
  EXPECT_EQ(delta.loads(0).group(), "");  // known by its id
  EXPECT_EQ(delta.loads(0).requests(), 5u);
  EXPECT_EQ(delta.loads(1).address(), "c:1");
  EXPECT_EQ(delta.group_calls_size(), 0);

  // Nothing changed: an empty heartbeat.
  auto e3 = ids.Next(second);
  const v1::LoadViewUpdate heartbeat = DiffExports(e2.get(), *e3);
  EXPECT_EQ(heartbeat.loads_size(), 0);
  EXPECT_EQ(heartbeat.removed_size(), 0);

  // The subscriber reads them back into keys.
  LoadViewDecoder decoder;
  std::vector<std::string> rejected;
  std::vector<int> index;
  PeerLoadUpdate d1 = decoder.Decode(snapshot, &rejected, &index);
  EXPECT_TRUE(d1.snapshot);
  ASSERT_THAT(d1.loads, SizeIs(2));
  PeerLoadUpdate d2 = decoder.Decode(delta, &rejected, &index);
  EXPECT_THAT(rejected, IsEmpty());
  ASSERT_THAT(d2.loads, SizeIs(2));
  EXPECT_EQ(d2.loads[0].address, "b:1");
  EXPECT_EQ(d2.loads[0].requests, 5u);
  ASSERT_THAT(d2.removed, SizeIs(1));
  EXPECT_EQ(d2.removed[0].address, "a:1");
}

TEST(LoadViewCodecTest, UnknownIdsAreRejectedWithTheField) {
  LoadViewDecoder decoder;
  v1::LoadViewUpdate u;
  u.add_loads()->set_id(7);
  v1::SourceLoad* partial = u.add_loads();
  partial->set_id(8);
  partial->set_group("web");
  u.add_loads();  // no id
  u.add_removed(9);
  std::vector<std::string> rejected;
  std::vector<int> index;
  PeerLoadUpdate d = decoder.Decode(u, &rejected, &index);
  EXPECT_THAT(d.loads, IsEmpty());
  EXPECT_THAT(rejected,
              ElementsAre(HasSubstr("removed[0]: unknown entry 9"),
                          HasSubstr("loads[0].id: unknown entry 7"),
                          HasSubstr("loads[1].group, address and source"),
                          HasSubstr("loads[2].id: required")));
}

TEST(LoadViewCodecTest, OrcaReportsAreSentWhenNewAndCheckedWhenRead) {
  auto share = [](const std::string& address, double cpu, uint64_t seq) {
    OrcaShare s;
    s.address = address;
    s.load.qps = 100;
    s.load.cpu_utilization = cpu;
    s.seq = seq;
    s.owner = true;
    return s;
  };
  ExportIds ids;
  LocalLoads first;
  first.orca = {share("10.0.0.1:80", 0.2, 1), share("10.0.0.2:80", 0.4, 1)};
  auto e1 = ids.Next(first);
  LocalLoads second;
  second.orca = {share("10.0.0.1:80", 0.2, 1), share("10.0.0.2:80", 0.5, 2)};
  auto e2 = ids.Next(second);
  const v1::LoadViewUpdate snapshot = DiffExports(nullptr, *e1);
  ASSERT_EQ(snapshot.orca_size(), 2);
  const v1::LoadViewUpdate delta = DiffExports(e1.get(), *e2);
  ASSERT_EQ(delta.orca_size(), 1);  // only the new report
  EXPECT_EQ(delta.orca(0).address(), "10.0.0.2:80");
  EXPECT_EQ(delta.orca(0).seq(), 2u);
  EXPECT_TRUE(delta.orca(0).owner());

  LoadViewDecoder decoder;
  std::vector<std::string> rejected;
  std::vector<int> index;
  PeerLoadUpdate d = decoder.Decode(delta, &rejected, &index);
  ASSERT_THAT(d.orca, SizeIs(1));
  EXPECT_EQ(d.orca[0], share("10.0.0.2:80", 0.5, 2));
  EXPECT_THAT(rejected, IsEmpty());

  // A peer's bad values are refused with the field, like a backend's.
  v1::LoadViewUpdate bad;
  v1::OrcaReport* r = bad.add_orca();
  r->set_address("10.0.0.3:80");
  r->set_qps(-1);
  bad.add_orca()->set_qps(1);  // no address
  d = decoder.Decode(bad, &rejected, &index);
  EXPECT_THAT(d.orca, IsEmpty());
  EXPECT_THAT(rejected, ElementsAre(HasSubstr("orca[0].rps_fractional"),
                                    HasSubstr("orca[1].address: required")));
}

TEST(LoadViewConfigTest, FleetKeysAreCheckedWithTheirLine) {
  EXPECT_THAT(ParseConfig("fleet:\n  load_share_interval: 10ms\n", "t.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.yaml:2:24: fleet.load_share_interval: out "
                                 "of range 50ms..1m")));
  EXPECT_THAT(ParseConfig("fleet: {peers: [nohost]}\n", "t.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.yaml:1:17: fleet.peers[0]")));
  EXPECT_THAT(ParseConfig("fleet: {peer: [a:1]}\n", "t.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("peer")));
  ASSERT_OK_AND_ASSIGN(
      ServerConfig c,
      ParseConfig("fleet: {peers: [10.0.0.1:50051], load_share_interval: "
                  "250ms, peer_token_file: /t}\n",
                  "t.yaml"));
  EXPECT_THAT(c.fleet_load.peers, ElementsAre("10.0.0.1:50051"));
  EXPECT_EQ(c.fleet_load.load_share_interval, absl::Milliseconds(250));
  EXPECT_EQ(c.fleet_load.peer_token_file, "/t");
}

TEST(LoadViewConfigTest, CheckConfigNamesABadPeerTokenFile) {
  aside::testing::TempDir dir;
  ServerConfig c;
  c.fleet_load.peer_token_file = dir.path() + "/missing";
  EXPECT_THAT(CheckReferencedFiles(c),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(dir.path() + "/missing")));
  c.fleet_load.peer_token_file = dir.WriteFile("empty", "\n");
  EXPECT_THAT(CheckReferencedFiles(c),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("fleet peer token file is empty")));
  c.fleet_load.peer_token_file = dir.WriteSecret("token", "s3cret-peer\n");
  EXPECT_OK(CheckReferencedFiles(c));
}

// Two in-process servers: peers given by SetPeers, as the fleet's
// membership gives them.
class LoadViewPeersTest : public ::testing::Test {
 protected:
  std::unique_ptr<AsideServer> Server(const std::string& name,
                                      const std::string& extra = "") {
    absl::StatusOr<ServerConfig> config = ParseConfig(
        absl::StrCat("state_dir: ", dir_.path(), "/", name, "\n", extra, R"(
listen: 127.0.0.1:0
metrics: ""
load_reports: {auth: open}
fleet: {load_share_interval: 100ms}
groups:
  - name: web
    health_check: {kind: none}
    backends: [10.0.0.1:80]
)"),
        "t.yaml");
    EXPECT_OK(config.status());
    absl::StatusOr<std::unique_ptr<AsideServer>> s =
        AsideServer::Create(*config);
    EXPECT_OK(s.status());
    EXPECT_OK((*s)->Start());
    return *std::move(s);
  }
  static std::string Address(AsideServer& s) {
    return absl::StrCat("127.0.0.1:", s.grpc_port());
  }
  template <typename F>
  static bool Eventually(F done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    return done();
  }

  aside::testing::TempDir dir_;
};

TEST_F(LoadViewPeersTest, MembershipPeersMergeAndLeaveAtOnce) {
  std::unique_ptr<AsideServer> x = Server("x");
  std::unique_ptr<AsideServer> y = Server("y");
  ASSERT_OK(x->loads().Add("pod", Obs("tok", 0, absl::ZeroDuration(), 3)));
  // Y's own id in the list is skipped; X is subscribed to.
  y->load_view_peers()->SetPeers(
      {{.id = x->replica_id(), .address = Address(*x)},
       {.id = y->replica_id(), .address = Address(*y)}});
  ASSERT_THAT(y->load_view_peers()->links(), SizeIs(1));
  ASSERT_TRUE(Eventually(
      [&] { return y->loads().Snapshot("web", kBackend).in_flight == 3; }));
  EXPECT_EQ(y->load_view_peers()->links()[0].id, x->replica_id());
  EXPECT_THAT(
      y->metrics().Render(),
      HasSubstr(absl::StrCat("aside_fleet_load_view_age_seconds{peer=\"",
                             x->replica_id(), "\"}")));
  // X left the live set: its load is forgotten at once.
  y->load_view_peers()->SetPeers({});
  EXPECT_EQ(y->loads().Snapshot("web", kBackend).in_flight, 0u);
  EXPECT_THAT(y->loads().Peers(), IsEmpty());
}

TEST_F(LoadViewPeersTest, AStaticPeerThatIsThisReplicaIsDropped) {
  std::unique_ptr<AsideServer> x = Server("x");
  x->load_view_peers()->SetPeers({{.id = "", .address = Address(*x)}});
  ASSERT_TRUE(Eventually([&] {
    auto links = x->load_view_peers()->links();
    return links.size() == 1 && links[0].self;
  }));
  EXPECT_FALSE(x->load_view_peers()->links()[0].connected);
  EXPECT_THAT(x->loads().Peers(), IsEmpty());
  // No age series for a peer that is not one.
  EXPECT_THAT(x->metrics().Render(),
              Not(HasSubstr("aside_fleet_load_view_age_seconds{")));
}

TEST_F(LoadViewPeersTest, AMissingPeerTokenFileFailsStartWithItsPath) {
  absl::StatusOr<ServerConfig> config = ParseConfig(
      absl::StrCat("state_dir: ", dir_.path(),
                   "\nfleet: {peer_token_file: /nonexistent/peer-token}\n"),
      "t.yaml");
  ASSERT_OK(config.status());
  EXPECT_THAT(AsideServer::Create(*config),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("/nonexistent/peer-token")));
}

}  // namespace
}  // namespace aside::server
