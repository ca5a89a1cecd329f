// DnsDiscovery against a real dnsmasq on loopback (and a scripted server for
// the failures dnsmasq will not produce on demand). Every test names its
// servers: nothing here reads /etc/resolv.conf or leaves 127.0.0.0/8 / ::1.
#include "server/discovery/dns_discovery.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/sync.h"
#include "tests/discovery/dns_test_servers.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::Dnsmasq;
using ::aside::testing::FakeDnsServer;
using ::aside::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Answer = FakeDnsServer::Answer;
using Update = absl::StatusOr<std::vector<Backend>>;

constexpr absl::Duration kWait = absl::Seconds(10);

std::vector<std::string> Addresses(const std::vector<Backend>& members) {
  std::vector<std::string> out;
  for (const Backend& b : members) {
    out.push_back(b.address);
  }
  return out;
}

std::string Describe(const Update& update) {
  if (!update.ok()) {
    return update.status().ToString();
  }
  return absl::StrCat("[", absl::StrJoin(Addresses(*update), ", "), "]");
}

// Collects what a watch reports, for waiting on from the test thread.
class Recorder {
 public:
  DnsMembersCallback Callback() {
    return [this](const Update& update) {
      MutexLock lock(&mu_);
      updates_.push_back(update);
    };
  }

  // Waits for an update after the last one returned by a Wait* call that
  // satisfies `match`; skips the others.
  absl::StatusOr<Update> WaitFor(
      const std::function<bool(const Update&)>& match,
      absl::Duration timeout = kWait) {
    MutexLock lock(&mu_);
    const auto deadline =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(timeout);
    while (true) {
      for (; next_ < updates_.size(); ++next_) {
        if (match(updates_[next_])) {
          return updates_[next_++];
        }
      }
      if (mu_.AwaitUntil(
              [&] {
                mu_.AssertHeld();
                return next_ < updates_.size();
              },
              deadline)) {
        continue;
      }
      std::vector<std::string> seen;
      for (const Update& u : updates_) {
        seen.push_back(Describe(u));
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "no matching update; seen: ", absl::StrJoin(seen, " | ")));
    }
  }

  absl::StatusOr<std::vector<Backend>> WaitForMembers(
      std::vector<std::string> addresses, absl::Duration timeout = kWait) {
    absl::StatusOr<Update> update = WaitFor(
        [&](const Update& u) { return u.ok() && Addresses(*u) == addresses; },
        timeout);
    if (!update.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("waiting for [", absl::StrJoin(addresses, ", "),
                       "]: ", update.status().message()));
    }
    return **update;
  }

  absl::StatusOr<absl::Status> WaitForError(absl::Duration timeout = kWait) {
    absl::StatusOr<Update> update =
        WaitFor([](const Update& u) { return !u.ok(); }, timeout);
    if (!update.ok()) {
      return update.status();
    }
    return update->status();
  }

  std::vector<Update> updates() const {
    MutexLock lock(&mu_);
    return updates_;
  }
  size_t count() const {
    MutexLock lock(&mu_);
    return updates_.size();
  }

 private:
  mutable Mutex mu_;
  std::vector<Update> updates_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
};

// Waits (bounded) until `done` holds, polling a status that has no event.
bool Eventually(const std::function<bool()>& done,
                absl::Duration timeout = kWait) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) {
      return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return done();
}

DnsSpec HostSpec(std::string name, uint32_t port,
                 absl::Duration interval = absl::Hours(1)) {
  DnsSpec spec;
  spec.name = std::move(name);
  spec.port = port;
  spec.interval = interval;
  return spec;
}

DnsSpec SrvSpec(std::string name, absl::Duration interval = absl::Hours(1)) {
  DnsSpec spec;
  spec.name = std::move(name);
  spec.srv = true;
  spec.interval = interval;
  return spec;
}

