// Churn through the fleet: three real aside-server replicas on a real
// 3-member etcd, four writers offering 500 Admin writes/s in all for 10 s
// through random replicas, their writes batched into shared etcd Txns.
// Every acknowledged write is present on every replica at the end, no write
// is lost or made twice, and conflicts (ABORTED) happen only between writes
// to one group: each writer adds backends to 25 groups of its own (a change
// retried on conflict, so never ABORTED) and replaces the backends of one
// group all four share (ABORTED when another writer got there first). The
// acknowledged rate is printed beside a floor measured in the same run: the
// same offered load of bare etcd Txns, one Put each.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "aside/v1/admin.grpc.pb.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"
#include "lib/sync.h"
#include "tests/fleet/fleet_helpers.h"
#include "tests/integration/server_helpers.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace aside {
namespace {

using ::aside::testing::DocumentedThreadNames;
using ::aside::testing::Eventually;
using ::aside::testing::kFleetAdminToken;
using ::aside::testing::kFleetPrefix;
using ::aside::testing::MakeGroup;
using ::aside::testing::Replica;
using ::aside::testing::ThreadNames;
using ::aside::testing::UndocumentedThreads;

constexpr int kWriters = 4;
constexpr int kOffered = 500;  // writes/s, all writers together
constexpr absl::Duration kRun = absl::Seconds(10);
constexpr int kOwnGroups = 25;   // per writer
constexpr int kSharedEvery = 5;  // every fifth write goes to the shared group
constexpr char kShared[] = "churn-shared";

std::string OwnGroup(int writer, int k) {
  return absl::StrCat("churn-", writer, "-", k);
}

// Counts calls in flight; Await waits (bounded) for none.
class InFlight {
 public:
  void Add() {
    aside::MutexLock lock(&mu_);
    ++n_;
  }
  void Done() {
    aside::MutexLock lock(&mu_);
    --n_;
  }
  bool AwaitNone(absl::Duration timeout) {
    aside::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [this] {
          mu_.AssertHeld();
          return n_ == 0;
        },
        timeout);
  }

 private:
  aside::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

// What one run of paced calls measured.
struct Rate {
  int sent = 0;
  int acked = 0;
  absl::Duration span;  // first send to last answer
  absl::Duration p50, p99;

  double per_second() const {
    return span > absl::ZeroDuration() ? acked / absl::ToDoubleSeconds(span)
                                       : 0;
  }
};

Rate Summarise(int sent, std::vector<absl::Duration> acks, absl::Time start,
               absl::Time last) {
  Rate r;
  r.sent = sent;
  r.acked = static_cast<int>(acks.size());
  r.span = last - start;
  std::sort(acks.begin(), acks.end());
  if (!acks.empty()) {
    r.p50 = acks[acks.size() / 2];
    r.p99 = acks[std::min(acks.size() - 1, acks.size() * 99 / 100)];
  }
  return r;
}

std::string Describe(const Rate& r) {
  return absl::StrCat(r.acked, " of ", r.sent, " acknowledged, ",
                      absl::SixDigits(r.per_second()), "/s, ack p50 ",
                      absl::FormatDuration(r.p50), " p99 ",
                      absl::FormatDuration(r.p99));
}

// Runs `send(writer, i, done)` for kWriters writers, each at its share of
// kOffered, for kRun; `send` starts one asynchronous call and arranges
// for `done` to run when it ends.
template <typename Send>
void Offer(InFlight& in_flight, const Send& send) {
  const absl::Duration interval = absl::Seconds(1) * kWriters / kOffered;
  const int per_writer = static_cast<int>(kRun / interval);
  const absl::Time start = absl::Now();
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < per_writer; ++i) {
        // Pacing (an open loop: a slow answer does not slow the offer).
        const absl::Time due = start + interval * i + interval * w / kWriters;
        if (const absl::Duration d = due - absl::Now();
            d > absl::ZeroDuration()) {
          absl::SleepFor(d);
        }
        in_flight.Add();
        send(w, i);
      }
    });
  }
  for (std::thread& t : writers) {
    t.join();
  }
}

class FleetChurnTest : public ::aside::testing::FleetTestBase {
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

