// A frozen etcd member: stopped with SIGSTOP, it keeps its connections open
// and answers nothing. Three real aside-server replicas on a real 3-member
// etcd, all asking the same member first (endpoint_order: listed, that
// member listed first), with etcd's default timeouts and keep-alive pings:
// when that member freezes, every replica follows a change made through a
// healthy member within dial_timeout + 1 s, its Admin writes keep working
// within their deadline, its membership lease survives, and its store stays
// up (it reaches a healthy member). With every member frozen, each replica
// reports its store down, with the cause, until they answer again. A normal
// start reports no outage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/sync.h"
#include "server/store/etcd/etcd_client.h"
#include "tests/fleet/fleet_helpers.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_client.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::Eventually;
using ::aside::testing::FleetTestBase;
using ::aside::testing::kFleetAdminToken;
using ::aside::testing::kFleetPrefix;
using ::aside::testing::MakeGroup;
using ::aside::testing::Replica;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// store.etcd.dial_timeout and request_timeout as by default.
constexpr absl::Duration kDialTimeout = absl::Seconds(2);
constexpr absl::Duration kRequestTimeout = absl::Seconds(5);
constexpr char kEtcdSettings[] =
    "    dial_timeout: 2s\n    request_timeout: 5s\n"
    "    endpoint_order: listed\n";
// A watch probes a member silent for 500 ms and leaves it after
// dial_timeout (2 s) without an answer; a replica reports its store once a
// second; and a second of margin for a loaded machine.
constexpr absl::Duration kDownBound = absl::Milliseconds(4500);

// The lines of the replica's log that contain `needle`.
std::vector<std::string> LinesWith(Replica& r, const std::string& needle) {
  r.server.process->ReadAvailable();
  std::vector<std::string> out;
  for (const std::string& line : r.server.process->stderr_lines()) {
    if (line.find(needle) != std::string::npos) {
      out.push_back(line);
    }
  }
  return out;
}

class EtcdFrozenMemberTest : public FleetTestBase {
 protected:
  void SetUp() override {
    StartCluster();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    ASSERT_OK_AND_ASSIGN(const int leader, cluster_->Leader());
    // A follower: the other two keep their leader and serve at once.
    frozen_ = (leader + 1) % cluster_->size();
    std::vector<std::string> endpoints = {cluster_->endpoint(frozen_)};
    for (int i = 0; i < cluster_->size(); ++i) {
      if (i != frozen_) {
        endpoints.push_back(cluster_->endpoint(i));
      }
    }
    endpoints_ = endpoints;
    for (int i = 0; i < 3; ++i) {
      AddReplica(endpoints_, "", kEtcdSettings);
    }
    for (auto& r : replicas_) {
      ASSERT_TRUE(Eventually([&] { return r->Store().up(); }));
    }
  }

  // Writes a group into etcd through the members that are not paused, as
  // another replica would.
  absl::Status PutThroughEtcd(const std::string& name, int port) {
    return cluster_
        ->Etcdctl({"put", absl::StrCat(kFleetPrefix, "groups/", name),
                   absl::StrCat("{\"name\":\"", name,
                                "\",\"health_check\":{\"kind\":\"NONE\"},"
                                "\"backends\":[{\"address\":\"127.0.0.1:",
                                port, "\"}]}")})
        .status();
  }

  // The aside_store_up line of the replica's /metrics ("" without one).
  static std::string StoreUp(Replica& r) {
    const std::string metrics = r.Metrics();
    const std::string name = "aside_store_up{type=\"etcd\"} ";
    const size_t at = metrics.find(name);
    if (at == std::string::npos) {
      return "";
    }
    return metrics.substr(at, metrics.find('\n', at) - at);
  }

  int frozen_ = 0;
  std::vector<std::string> endpoints_;
};