DnsDiscoveryOptions OptionsFor(std::string server) {
  DnsDiscoveryOptions options;
  options.servers = {std::move(server)};
  options.query_timeout = absl::Milliseconds(500);
  options.tries = 2;
  options.min_interval = absl::Milliseconds(50);
  options.seed = 42;
  return options;
}

std::string Render(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

class DnsDiscoveryTest : public ::testing::Test {
 protected:
  void StartDnsmasq(std::string hosts, std::vector<std::string> args = {}) {
    Dnsmasq::Options options;
    options.hosts = std::move(hosts);
    options.args = std::move(args);
    auto dnsmasq = Dnsmasq::Start(std::move(options));
    ASSERT_TRUE(dnsmasq.ok()) << dnsmasq.status();
    dnsmasq_ = *std::move(dnsmasq);
  }
  void CreateDiscovery(DnsDiscoveryOptions options) {
    auto discovery = DnsDiscovery::Create(std::move(options), registry_);
    ASSERT_TRUE(discovery.ok()) << discovery.status();
    discovery_ = *std::move(discovery);
  }
  void CreateDiscovery() { CreateDiscovery(OptionsFor(dnsmasq_->server())); }
  void StartFake(FakeDnsServer::Handler handler) {
    auto fake = FakeDnsServer::Start(std::move(handler));
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = *std::move(fake);
  }
  // Recorders outlive the discovery (declared before it): its thread may
  // still call them while a test body unwinds.
  Recorder& NewRecorder() { return recorders_.emplace_back(); }

  // Everything the discovery's thread uses is declared before it.
  prometheus::Registry registry_;
  FakeClock fake_clock_;
  std::deque<Recorder> recorders_;
  std::unique_ptr<Dnsmasq> dnsmasq_;
  std::unique_ptr<FakeDnsServer> fake_;
  std::unique_ptr<DnsDiscovery> discovery_;
};

constexpr char kWebHosts[] =
    "10.0.0.2 web.test\n"
    "10.0.0.1 web.test\n"
    "fd00::1 web.test\n";

TEST_F(DnsDiscoveryTest, FollowsAddressRecordsOnItsInterval) {
  StartDnsmasq(kWebHosts);
  CreateDiscovery();
  Recorder& recorder = NewRecorder();
  DnsSpec spec = HostSpec("web.test", 8080, absl::Milliseconds(200));
  spec.weight = 300;
  spec.locality = {"eu", "eu-1a", ""};
  ASSERT_OK_AND_ASSIGN(DnsWatchId id,
                       discovery_->Watch("web", spec, recorder.Callback()));

  // Both families, sorted, with the spec's port, weight and locality.
  ASSERT_OK_AND_ASSIGN(
      std::vector<Backend> members,
      recorder.WaitForMembers(
          {"10.0.0.1:8080", "10.0.0.2:8080", "[fd00::1]:8080"}));
  for (const Backend& b : members) {
    EXPECT_EQ(b.weight, 300u);
    EXPECT_EQ(b.locality, spec.locality);
    EXPECT_FALSE(b.drained);
  }

  // Additions and removals show up on the interval: no ResolveNow here.
  ASSERT_OK(dnsmasq_->SetHosts(std::string(kWebHosts) +
                               "10.0.0.3 web.test\nfd00::2 web.test\n"));
  ASSERT_OK(
      recorder
          .WaitForMembers({"10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080",
                           "[fd00::1]:8080", "[fd00::2]:8080"})
          .status());
  ASSERT_OK(dnsmasq_->SetHosts("10.0.0.3 web.test\n"));
  ASSERT_OK(recorder.WaitForMembers({"10.0.0.3:8080"}).status());

  // Only changes were reported: no two consecutive updates are equal.
  const std::vector<Update> updates = recorder.updates();
  for (size_t i = 1; i < updates.size(); ++i) {
    EXPECT_NE(Describe(updates[i]), Describe(updates[i - 1])) << i;
  }
  std::optional<DnsWatchStatus> status = discovery_->Status(id);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->members, 1u);
  EXPECT_EQ(status->group, "web");
  EXPECT_GE(status->resolutions, 3u);
  EXPECT_OK(status->last_error);
}