  // A bare etcd Txn (one Put of a group-sized value) per call, at the same
  // offered load, through the cluster's members in turn.
  Rate BareEtcdFloor() {
    std::vector<std::unique_ptr<etcdserverpb::KV::Stub>> kv;
    for (const std::string& e : cluster_->endpoints()) {
      kv.push_back(etcdserverpb::KV::NewStub(
          grpc::CreateChannel(e, grpc::InsecureChannelCredentials())));
    }
    struct Call {
      grpc::ClientContext context;
      etcdserverpb::TxnRequest request;
      etcdserverpb::TxnResponse response;
      absl::Time sent;
    };
    aside::Mutex mu;
    std::vector<absl::Duration> acks;  // guarded by mu
    absl::Time last = absl::Now();     // guarded by mu
    InFlight in_flight;
    std::string value(200, 'v');
    const absl::Time start = absl::Now();
    int sent = 0;
    std::mt19937 rng(7);
    aside::Mutex rng_mu;
    Offer(in_flight, [&](int w, int i) {
      auto* call = new Call;
      call->context.set_deadline(std::chrono::system_clock::now() +
                                 std::chrono::seconds(20));
      etcdserverpb::PutRequest* put =
          call->request.add_success()->mutable_request_put();
      put->set_key(
          absl::StrCat(kFleetPrefix, "floor/", w, "-", i % kOwnGroups));
      put->set_value(value);
      size_t member = 0;
      {
        aside::MutexLock lock(&rng_mu);
        member = rng() % kv.size();
        ++sent;
      }
      call->sent = absl::Now();
      kv[member]->async()->Txn(&call->context, &call->request, &call->response,
                               [&, call](grpc::Status s) {
                                 {
                                   aside::MutexLock lock(&mu);
                                   if (s.ok()) {
                                     acks.push_back(absl::Now() - call->sent);
                                     last = absl::Now();
                                   }
                                 }
                                 delete call;
                                 in_flight.Done();
                               });
    });
    EXPECT_TRUE(in_flight.AwaitNone(absl::Seconds(30)));
    aside::MutexLock lock(&mu);
    return Summarise(sent, acks, start, last);
  }
};