TEST_F(EtcdFrozenMemberTest, EveryReplicaFollowsAHealthyMemberWithinBound) {
  ASSERT_TRUE(replicas_[0]->Create(MakeGroup("before", {8801})).ok());
  for (auto& r : replicas_) {
    ASSERT_TRUE(
        Eventually([&] { return r->Backends("before") == "127.0.0.1:8801"; }));
  }

  cluster_->Pause(frozen_);
  const absl::Time frozen_at = absl::Now();
  ASSERT_OK(PutThroughEtcd("after", 8802));
  const absl::Time acknowledged = absl::Now();
  const absl::Time deadline = acknowledged + kDialTimeout + absl::Seconds(1);

  const size_t n = replicas_.size();
  std::vector<std::optional<absl::Time>> followed(n);
  Eventually(
      [&] {
        bool all = true;
        for (size_t i = 0; i < n; ++i) {
          if (!followed[i].has_value() &&
              replicas_[i]->Backends("after") == "127.0.0.1:8802") {
            followed[i] = absl::Now();
          }
          all &= followed[i].has_value();
        }
        return all;
      },
      deadline - absl::Now());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(followed[i].has_value())
        << "replica " << i << " does not serve the change "
        << absl::FormatDuration(absl::Now() - acknowledged)
        << " after etcd acknowledged it (bound: dial_timeout + 1 s)";
    std::cout << "replica " << i << " follows the change "
              << absl::FormatDuration(*followed[i] - acknowledged)
              << " after it was acknowledged, "
              << absl::FormatDuration(*followed[i] - frozen_at)
              << " after the member froze\n";
    EXPECT_LE(*followed[i], deadline);
  }

  // Each one says which member it left, and why.
  for (auto& r : replicas_) {
    ASSERT_OK_AND_ASSIGN(std::string line,
                         r->server.process->WaitForLine(
                             "event=store.watch_lost", absl::Seconds(5)));
    EXPECT_THAT(line, HasSubstr(cluster_->endpoint(frozen_)));
    EXPECT_THAT(line, HasSubstr("progress request"));
  }
  // They reach a healthy member: their store is up, and Admin writes
  // through every replica succeed within their deadline.
  for (size_t i = 0; i < n; ++i) {
    Replica& r = *replicas_[i];
    EXPECT_TRUE(r.Store().up()) << "replica " << i;
    EXPECT_EQ(StoreUp(r), "aside_store_up{type=\"etcd\"} 1");
    if (i > 0) {
      // SetBackends replaces the list: a replica that has not seen the
      // previous replica's write yet would lose the race to it (ABORTED,
      // as documented), which is not what this checks.
      const std::string previous = absl::StrCat("127.0.0.1:", 8810 + i - 1);
      EXPECT_TRUE(Eventually([&] { return r.Backends("before") == previous; }))
          << "replica " << i;
    }
    const absl::Time sent = absl::Now();
    const grpc::Status written =
        r.SetBackends("before", {8810 + static_cast<int>(i)});
    EXPECT_TRUE(written.ok())
        << "replica " << i << ": " << written.error_message();
    EXPECT_LT(absl::Now() - sent, kRequestTimeout) << "replica " << i;
  }
  const std::string last = absl::StrCat("127.0.0.1:", 8810 + n - 1);
  for (auto& r : replicas_) {
    EXPECT_TRUE(Eventually([&] { return r->Backends("before") == last; }))
        << r->Backends("before");
  }
  // Membership leases were renewed through the healthy members.
  for (size_t i = 0; i < n; ++i) {
    EXPECT_THAT(LinesWith(*replicas_[i], "event=fleet.lease_lost"), IsEmpty())
        << "replica " << i;
  }
  cluster_->Resume(frozen_);
}