TEST_F(DnsDiscoveryTest, ReportsChangesNotEveryResolution) {
  StartDnsmasq(kWebHosts);
  FakeClock& clock = fake_clock_;
  DnsDiscoveryOptions options = OptionsFor(dnsmasq_->server());
  options.clock = &clock;  // time stands still: only ResolveNow resolves
  CreateDiscovery(options);
  Recorder& recorder = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId id,
      discovery_->Watch("web", HostSpec("web.test", 80), recorder.Callback()));
  ASSERT_OK(
      recorder.WaitForMembers({"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"})
          .status());
  for (uint64_t n = 2; n <= 4; ++n) {
    discovery_->ResolveNow(id);
    ASSERT_TRUE(
        Eventually([&] { return discovery_->Status(id)->resolutions >= n; }));
  }
  EXPECT_EQ(recorder.count(), 1u);

  ASSERT_OK(dnsmasq_->SetHosts("10.0.0.1 web.test\n"));
  discovery_->ResolveNow(id);
  ASSERT_OK(recorder.WaitForMembers({"10.0.0.1:80"}).status());
  EXPECT_EQ(recorder.count(), 2u);

  std::optional<DnsWatchStatus> status = discovery_->Status(id);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->resolutions, 5u);
  EXPECT_EQ(status->last_success, clock.WallNow());
  EXPECT_EQ(status->last_failure, absl::InfinitePast());
  EXPECT_FALSE(status->in_flight);
  EXPECT_THAT(
      Render(registry_),
      AllOf(HasSubstr("aside_dns_resolutions_total{group=\"web\",result="
                      "\"ok\"} 5"),
            HasSubstr("aside_dns_members{group=\"web\"} 1"),
            HasSubstr("aside_dns_last_success_timestamp_seconds{group=\"web\"}"
                      " 1800000000")));
}

TEST_F(DnsDiscoveryTest, SrvRecordsGivePortsAndPriorityTiers) {
  StartDnsmasq(
      "10.1.0.1 a.test\n"
      "10.1.0.2 b.test\n"
      "fd00::b b.test\n"
      "10.1.0.9 backup.test\n",
      {"--srv-host=_http._tcp.web.test,a.test,8080,0,10",
       "--srv-host=_http._tcp.web.test,b.test,8081,0,20",
       "--srv-host=_http._tcp.web.test,backup.test,9000,10,1"});
  CreateDiscovery();
  Recorder& recorder = NewRecorder();
  DnsSpec spec = SrvSpec("_http._tcp.web.test");
  spec.weight = 7;
  ASSERT_OK_AND_ASSIGN(DnsWatchId id,
                       discovery_->Watch("web", spec, recorder.Callback()));
  // Ports from the records; the priority-10 backup is not a member; weights
  // come from the spec, not from SRV.
  ASSERT_OK_AND_ASSIGN(
      std::vector<Backend> members,
      recorder.WaitForMembers(
          {"10.1.0.1:8080", "10.1.0.2:8081", "[fd00::b]:8081"}));
  for (const Backend& b : members) {
    EXPECT_EQ(b.weight, 7u);
  }

  // A target's addresses change: the hosts file is enough.
  ASSERT_OK(
      dnsmasq_->SetHosts("10.1.0.1 a.test\n10.1.0.3 b.test\n"
                         "10.1.0.9 backup.test\n"));
  discovery_->ResolveNow(id);
  ASSERT_OK(
      recorder.WaitForMembers({"10.1.0.1:8080", "10.1.0.3:8081"}).status());

  // The records change (dnsmasq reads them at start: restart on the port).
  ASSERT_OK(
      dnsmasq_->Restart({"--srv-host=_http._tcp.web.test,a.test,9090,0,10"}));
  discovery_->ResolveNow(id);
  ASSERT_OK(recorder.WaitForMembers({"10.1.0.1:9090"}).status());
}