TEST_F(FleetChurnTest,
       FiveHundredWritesASecondLoseNothingAndConflictOnlyPerGroup) {
  // Reads the replicas' stderr throughout (a line per write), so that
  // their logs never fill the pipes and stall them.
  aside::Mutex drain_mu;
  bool stop = false;  // guarded by drain_mu
  std::thread drainer([&] {
    for (;;) {
      {
        aside::MutexLock lock(&drain_mu);
        if (drain_mu.AwaitWithTimeout(aside::Cond(&stop),
                                      absl::Milliseconds(50))) {
          return;
        }
      }
      Drain();
    }
  });
  absl::Cleanup stop_draining = [&] {
    {
      aside::MutexLock lock(&drain_mu);
      stop = true;
    }
    drainer.join();
  };
  // The groups, made in a few batch calls.
  for (int w = 0; w < kWriters; ++w) {
    v1::ApplyGroupChangesRequest req;
    for (int k = 0; k < kOwnGroups; ++k) {
      *req.add_changes()->mutable_create_group()->mutable_group() =
          MakeGroup(OwnGroup(w, k), {9999});
    }
    if (w == 0) {
      *req.add_changes()->mutable_create_group()->mutable_group() =
          MakeGroup(kShared, {9999});
    }
    v1::ApplyGroupChangesResponse resp;
    ASSERT_TRUE(
        replicas_[0]
            ->admin
            ->ApplyGroupChanges(
                ::aside::testing::Context(kFleetAdminToken).get(), req, &resp)
            .ok());
    for (const v1::GroupChangeResult& r : resp.results()) {
      ASSERT_EQ(r.code(), 0) << r.group() << ": " << r.message();
    }
  }

  struct Call {
    grpc::ClientContext context;
    v1::AddBackendsRequest add;
    v1::UpdateGroupRequest update;
    v1::Group out;
    grpc::Status status;
    std::string group;
    int port = 0;
    bool shared = false;
    absl::Time sent, answered;
  };
  aside::Mutex mu;
  std::vector<std::unique_ptr<Call>> calls;  // guarded by mu
  InFlight in_flight;
  std::mt19937 rng(29);
  const absl::Time start = absl::Now();
  Offer(in_flight, [&](int w, int i) {
    auto call = std::make_unique<Call>();
    Call* c = call.get();
    c->context.set_deadline(std::chrono::system_clock::now() +
                            std::chrono::seconds(20));
    c->context.AddMetadata("authorization",
                           absl::StrCat("Bearer ", kFleetAdminToken));
    c->port = 10000 + w * 2000 + i;
    c->shared = i % kSharedEvery == kSharedEvery - 1;
    Replica* r = nullptr;
    {
      aside::MutexLock lock(&mu);
      r = replicas_[rng() % replicas_.size()].get();
      calls.push_back(std::move(call));
    }
    auto done = [&, c](grpc::Status s) {
      c->answered = absl::Now();
      c->status = std::move(s);
      in_flight.Done();
    };
    c->sent = absl::Now();
    if (c->shared) {
      c->group = kShared;
      *c->update.mutable_group() = MakeGroup(kShared, {c->port});
      c->update.mutable_update_mask()->add_paths("backends");
      r->admin->async()->UpdateGroup(&c->context, &c->update, &c->out, done);
    } else {
      c->group = OwnGroup(w, i % kOwnGroups);
      c->add.set_group(c->group);
      c->add.add_backends()->set_address(absl::StrCat("127.0.0.1:", c->port));
      r->admin->async()->AddBackends(&c->context, &c->add, &c->out, done);
    }
  });
  ASSERT_TRUE(in_flight.AwaitNone(absl::Seconds(60)));

  // What each group must hold: every acknowledged add; for the shared
  // group, the acknowledged replacement with the highest store revision.
  std::map<std::string, std::set<int>> acked_ports, refused_ports;
  int shared_port = 9999;
  int64_t shared_revision = 0;
  int acked = 0, aborted = 0, refused = 0;
  std::vector<absl::Duration> ack_latencies;
  absl::Time last = start;
  {
    aside::MutexLock lock(&mu);
    for (const auto& c : calls) {
      switch (c->status.error_code()) {
        case grpc::StatusCode::OK:
          ++acked;
          ack_latencies.push_back(c->answered - c->sent);
          last = std::max(last, c->answered);
          if (c->shared) {
            if (c->out.store_revision() > shared_revision) {
              shared_revision = c->out.store_revision();
              shared_port = c->port;
            }
          } else {
            acked_ports[c->group].insert(c->port);
          }
          break;
        case grpc::StatusCode::ABORTED:
          ++aborted;
          EXPECT_TRUE(c->shared)
              << c->group << " (one writer's own group) was ABORTED: "
              << c->status.error_message();
          break;
        case grpc::StatusCode::RESOURCE_EXHAUSTED:
          // Refused before anything was done: never made.
          ++refused;
          refused_ports[c->group].insert(c->port);
          break;
        default:
          ADD_FAILURE() << c->group << ": " << c->status.error_code() << " "
                        << c->status.error_message();
      }
    }
  }
  const Rate aside =
      Summarise(acked + aborted + refused, ack_latencies, start, last);
  EXPECT_GT(acked, 0);

  // Every replica ends with the same groups, holding every acknowledged
  // write and none that was refused.
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = *replicas_[i];
    EXPECT_TRUE(Eventually(
        [&] {
          return r.Backends(kShared) == absl::StrCat("127.0.0.1:", shared_port);
        },
        absl::Seconds(30)))
        << "replica " << i << " serves " << r.Backends(kShared);
    for (int w = 0; w < kWriters; ++w) {
      for (int k = 0; k < kOwnGroups; ++k) {
        const std::string name = OwnGroup(w, k);
        std::set<int> missing;
        std::set<int> unexpected;
        EXPECT_TRUE(Eventually(
            [&] {
              std::optional<v1::Group> g = r.Get(name);
              if (!g.has_value()) {
                return false;
              }
              std::set<int> held;
              for (const v1::Backend& b : g->backends()) {
                held.insert(
                    std::stoi(b.address().substr(b.address().find(':') + 1)));
              }
              missing.clear();
              unexpected.clear();
              for (int p : acked_ports[name]) {
                if (held.count(p) == 0) missing.insert(p);
              }
              for (int p : refused_ports[name]) {
                if (held.count(p) != 0) unexpected.insert(p);
              }
              return missing.empty() && unexpected.empty();
            },
            absl::Seconds(30)))
            << "replica " << i << " group " << name << ": " << missing.size()
            << " acknowledged adds missing, " << unexpected.size()
            << " refused adds present";
      }
    }
  }

  // A replica of a fleet under write load runs only threads
  // docs/operations.md lists, the fleet's among them.
  absl::StatusOr<std::set<std::string>> documented = DocumentedThreadNames();
  ASSERT_TRUE(documented.ok()) << documented.status();
  const std::map<std::string, int> threads =
      ThreadNames(replicas_[0]->server.process->pid());
  EXPECT_THAT(UndocumentedThreads(threads, *documented), ::testing::IsEmpty());
  for (const char* name : {"aside-admin", "aside-etcd-fol", "aside-etcd-wch",
                           "aside-etcd-dog", "aside-etcd-ka", "aside-members",
                           "aside-fleet-pub", "aside-lv-link", "aside-loop"}) {
    EXPECT_GE(threads.count(name), 1u) << name;
  }

  const Rate floor = BareEtcdFloor();
  std::cout << "offered " << kOffered << " writes/s for "
            << absl::FormatDuration(kRun)
            << " through 3 replicas: " << Describe(aside) << " (" << aborted
            << " ABORTED, all on " << kShared << "; " << refused
            << " refused)\n"
            << "bare etcd Txns at the same offered load: " << Describe(floor)
            << "\n"
            << "acknowledged rate: "
            << absl::StrCat(absl::SixDigits(aside.per_second() /
                                            std::max(floor.per_second(), 1e-9)))
            << "x the floor's\n";
}

}  // namespace
}  // namespace aside