TEST_F(EtcdFrozenMemberTest, WhileNoMemberAnswersTheStoreIsReportedDown) {
  ASSERT_TRUE(replicas_[0]->Create(MakeGroup("kept", {8901})).ok());
  for (auto& r : replicas_) {
    ASSERT_TRUE(
        Eventually([&] { return r->Backends("kept") == "127.0.0.1:8901"; }));
  }
  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Pause(i);
  }
  const absl::Time paused_at = absl::Now();
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = *replicas_[i];
    EXPECT_TRUE(Eventually([&] { return !r.Store().up(); },
                           paused_at + kDownBound - absl::Now()))
        << "replica " << i << " still reports its store up "
        << absl::FormatDuration(absl::Now() - paused_at)
        << " after every member froze";
  }
  std::cout << "every replica reported its store down within "
            << absl::FormatDuration(absl::Now() - paused_at) << "\n";
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = *replicas_[i];
    EXPECT_EQ(StoreUp(r), "aside_store_up{type=\"etcd\"} 0");
    ASSERT_OK_AND_ASSIGN(
        std::string line,
        r.server.process->WaitForLine("event=store.down", absl::Seconds(5)));
    EXPECT_THAT(line, HasSubstr("level=warn"));
    EXPECT_THAT(line, HasSubstr("error="));
    // The cause names a member (the one the watch was last on).
    bool names_a_member = false;
    for (const std::string& e : endpoints_) {
      names_a_member |= line.find(e) != std::string::npos;
    }
    EXPECT_TRUE(names_a_member) << line;
    // The last state is still served.
    v1::PickResponse pick;
    EXPECT_TRUE(r.Pick("kept", &pick).ok());
  }

  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Resume(i);
  }
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(30)));
  for (auto& r : replicas_) {
    ASSERT_TRUE(Eventually([&] { return r->Store().up(); }, absl::Seconds(20)));
    EXPECT_EQ(StoreUp(*r), "aside_store_up{type=\"etcd\"} 1");
  }
  ASSERT_TRUE(
      Eventually([&] { return replicas_[1]->SetBackends("kept", {8902}).ok(); },
                 absl::Seconds(20)));
  for (auto& r : replicas_) {
    EXPECT_TRUE(
        Eventually([&] { return r->Backends("kept") == "127.0.0.1:8902"; }));
  }
}