TEST_F(DnsDiscoveryTest, SrvFallsBackToTheNextTierWithAddresses) {
  StartDnsmasq("10.1.0.9 backup.test\n",
               {// gone.test has no address (NXDOMAIN): a dangling record.
                "--srv-host=_http._tcp.web.test,gone.test,8080,0,10",
                "--srv-host=_http._tcp.web.test,backup.test,9000,10,1",
                // Every target dangles.
                "--srv-host=_http._tcp.lost.test,gone.test,8080,0,10"});
  CreateDiscovery();
  Recorder& web = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("web", SrvSpec("_http._tcp.web.test"), web.Callback())
          .status());
  ASSERT_OK(web.WaitForMembers({"10.1.0.9:9000"}).status());

  Recorder& lost = NewRecorder();
  ASSERT_OK(
      discovery_
          ->Watch("lost", SrvSpec("_http._tcp.lost.test"), lost.Callback())
          .status());
  ASSERT_OK_AND_ASSIGN(absl::Status error, lost.WaitForError());
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kNotFound,
                              HasSubstr("_http._tcp.lost.test")));
}

TEST_F(DnsDiscoveryTest, EmptyAnswersMeanZeroMembers) {
  StartDnsmasq("10.0.0.1 web.test\n",
               {// The name exists (TXT) but has no A/AAAA/SRV records.
                "--txt-record=empty.test,hello",
                // SRV target "." : the service is decidedly not there.
                "--srv-host=_http._tcp.none.test"});
  CreateDiscovery();
  Recorder& host = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("empty", HostSpec("empty.test", 80), host.Callback())
          .status());
  ASSERT_OK(host.WaitForMembers({}).status());

  Recorder& srv = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("none", SrvSpec("_http._tcp.none.test"), srv.Callback())
          .status());
  ASSERT_OK(srv.WaitForMembers({}).status());
  // A name with A records but no SRV records: NODATA for SRV, zero members.
  Recorder& no_srv = NewRecorder();
  ASSERT_OK(discovery_->Watch("web", SrvSpec("web.test"), no_srv.Callback())
                .status());
  ASSERT_OK(no_srv.WaitForMembers({}).status());
}

TEST_F(DnsDiscoveryTest, NxdomainIsAFailureThatKeepsTheMembers) {
  StartDnsmasq(kWebHosts);
  CreateDiscovery();
  Recorder& missing = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId missing_id,
      discovery_->Watch("missing", HostSpec("missing.test", 80),
                        missing.Callback()));
  ASSERT_OK_AND_ASSIGN(absl::Status error, missing.WaitForError());
  EXPECT_THAT(
      error, StatusIs(absl::StatusCode::kNotFound,
                      AllOf(HasSubstr("missing.test"), HasSubstr("nxdomain"))));
  EXPECT_EQ(discovery_->Status(missing_id)->members, 0u);

  Recorder& web = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId id,
      discovery_->Watch("web", HostSpec("web.test", 80), web.Callback()));
  ASSERT_OK(web.WaitForMembers({"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"})
                .status());
  ASSERT_OK(dnsmasq_->SetHosts("10.9.9.9 other.test\n"));
  discovery_->ResolveNow(id);
  ASSERT_OK_AND_ASSIGN(error, web.WaitForError());
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  std::optional<DnsWatchStatus> status = discovery_->Status(id);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->members, 3u);  // kept
  EXPECT_EQ(status->consecutive_failures, 1u);
  EXPECT_THAT(status->last_error,
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  // No update with fewer members was ever reported.
  for (const Update& u : web.updates()) {
    if (u.ok()) {
      EXPECT_EQ(u->size(), 3u);
    }
  }
}

TEST_F(DnsDiscoveryTest, NxdomainAsEmptyOptionEmptiesTheGroup) {
  StartDnsmasq(kWebHosts);
  DnsDiscoveryOptions options = OptionsFor(dnsmasq_->server());
  options.nxdomain_as_empty = true;
  CreateDiscovery(options);
  Recorder& web = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId id,
      discovery_->Watch("web", HostSpec("web.test", 80), web.Callback()));
  ASSERT_OK(web.WaitForMembers({"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"})
                .status());
  ASSERT_OK(dnsmasq_->SetHosts(""));
  discovery_->ResolveNow(id);
  ASSERT_OK(web.WaitForMembers({}).status());
  EXPECT_OK(discovery_->Status(id)->last_error);
  // Counted as what the server said.
  EXPECT_THAT(Render(registry_),
              HasSubstr("aside_dns_resolutions_total{group=\"web\",result="
                        "\"nxdomain\"} 1"));
}

TEST_F(DnsDiscoveryTest, DeadServerKeepsMembersAndRecovers) {
  StartDnsmasq(kWebHosts);
  CreateDiscovery();
  Recorder& recorder = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId id,
      discovery_->Watch("web",
                        HostSpec("web.test", 80, absl::Milliseconds(100)),
                        recorder.Callback()));
  const std::vector<std::string> all = {"10.0.0.1:80", "10.0.0.2:80",
                                        "[fd00::1]:80"};
  ASSERT_OK(recorder.WaitForMembers(all).status());

  ASSERT_OK(dnsmasq_->Stop());
  ASSERT_OK_AND_ASSIGN(absl::Status error, recorder.WaitForError());
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kUnavailable,
                              HasSubstr("connection refused")));
  // It keeps failing on its interval; the error is reported once.
  ASSERT_TRUE(Eventually(
      [&] { return discovery_->Status(id)->consecutive_failures >= 3; }));
  std::optional<DnsWatchStatus> status = discovery_->Status(id);
  EXPECT_EQ(status->members, 3u);
  EXPECT_THAT(status->last_error,
              StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_GT(status->last_failure, status->last_success);
  EXPECT_EQ(recorder.count(), 2u);

  // Back on the same port: the unchanged set is reported again so the group
  // can clear its error.
  ASSERT_OK(dnsmasq_->Restart({}));
  ASSERT_OK(recorder.WaitForMembers(all).status());
  EXPECT_TRUE(Eventually(
      [&] { return discovery_->Status(id)->consecutive_failures == 0; }));
  EXPECT_OK(discovery_->Status(id)->last_error);
  EXPECT_THAT(Render(registry_),
              AllOf(HasSubstr("aside_dns_resolutions_total{group=\"web\","
                              "result=\"connection_refused\"}"),
                    HasSubstr("aside_dns_members{group=\"web\"} 3")));
}

TEST_F(DnsDiscoveryTest, ServesFromAnIpv6Server) {
  Dnsmasq::Options options;
  options.listen_address = "::1";
  options.hosts = kWebHosts;
  auto dnsmasq = Dnsmasq::Start(options);
  if (!dnsmasq.ok()) {
    GTEST_SKIP() << "no IPv6 loopback: " << dnsmasq.status();
  }
  dnsmasq_ = *std::move(dnsmasq);
  ASSERT_THAT(dnsmasq_->server(), HasSubstr("[::1]:"));
  CreateDiscovery();
  Recorder& recorder = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("web", HostSpec("web.test", 80), recorder.Callback())
          .status());
  ASSERT_OK(
      recorder.WaitForMembers({"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"})
          .status());
}