// Back-pressure: with every member frozen no commit returns, so Admin
// writes queue. A replica whose queue holds two waiting writes refuses the
// writes beyond its 32 workers and those two at once, with
// RESOURCE_EXHAUSTED and a retry hint, every refusal before any admitted
// write is answered; once etcd answers again the queue drains and writes
// are admitted again.
TEST_F(EtcdFrozenMemberTest, WritesBeyondTheQueueAreRefusedAtOnceWithAHint) {
  constexpr int kWriters = 48;
  constexpr int kGroups = 4;
  admin_settings_ = "  max_queued_writes: 2\n  max_write_wait: 10s\n";
  AddReplica(endpoints_, "", kEtcdSettings);
  Replica& r = *replicas_.back();
  ASSERT_TRUE(Eventually([&] { return r.Store().up(); }));
  for (int g = 0; g < kGroups; ++g) {
    ASSERT_TRUE(r.Create(MakeGroup(absl::StrCat("bp", g), {9000})).ok());
  }
  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Pause(i);
  }
  struct Answer {
    grpc::StatusCode code = grpc::StatusCode::OK;
    std::string message;
    std::string retry_after;    // aside-retry-after-ms
    std::string pushback;       // grpc-retry-pushback-ms
    bool while_frozen = false;  // answered before etcd was resumed
  };
  std::vector<Answer> answers(kWriters);
  aside::Mutex mu;
  int answered = 0;      // guarded by mu
  bool resumed = false;  // guarded by mu
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      v1::UpdateGroupRequest req;
      *req.mutable_group() =
          MakeGroup(absl::StrCat("bp", w % kGroups), {9001 + w});
      req.mutable_update_mask()->add_paths("backends");
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(30));
      context.AddMetadata("authorization",
                          absl::StrCat("Bearer ", kFleetAdminToken));
      v1::Group out;
      const grpc::Status s = r.admin->UpdateGroup(&context, req, &out);
      Answer& a = answers[w];
      a.code = s.error_code();
      a.message = s.error_message();
      for (const auto& [key, value] : context.GetServerTrailingMetadata()) {
        if (key == "aside-retry-after-ms") {
          a.retry_after = std::string(value.data(), value.size());
        } else if (key == "grpc-retry-pushback-ms") {
          a.pushback = std::string(value.data(), value.size());
        }
      }
      aside::MutexLock lock(&mu);
      a.while_frozen = !resumed;
      ++answered;
    });
  }
  // The refusals come while etcd is still frozen: 48 writers, 32 workers,
  // two may wait.
  constexpr int kRefusedAtLeast = kWriters - 32 - 2;
  {
    aside::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(
        [&] {
          mu.AssertHeld();
          return answered >= kRefusedAtLeast;
        },
        absl::Seconds(20)));
    resumed = true;
  }
  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Resume(i);
  }
  for (std::thread& t : writers) {
    t.join();
  }
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(30)));

  // Writers still arriving after the resume may be refused too (the
  // workers are busy with the backlog): what matters is that while etcd
  // was frozen the refusals came at once and no admitted write was
  // answered.
  int refused = 0;
  int refused_while_frozen = 0;
  for (const Answer& a : answers) {
    if (a.code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
      refused_while_frozen += a.while_frozen;
      EXPECT_THAT(a.message, HasSubstr("admin.max_queued_writes"));
      int ms = 0;
      EXPECT_TRUE(absl::SimpleAtoi(a.retry_after, &ms)) << a.retry_after;
      EXPECT_GE(ms, 10);
      EXPECT_LE(ms, 10000);
      EXPECT_EQ(a.pushback, a.retry_after);
    } else {
      EXPECT_FALSE(a.while_frozen)
          << "an admitted write was answered while etcd was frozen: "
          << a.message;
      // Admitted: committed, or failed on the frozen store.
      EXPECT_THAT(a.code, ::testing::AnyOf(grpc::StatusCode::OK,
                                           grpc::StatusCode::UNAVAILABLE,
                                           grpc::StatusCode::ABORTED))
          << a.message;
    }
  }
  std::cout << refused << " of " << kWriters << " writes refused, "
            << refused_while_frozen << " while no etcd member answered\n";
  EXPECT_GE(refused_while_frozen, kRefusedAtLeast);
  ASSERT_TRUE(Eventually(
      [&] {
        return r.SetBackends("bp0", {9100}).ok() &&
               r.Backends("bp0") == "127.0.0.1:9100";
      },
      absl::Seconds(20)));
  EXPECT_THAT(r.Metrics(), HasSubstr("result=\"resource_exhausted\""));
  // One log line for the refusals, not one each.
  r.server.process->ReadAvailable();
  int refusal_lines = 0;
  for (const std::string& line : r.server.process->stderr_lines()) {
    refusal_lines +=
        line.find("event=admin.writes_refused") != std::string::npos;
    EXPECT_FALSE(line.find("event=admin.mutation") != std::string::npos &&
                 line.find("result=resource_exhausted") != std::string::npos)
        << line;
  }
  EXPECT_EQ(refusal_lines, 1);
}