TEST_F(DnsDiscoveryTest, ManyWatchesAtOnce) {
  constexpr int kNames = 100;
  std::string hosts;
  for (int i = 0; i < kNames; ++i) {
    absl::StrAppend(&hosts, "10.2.", i / 250, ".", i % 250 + 1, " n", i,
                    ".test\n");
  }
  StartDnsmasq(hosts);
  CreateDiscovery();
  std::vector<Recorder*> recorders;
  std::vector<DnsWatchId> ids;
  for (int i = 0; i < kNames; ++i) {
    recorders.push_back(&NewRecorder());
    ASSERT_OK_AND_ASSIGN(
        DnsWatchId id, discovery_->Watch(absl::StrCat("g", i),
                                         HostSpec(absl::StrCat("n", i, ".test"),
                                                  80, absl::Milliseconds(300)),
                                         recorders.back()->Callback()));
    ids.push_back(id);
  }
  for (int i = 0; i < kNames; ++i) {
    ASSERT_OK(recorders[i]
                  ->WaitForMembers(
                      {absl::StrCat("10.2.", i / 250, ".", i % 250 + 1, ":80")})
                  .status())
        << i;
  }
  EXPECT_EQ(discovery_->List().size(), static_cast<size_t>(kNames));
  // Half go away; the rest keep resolving.
  for (int i = 0; i < kNames; i += 2) {
    discovery_->Unwatch(ids[i]);
  }
  EXPECT_EQ(discovery_->List().size(), static_cast<size_t>(kNames / 2));
  ASSERT_OK(dnsmasq_->SetHosts("10.3.0.1 n1.test\n"));
  ASSERT_OK(recorders[1]->WaitForMembers({"10.3.0.1:80"}).status());
  ASSERT_OK(recorders[3]->WaitForError().status());
  EXPECT_THAT(Render(registry_),
              AllOf(HasSubstr("aside_dns_members{group=\"g1\"}"),
                    ::testing::Not(HasSubstr("group=\"g0\""))));
}

TEST_F(DnsDiscoveryTest, UnwatchFromTheCallbackStopsIt) {
  StartDnsmasq(kWebHosts);
  CreateDiscovery();
  std::atomic<int> calls{0};
  DnsWatchId id = 0;
  std::promise<void> id_known_promise;
  std::shared_future<void> id_known = id_known_promise.get_future().share();
  std::promise<void> unwatched_promise;
  std::future<void> unwatched = unwatched_promise.get_future();
  std::atomic<bool> unwatched_set{false};
  ASSERT_OK_AND_ASSIGN(
      id, discovery_->Watch(
              "web", HostSpec("web.test", 80, absl::Milliseconds(50)),
              [&](const Update&) {
                ++calls;
                // The first callback may run before Watch returns.
                if (id_known.wait_for(absl::ToChronoNanoseconds(kWait)) !=
                    std::future_status::ready) {
                  return;
                }
                discovery_->Unwatch(id);  // must not wait for itself
                if (!unwatched_set.exchange(true)) {
                  unwatched_promise.set_value();
                }
              }));
  id_known_promise.set_value();
  ASSERT_EQ(unwatched.wait_for(absl::ToChronoNanoseconds(kWait)),
            std::future_status::ready);
  EXPECT_FALSE(discovery_->Status(id).has_value());

  // The records change; a live 50 ms watch would report it. Another watch
  // seeing the change proves the loop went on without the first.
  ASSERT_OK(dnsmasq_->SetHosts("10.0.0.7 web.test\n"));
  Recorder& other = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("other", HostSpec("web.test", 81), other.Callback())
          .status());
  ASSERT_OK(other.WaitForMembers({"10.0.0.7:81"}).status());
  EXPECT_EQ(calls.load(), 1);
}

// ------------------------------------------------ scripted server failures

TEST_F(DnsDiscoveryTest, ServfailAndRefusedAreReported) {
  StartFake([](const std::string& name, int) {
    Answer answer;
    answer.rcode = name == "refused.test" ? 5 : 2;
    return answer;
  });
  CreateDiscovery(OptionsFor(fake_->server()));
  Recorder& servfail = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("a", HostSpec("servfail.test", 80), servfail.Callback())
          .status());
  ASSERT_OK_AND_ASSIGN(absl::Status error, servfail.WaitForError());
  EXPECT_THAT(error,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("dns 'servfail.test' A: servfail from "
                                       "127.0.0.1:"),
                             ::testing::Not(HasSubstr("connection")))));
  Recorder& refused = NewRecorder();
  ASSERT_OK(discovery_->Watch("b", SrvSpec("refused.test"), refused.Callback())
                .status());
  ASSERT_OK_AND_ASSIGN(error, refused.WaitForError());
  EXPECT_THAT(error,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("dns srv 'refused.test': refused from "
                                       "127.0.0.1:"),
                             ::testing::Not(HasSubstr("connection")))));
  EXPECT_THAT(Render(registry_),
              AllOf(HasSubstr("aside_dns_resolutions_total{group=\"a\","
                              "result=\"servfail\"} 1"),
                    HasSubstr("aside_dns_resolutions_total{group=\"b\","
                              "result=\"refused\"} 1")));
}

TEST_F(DnsDiscoveryTest, FailsOverToTheNextServer) {
  StartFake([](const std::string&, int) {
    Answer answer;
    answer.rcode = 2;
    return answer;
  });
  StartDnsmasq(kWebHosts);
  // A port nobody listens on: connection refused.
  const std::string dead =
      absl::StrCat("127.0.0.1:", aside::testing::PickUnusedPort());
  DnsDiscoveryOptions options = OptionsFor(dead);
  options.servers = {dead, fake_->server(), dnsmasq_->server()};
  CreateDiscovery(options);
  Recorder& recorder = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId id,
      discovery_->Watch("web", HostSpec("web.test", 80), recorder.Callback()));
  ASSERT_OK(
      recorder.WaitForMembers({"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"})
          .status());

  // The last one goes too: the error names every server and what it did.
  ASSERT_OK(dnsmasq_->Stop());
  discovery_->ResolveNow(id);
  ASSERT_OK_AND_ASSIGN(absl::Status error, recorder.WaitForError());
  EXPECT_THAT(error,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat(
                           "dns 'web.test' A: connection refused from ", dead,
                           "; servfail from ", fake_->server(),
                           "; connection refused from ", dnsmasq_->server()))));
}

TEST_F(DnsDiscoveryTest, SlowNamesTimeOutWithoutDelayingOthers) {
  StartFake([](const std::string& name, int) {
    Answer answer;
    if (name == "slow.test") {
      answer.kind = Answer::Kind::kDrop;
      return answer;
    }
    // fast<N>.test -> 10.4.0.<N>
    answer.addresses = {
        absl::StrCat("10.4.0.", name.substr(4, name.find('.') - 4))};
    return answer;
  });
  DnsDiscoveryOptions options = OptionsFor(fake_->server());
  options.query_timeout = absl::Seconds(3);
  options.tries = 1;
  CreateDiscovery(options);
  Recorder& slow = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId slow_id,
      discovery_->Watch("slow", HostSpec("slow.test", 80), slow.Callback()));
  ASSERT_TRUE(Eventually([&] { return fake_->queries() >= 2; }));
  const absl::Time start = absl::Now();
  std::vector<Recorder*> fast;
  for (int i = 1; i <= 20; ++i) {
    fast.push_back(&NewRecorder());
    ASSERT_OK(discovery_
                  ->Watch(absl::StrCat("fast", i),
                          HostSpec(absl::StrCat("fast", i, ".test"), 80),
                          fast.back()->Callback())
                  .status());
  }
  for (int i = 1; i <= 20; ++i) {
    ASSERT_OK(fast[i - 1]
                  ->WaitForMembers({absl::StrCat("10.4.0.", i, ":80")})
                  .status());
  }
  // All answered while the slow query was still waiting for its timeout.
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(slow.count(), 0u);
  EXPECT_TRUE(discovery_->Status(slow_id)->in_flight);

  ASSERT_OK_AND_ASSIGN(absl::Status error, slow.WaitForError());
  EXPECT_THAT(error, StatusIs(absl::StatusCode::kDeadlineExceeded,
                              HasSubstr("dns 'slow.test' A: timeout from")));
  EXPECT_THAT(Render(registry_),
              HasSubstr("aside_dns_resolutions_total{group=\"slow\","
                        "result=\"timeout\"} 1"));
}