TEST_F(EtcdFrozenMemberTest, ANormalStartReportsNoOutage) {
  AddReplica(endpoints_, "", kEtcdSettings);
  Replica& late = *replicas_.back();
  // Watched over the time the replica's first two reports of its store
  // take: up throughout.
  const absl::Time until = absl::Now() + absl::Milliseconds(2500);
  int down = 0;
  while (absl::Now() < until) {
    down += late.Store().up() ? 0 : 1;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(down, 0);
  for (size_t i = 0; i < replicas_.size(); ++i) {
    EXPECT_THAT(LinesWith(*replicas_[i], "event=store.down"), IsEmpty())
        << "replica " << i;
  }
}

// Each replica lists a different member first (its home). Failovers move
// a replica's watches off its frozen home; each watch returns home once the
// member answers again, so the replicas' watches stay spread over the
// members instead of piling onto the one that stayed up longest.
class EtcdWatchHomeTest : public FleetTestBase {
 protected:
  void SetUp() override {
    StartCluster();
    if (IsSkipped() || HasFatalFailure()) {
      return;
    }
    const int n = cluster_->size();
    for (int home = 0; home < n; ++home) {
      std::vector<std::string> endpoints;
      for (int i = 0; i < n; ++i) {
        endpoints.push_back(cluster_->endpoint((home + i) % n));
      }
      AddReplica(endpoints, "", kEtcdSettings);
    }
    for (auto& r : replicas_) {
      ASSERT_TRUE(Eventually([&] { return r->Store().up(); }));
    }
  }

  // The watch streams each member serves (etcd's own gauge); -1 for a
  // member whose /metrics cannot be read.
  std::vector<int> WatchStreams() {
    std::vector<int> out;
    for (int i = 0; i < cluster_->size(); ++i) {
      const std::string endpoint = cluster_->endpoint(i);
      int port = 0;
      absl::StatusOr<aside::testing::HttpResponse> r;
      if (absl::SimpleAtoi(endpoint.substr(endpoint.rfind(':') + 1), &port)) {
        r = aside::testing::HttpGet("127.0.0.1", port, "/metrics",
                                    absl::Seconds(2));
      }
      int streams = -1;
      // The sample's line, not the HELP and TYPE lines that name it too.
      const std::string gauge = "\netcd_debugging_mvcc_watch_stream_total ";
      if (r.ok()) {
        const size_t at = r->body.find(gauge);
        if (at != std::string::npos) {
          const size_t from = at + gauge.size();
          (void)absl::SimpleAtoi(
              r->body.substr(from, r->body.find('\n', from) - from), &streams);
        }
      }
      out.push_back(streams);
    }
    return out;
  }

  static std::string Show(const std::vector<int>& v) {
    std::string out;
    for (int x : v) absl::StrAppend(&out, out.empty() ? "" : " ", x);
    return out;
  }
};

TEST_F(EtcdWatchHomeTest, WatchesReturnHomeAfterEachOfFiveFailovers) {
  const int n = cluster_->size();
  // Every member serves its replica's watches: as many on each member
  // (the replicas are alike), once every replica has opened all of them.
  std::vector<int> start;
  ASSERT_TRUE(Eventually([&] {
    start = WatchStreams();
    return start[0] > 0 && std::all_of(start.begin(), start.end(),
                                       [&](int c) { return c == start[0]; });
  })) << Show(start);
  // Failovers: the home of one replica at a time freezes until that
  // replica's store watch has left it, then answers again.
  for (int round = 0; round < 5; ++round) {
    const int frozen = round % n;
    Replica& r = *replicas_[frozen];
    const size_t lost = LinesWith(r, "event=store.watch_lost").size();
    cluster_->Pause(frozen);
    const bool left = Eventually(
        [&] { return LinesWith(r, "event=store.watch_lost").size() > lost; },
        absl::Seconds(10));
    cluster_->Resume(frozen);
    ASSERT_TRUE(left) << "round " << round << ": replica " << frozen
                      << " did not leave its frozen home";
    // Back where they started, within a home check and a dial timeout.
    std::vector<int> now;
    EXPECT_TRUE(Eventually(
        [&] { return (now = WatchStreams()) == start; },
        server::etcd::kWatchHomeCheck + kDialTimeout + absl::Seconds(5)))
        << "round " << round << ": watch streams per member " << Show(now)
        << ", at the start " << Show(start);
  }
}

}  // namespace
}  // namespace aside