TEST_F(DnsDiscoveryTest, UnwatchWhileAQueryIsInFlight) {
  StartFake([](const std::string& name, int) {
    Answer answer;
    if (name == "held.test") {
      answer.kind = Answer::Kind::kHold;
    } else {
      answer.addresses = {"10.5.0.1"};
    }
    return answer;
  });
  CreateDiscovery(OptionsFor(fake_->server()));
  Recorder& held = NewRecorder();
  ASSERT_OK_AND_ASSIGN(
      DnsWatchId id,
      discovery_->Watch("held", HostSpec("held.test", 80), held.Callback()));
  ASSERT_OK(fake_->WaitForHeld(2, kWait));  // A and AAAA
  EXPECT_TRUE(discovery_->Status(id)->in_flight);
  discovery_->Unwatch(id);
  EXPECT_FALSE(discovery_->Status(id).has_value());

  // The answers arrive after the watch is gone; then a later watch's answer
  // on the same socket proves they were processed.
  Answer late;
  late.addresses = {"10.5.0.9", "fd00::9"};
  fake_->ReleaseHeld(late);
  Recorder& other = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("other", HostSpec("other.test", 80), other.Callback())
          .status());
  ASSERT_OK(other.WaitForMembers({"10.5.0.1:80"}).status());
  EXPECT_EQ(held.count(), 0u);
  EXPECT_THAT(Render(registry_), ::testing::Not(HasSubstr("group=\"held\"")));
}

TEST_F(DnsDiscoveryTest, CapsResolutionsInFlight) {
  StartFake([](const std::string&, int) {
    Answer answer;
    answer.kind = Answer::Kind::kHold;
    return answer;
  });
  DnsDiscoveryOptions options = OptionsFor(fake_->server());
  options.max_in_flight = 1;
  CreateDiscovery(options);
  std::vector<Recorder*> recorders;
  for (const char* name : {"a", "b", "c"}) {
    recorders.push_back(&NewRecorder());
    ASSERT_OK(discovery_
                  ->Watch(name, HostSpec(absl::StrCat(name, ".test"), 80),
                          recorders.back()->Callback())
                  .status());
  }
  // One resolution (A + AAAA) at a time; the next starts when it ends.
  Answer answer;
  answer.addresses = {"10.6.0.1"};
  for (int round = 1; round <= 3; ++round) {
    ASSERT_OK(fake_->WaitForHeld(2, kWait)) << round;
    EXPECT_EQ(fake_->queries(), 2 * round);
    int in_flight = 0;
    for (const DnsWatchStatus& status : discovery_->List()) {
      in_flight += status.in_flight ? 1 : 0;
    }
    EXPECT_EQ(in_flight, 1) << round;
    fake_->ReleaseHeld(answer);
  }
  for (Recorder* recorder : recorders) {
    ASSERT_OK(recorder->WaitForMembers({"10.6.0.1:80"}).status());
  }
}

TEST_F(DnsDiscoveryTest, DestroyedWithQueriesInFlight) {
  StartFake([](const std::string&, int) {
    Answer answer;
    answer.kind = Answer::Kind::kHold;
    return answer;
  });
  CreateDiscovery(OptionsFor(fake_->server()));
  Recorder& a = NewRecorder();
  Recorder& b = NewRecorder();
  ASSERT_OK(
      discovery_->Watch("a", HostSpec("a.test", 80), a.Callback()).status());
  ASSERT_OK(
      discovery_->Watch("b", SrvSpec("_x._tcp.b.test"), b.Callback()).status());
  ASSERT_OK(fake_->WaitForHeld(3, kWait));
  discovery_.reset();
  // Answers to a closed resolver go nowhere.
  fake_->ReleaseHeld(Answer{});
  EXPECT_EQ(a.count(), 0u);
  EXPECT_EQ(b.count(), 0u);
  EXPECT_THAT(Render(registry_), ::testing::Not(HasSubstr("group=")));
}

}  // namespace
}  // namespace aside::server
