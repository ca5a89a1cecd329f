// The etcd client against a real 3-member etcd 3.4 cluster on loopback:
// reads at a revision, conditional writes, watches across member failure
// and compaction, leases, and failover between endpoints.
#include "server/store/etcd/etcd_client.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "lib/sync.h"
#include "server/store/etcd/etcd_shared.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/status_matchers.h"

namespace aside::server::etcd {
namespace {

using ::aside::testing::EtcdCluster;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::Optional;

// Collects what a watch delivers, for the test thread to wait on.
class WatchLog {
 public:
  WatchHandlers Handlers() {
    WatchHandlers h;
    h.on_events = [this](WatchBatch batch) {
      MutexLock lock(&mu_);
      for (Event& e : batch.events) {
        events_.push_back(std::move(e));
      }
      ++batches_;
    };
    h.on_compacted = [this](int64_t revision) {
      MutexLock lock(&mu_);
      compacted_ = revision;
    };
    h.on_disconnected = [this](const absl::Status&) {
      MutexLock lock(&mu_);
      ++disconnections_;
    };
    return h;
  }

  // Waits until `count` events arrived; false after `timeout`.
  bool WaitForEvents(size_t count, absl::Duration timeout) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [&]()
            ABSL_NO_THREAD_SAFETY_ANALYSIS { return events_.size() >= count; },
        timeout);
  }
  bool WaitForCompaction(absl::Duration timeout) {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return compacted_ != 0; },
        timeout);
  }
  std::vector<Event> events() {
    MutexLock lock(&mu_);
    return events_;
  }
  int64_t compacted() {
    MutexLock lock(&mu_);
    return compacted_;
  }
  int disconnections() {
    MutexLock lock(&mu_);
    return disconnections_;
  }
  int batches() {
    MutexLock lock(&mu_);
    return batches_;
  }

 private:
  Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  int batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t compacted_ ABSL_GUARDED_BY(mu_) = 0;
  int disconnections_ ABSL_GUARDED_BY(mu_) = 0;
};

// Polls `condition` every 50 ms until it holds or `timeout` passes.
template <typename Condition>
bool Eventually(Condition condition, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() >= deadline) {
      return false;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

class EtcdClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EtcdCluster::Options options;
    // Let clients ping every second, to find a hung member quickly.
    options.extra_args = {"--grpc-keepalive-min-time", "1s"};
    absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
        EtcdCluster::Start(options);
    if (cluster.ok()) {
      cluster_ = cluster->release();
    } else {
      *start_error_ = cluster.status();
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(cluster_, nullptr) << *start_error_;
    for (int i = 0; i < cluster_->size(); ++i) {
      cluster_->Resume(i);
    }
    // A test that failed halfway may have left members down.
    bool restarted = false;
    for (int i = 0; i < cluster_->size(); ++i) {
      if (!cluster_->running(i)) {
        ASSERT_OK(cluster_->StartMember(i));
        restarted = true;
      }
    }
    if (restarted) {
      ASSERT_OK(cluster_->WaitServing(absl::Seconds(20)));
    }
    prefix_ = absl::StrCat(
        "/test/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name(), "/");
  }

  std::unique_ptr<EtcdClient> NewClient(EtcdClientOptions options = {}) {
    if (options.endpoints.empty()) {
      options.endpoints = cluster_->endpoints();
    }
    absl::StatusOr<std::unique_ptr<EtcdClient>> client =
        EtcdClient::Create(std::move(options));
    EXPECT_OK(client);
    return client.ok() ? *std::move(client) : nullptr;
  }

  static EtcdCluster* cluster_;
  static absl::Status* start_error_;
  std::string prefix_;
};

EtcdCluster* EtcdClientTest::cluster_ = nullptr;
absl::Status* EtcdClientTest::start_error_ = new absl::Status();

TEST_F(EtcdClientTest, PutGetAndRangeAtARevision) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string a = prefix_ + "a";
  const std::string b = prefix_ + "b";
  ASSERT_OK_AND_ASSIGN(const int64_t r1, client->Put(a, "1"));
  ASSERT_OK_AND_ASSIGN(const int64_t r2, client->Put(b, "2"));
  ASSERT_OK_AND_ASSIGN(const int64_t r3, client->Put(a, "3"));
  EXPECT_LT(r1, r2);
  EXPECT_LT(r2, r3);
  // A key just outside the prefix.
  ASSERT_OK(client->Put(prefix_.substr(0, prefix_.size() - 1) + "x", "out"));

  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> now, client->Get(a));
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->value, "3");
  EXPECT_EQ(now->create_revision, r1);
  EXPECT_EQ(now->mod_revision, r3);
  EXPECT_EQ(now->version, 2);
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> then, client->Get(a, r2));
  ASSERT_TRUE(then.has_value());
  EXPECT_EQ(then->value, "1");
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> none,
                       client->Get(prefix_ + "missing"));
  EXPECT_FALSE(none.has_value());

  ASSERT_OK_AND_ASSIGN(RangeResult at_r2, client->Range(prefix_, r2));
  EXPECT_EQ(at_r2.revision, r2);
  EXPECT_THAT(at_r2.kvs, ElementsAre(Field(&KeyValue::value, "1"),
                                     Field(&KeyValue::value, "2")));
  ASSERT_OK_AND_ASSIGN(DeleteResult deleted, client->Delete(b));
  EXPECT_EQ(deleted.deleted, 1);
  ASSERT_OK_AND_ASSIGN(RangeResult latest, client->Range(prefix_));
  EXPECT_EQ(latest.revision, deleted.revision);
  ASSERT_EQ(latest.kvs.size(), 1u);
  EXPECT_EQ(latest.kvs[0].key, a);
  EXPECT_EQ(latest.kvs[0].value, "3");
  // The snapshot before the deletion is still there.
  ASSERT_OK_AND_ASSIGN(RangeResult at_r3, client->Range(prefix_, r3));
  EXPECT_EQ(at_r3.kvs.size(), 2u);
}

TEST_F(EtcdClientTest, RangeReadsEveryPageAtOneRevision) {
  EtcdClientOptions options;
  options.range_page_size = 2;
  auto client = NewClient(options);
  ASSERT_NE(client, nullptr);
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(client->Put(absl::StrCat(prefix_, "k", i), "old"));
  }
  ASSERT_OK_AND_ASSIGN(RangeResult before, client->Range(prefix_));
  ASSERT_EQ(before.kvs.size(), 5u);
  // Later writes do not leak into a read at the earlier revision, whichever
  // page they land on.
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(client->Put(absl::StrCat(prefix_, "k", i), "new"));
  }
  ASSERT_OK(client->Put(prefix_ + "k9", "new"));
  ASSERT_OK_AND_ASSIGN(RangeResult again,
                       client->Range(prefix_, before.revision));
  EXPECT_EQ(again.revision, before.revision);
  EXPECT_EQ(again.kvs, before.kvs);
  ASSERT_OK_AND_ASSIGN(RangeResult after, client->Range(prefix_));
  ASSERT_EQ(after.kvs.size(), 6u);
  for (const KeyValue& kv : after.kvs) {
    EXPECT_EQ(kv.value, "new") << kv.key;
  }
}

// etcd's own command-line client is the oracle for the wire format.
TEST_F(EtcdClientTest, InteroperatesWithEtcdctl) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_OK(cluster_->Etcdctl({"put", prefix_ + "from-etcdctl", "hello"}));
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv,
                       client->Get(prefix_ + "from-etcdctl"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "hello");

  ASSERT_OK(client->Put(prefix_ + "from-client", "world"));
  ASSERT_OK_AND_ASSIGN(std::string out,
                       cluster_->Etcdctl({"get", "--print-value-only",
                                          prefix_ + "from-client"}));
  EXPECT_EQ(out, "world\n");

  ASSERT_OK_AND_ASSIGN(Lease lease, client->LeaseGrant(absl::Seconds(30)));
  ASSERT_OK_AND_ASSIGN(std::string leases,
                       cluster_->Etcdctl({"lease", "list"}));
  EXPECT_THAT(leases, HasSubstr(absl::StrFormat("%x", lease.id)));
}

TEST_F(EtcdClientTest, TxnOnModRevisionLetsExactlyOneOfTwoWritersWin) {
  // The writers start from different members.
  auto first = NewClient();
  std::vector<std::string> rotated = cluster_->endpoints();
  std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
  auto second = NewClient({.endpoints = rotated});
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  const std::string key = prefix_ + "group";
  for (int round = 0; round < 10; ++round) {
    ASSERT_OK_AND_ASSIGN(const int64_t seen, first->Put(key, "base"));
    absl::StatusOr<TxnResult> results[2];
    std::thread writers[2];
    EtcdClient* clients[2] = {first.get(), second.get()};
    for (int w = 0; w < 2; ++w) {
      writers[w] = std::thread([&, w] {
        results[w] = clients[w]->Txn({Compare::ModRevision(key, seen)},
                                     {Op::Put(key, absl::StrCat("writer", w))},
                                     {Op::Get(key)});
      });
    }
    for (std::thread& t : writers) {
      t.join();
    }
    ASSERT_OK(results[0]);
    ASSERT_OK(results[1]);
    ASSERT_NE(results[0]->succeeded, results[1]->succeeded)
        << "round " << round;
    const int winner = results[0]->succeeded ? 0 : 1;
    const TxnResult& won = *results[winner];
    const TxnResult& lost = *results[1 - winner];
    EXPECT_GT(won.revision, seen);
    // The loser sees what the winner wrote, at the winner's revision.
    ASSERT_EQ(lost.reads.size(), 1u);
    ASSERT_EQ(lost.reads[0].size(), 1u);
    EXPECT_EQ(lost.reads[0][0].value, absl::StrCat("writer", winner));
    EXPECT_EQ(lost.reads[0][0].mod_revision, won.revision);
    ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> stored, first->Get(key));
    EXPECT_EQ(stored->mod_revision, won.revision);
  }
}

TEST_F(EtcdClientTest, CreateIfAbsentCreatesOnceAndNamesTheHolder) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string key = prefix_ + "session";
  ASSERT_OK_AND_ASSIGN(CreateResult made, client->CreateIfAbsent(key, "r1"));
  EXPECT_TRUE(made.created);
  ASSERT_OK_AND_ASSIGN(CreateResult again, client->CreateIfAbsent(key, "r2"));
  EXPECT_FALSE(again.created);
  ASSERT_TRUE(again.existing.has_value());
  EXPECT_EQ(again.existing->value, "r1");
  EXPECT_EQ(again.existing->create_revision, made.revision);
  ASSERT_OK(client->Delete(key));
  ASSERT_OK_AND_ASSIGN(CreateResult after, client->CreateIfAbsent(key, "r2"));
  EXPECT_TRUE(after.created);
}

TEST_F(EtcdClientTest,
       WatchDeliversEveryLaterEventInOrderAcrossKillOfItsMember) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(const int64_t start, client->Put(prefix_ + "seed", "0"));
  WatchLog log;
  auto watch = client->WatchPrefix(
      {.prefix = prefix_, .start_revision = start + 1}, log.Handlers());
  ASSERT_TRUE(
      Eventually([&] { return watch->connected(); }, absl::Seconds(10)));

  constexpr int kKeys = 30;
  constexpr int kKillAfter = 10;
  std::string killed;
  for (int i = 0; i < kKeys; ++i) {
    if (i == kKillAfter) {
      // Let the watch see the first writes, then take its member away.
      ASSERT_TRUE(log.WaitForEvents(kKillAfter, absl::Seconds(10)));
      killed = watch->endpoint();
      const int member = cluster_->IndexOf(killed);
      ASSERT_GE(member, 0) << killed;
      cluster_->Kill(member);
    }
    // Retried until written: across the kill, a write may fail or leave its
    // outcome unknown; creating only if absent makes the retry safe.
    const std::string key = absl::StrFormat("%sk%03d", prefix_, i);
    ASSERT_TRUE(Eventually(
        [&] {
          absl::StatusOr<CreateResult> r = client->CreateIfAbsent(key, "v");
          return r.ok();
        },
        absl::Seconds(15)))
        << key;
  }
  ASSERT_TRUE(log.WaitForEvents(kKeys, absl::Seconds(15)))
      << "got " << log.events().size();
  const std::vector<Event> events = log.events();
  ASSERT_EQ(events.size(), static_cast<size_t>(kKeys));
  int64_t last = start;
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(events[i].type, Event::Type::kPut);
    EXPECT_EQ(events[i].kv.key, absl::StrFormat("%sk%03d", prefix_, i));
    EXPECT_GT(events[i].kv.mod_revision, last);
    last = events[i].kv.mod_revision;
  }
  EXPECT_GE(log.disconnections(), 1);
  EXPECT_NE(watch->endpoint(), killed);
  EXPECT_EQ(watch->next_revision(), last + 1);
  watch.reset();
  ASSERT_OK(cluster_->Restart(cluster_->IndexOf(killed)));
}

TEST_F(EtcdClientTest, WatchReportsCompactionPastItsStartRevision) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  const std::string key = prefix_ + "a";
  ASSERT_OK_AND_ASSIGN(const int64_t r1, client->Put(key, "1"));
  ASSERT_OK(client->Put(key, "2"));
  ASSERT_OK_AND_ASSIGN(const int64_t r3, client->Put(key, "3"));
  ASSERT_OK(client->Compact(r3));
  EXPECT_THAT(client->Get(key, r1),
              ::aside::testing::StatusIs(absl::StatusCode::kOutOfRange,
                                         HasSubstr("compacted")));

  WatchLog log;
  auto watch = client->WatchPrefix({.prefix = prefix_, .start_revision = r1},
                                   log.Handlers());
  ASSERT_TRUE(log.WaitForCompaction(absl::Seconds(10)));
  EXPECT_EQ(log.compacted(), r3);
  EXPECT_TRUE(log.events().empty());

  // What the store does next: a snapshot, then a watch from just after it.
  ASSERT_OK_AND_ASSIGN(RangeResult snapshot, client->Range(prefix_));
  ASSERT_EQ(snapshot.kvs.size(), 1u);
  EXPECT_EQ(snapshot.kvs[0].value, "3");
  WatchLog resumed;
  auto again = client->WatchPrefix(
      {.prefix = prefix_, .start_revision = snapshot.revision + 1},
      resumed.Handlers());
  ASSERT_OK(client->Put(key, "4"));
  ASSERT_TRUE(resumed.WaitForEvents(1, absl::Seconds(10)));
  EXPECT_EQ(resumed.events()[0].kv.value, "4");
  EXPECT_EQ(resumed.compacted(), 0);
}

// The watch is away (its only member down) while the history it still needs
// is compacted: on reconnecting it must say so, not skip the gap.
TEST_F(EtcdClientTest, CompactionWhileDisconnectedIsReportedOnReconnect) {
  // A follower: losing it leaves the writes undisturbed.
  ASSERT_OK_AND_ASSIGN(const int leader, cluster_->Leader());
  const int member = (leader + 1) % cluster_->size();
  auto writer = NewClient();
  ASSERT_NE(writer, nullptr);
  auto pinned = NewClient({.endpoints = {cluster_->endpoint(member)}});
  ASSERT_NE(pinned, nullptr);
  const std::string key = prefix_ + "a";
  ASSERT_OK_AND_ASSIGN(const int64_t start, writer->Put(key, "0"));
  WatchLog log;
  auto watch = pinned->WatchPrefix({.prefix = prefix_, .start_revision = start},
                                   log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(10)));

  cluster_->Kill(member);
  // The writer may have been connected to the killed member: its first
  // write after the kill can fail with its outcome unknown. Rewriting the
  // same value is harmless here.
  int64_t last = 0;
  for (const char* value : {"1", "2"}) {
    ASSERT_TRUE(Eventually(
        [&] {
          absl::StatusOr<int64_t> r = writer->Put(key, value);
          last = r.ok() ? *r : 0;
          return r.ok();
        },
        absl::Seconds(10)));
  }
  ASSERT_OK(writer->Compact(last));
  ASSERT_OK(cluster_->Restart(member));

  ASSERT_TRUE(log.WaitForCompaction(absl::Seconds(15)));
  EXPECT_EQ(log.compacted(), last);
  EXPECT_EQ(log.events().size(), 1u);  // only the one before the gap
  EXPECT_GE(log.disconnections(), 1);
}

// A watch "from now on" resumes from the revision it started at, so what
// happened while it was away is delivered, not skipped.
TEST_F(EtcdClientTest, AWatchFromNowMissesNothingWhileAway) {
  ASSERT_OK_AND_ASSIGN(const int leader, cluster_->Leader());
  const int member = (leader + 1) % cluster_->size();
  auto writer = NewClient();
  ASSERT_NE(writer, nullptr);
  auto pinned = NewClient({.endpoints = {cluster_->endpoint(member)}});
  ASSERT_NE(pinned, nullptr);
  WatchLog log;
  auto watch = pinned->WatchPrefix({.prefix = prefix_}, log.Handlers());
  ASSERT_TRUE(
      Eventually([&] { return watch->connected(); }, absl::Seconds(10)));
  EXPECT_GT(watch->next_revision(), 0);

  cluster_->Kill(member);
  ASSERT_TRUE(Eventually([&] { return writer->Put(prefix_ + "k", "v").ok(); },
                         absl::Seconds(10)));
  ASSERT_OK(cluster_->Restart(member));
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(15)));
  EXPECT_EQ(log.events()[0].kv.value, "v");
}

TEST_F(EtcdClientTest, KeepAliveHoldsAKeyBeyondItsTtlAndStoppingLetsItExpire) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(Lease lease, client->LeaseGrant(absl::Seconds(2)));
  EXPECT_GE(lease.ttl, absl::Seconds(2));
  const std::string key = prefix_ + "member";
  ASSERT_OK(client->Put(key, "replica-1", lease.id));
  std::atomic<bool> lost{false};
  auto keep_alive =
      client->KeepAlive(lease, [&](absl::Status) { lost = true; });

  // Past the TTL: without renewals the key would be gone.
  absl::SleepFor(lease.ttl + absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> alive, client->Get(key));
  ASSERT_TRUE(alive.has_value());
  EXPECT_EQ(alive->lease, lease.id);
  EXPECT_FALSE(lost);
  EXPECT_FALSE(keep_alive->lost());

  const absl::Time stopped = absl::Now();
  keep_alive.reset();
  ASSERT_TRUE(Eventually(
      [&] {
        absl::StatusOr<std::optional<KeyValue>> kv = client->Get(key);
        return kv.ok() && !kv->has_value();
      },
      lease.ttl + absl::Seconds(5)));
  // Not before the TTL since the last renewal could have run out.
  EXPECT_GE(absl::Now() - stopped, lease.ttl / 3);
}

TEST_F(EtcdClientTest, RevokingALeaseDeletesItsKeysAndTheKeepAliveReportsLoss) {
  auto client = NewClient();
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(Lease lease, client->LeaseGrant(absl::Seconds(2)));
  const std::string key = prefix_ + "member";
  ASSERT_OK(client->Put(key, "replica-1", lease.id));
  Mutex mu;
  std::optional<absl::Status> loss;
  auto keep_alive = client->KeepAlive(lease, [&](absl::Status s) {
    MutexLock lock(&mu);
    loss = std::move(s);
  });

  ASSERT_OK(client->LeaseRevoke(lease.id));
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> gone, client->Get(key));
  EXPECT_FALSE(gone.has_value());
  {
    MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return loss.has_value(); },
        lease.ttl + absl::Seconds(3)));
    EXPECT_THAT(*loss, ::aside::testing::StatusIs(absl::StatusCode::kNotFound,
                                                  HasSubstr("lease")));
  }
  EXPECT_TRUE(keep_alive->lost());
  EXPECT_THAT(client->LeaseRevoke(lease.id),
              ::aside::testing::StatusIs(absl::StatusCode::kNotFound,
                                         HasSubstr("not found")));
}

TEST_F(EtcdClientTest, WritesResumeAfterTheLeaderIsKilled) {
  // A write sent to a follower that has not yet noticed the loss waits for
  // its deadline (its outcome is unknown, so it is not resent elsewhere);
  // a short deadline lets the next attempt come sooner.
  EtcdClientOptions options;
  options.request_timeout = absl::Seconds(2);
  auto client = NewClient(options);
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(const int leader, cluster_->Leader());
  ASSERT_OK(client->Put(prefix_ + "before", "x"));
  cluster_->Kill(leader);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE(
      Eventually([&] { return client->Put(prefix_ + "after", "y").ok(); },
                 absl::Seconds(15)));
  // An election takes a few election timeouts (1 s each).
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  ASSERT_OK_AND_ASSIGN(const int successor, cluster_->Leader());
  EXPECT_NE(successor, leader);
  ASSERT_OK(cluster_->Restart(leader));
}

TEST_F(EtcdClientTest, CallsFailWithinTheirDeadlineWhileEveryMemberIsDown) {
  EtcdClientOptions options;
  options.dial_timeout = absl::Milliseconds(500);
  options.request_timeout = absl::Seconds(2);
  auto client = NewClient(options);
  ASSERT_NE(client, nullptr);
  ASSERT_OK(client->Put(prefix_ + "k", "before"));
  ASSERT_OK_AND_ASSIGN(Lease lease, client->LeaseGrant(absl::Seconds(2)));
  Mutex mu;
  std::optional<absl::Status> loss;
  auto keep_alive = client->KeepAlive(lease, [&](absl::Status s) {
    MutexLock lock(&mu);
    loss = std::move(s);
  });
  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Stop(i);
  }

  const absl::Duration slack = absl::Seconds(1);
  auto expect_down = [&](const absl::Status& s, absl::Time started) {
    EXPECT_LE(absl::Now() - started, options.request_timeout + slack);
    EXPECT_THAT(s.code(), AnyOf(absl::StatusCode::kUnavailable,
                                absl::StatusCode::kDeadlineExceeded))
        << s;
    for (const std::string& endpoint : cluster_->endpoints()) {
      EXPECT_THAT(s.message(), HasSubstr(endpoint));
    }
  };
  absl::Time t = absl::Now();
  expect_down(client->Get(prefix_ + "k").status(), t);
  t = absl::Now();
  expect_down(client->Put(prefix_ + "k", "during").status(), t);
  t = absl::Now();
  expect_down(
      client
          ->Txn({Compare::Absent(prefix_ + "x")}, {Op::Put(prefix_ + "x", "1")})
          .status(),
      t);
  t = absl::Now();
  expect_down(client->LeaseGrant(absl::Seconds(5)).status(), t);
  // No renewal can succeed: the keep-alive reports the loss once the TTL
  // since its last renewal has run out.
  {
    MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(
        [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return loss.has_value(); },
        lease.ttl + absl::Seconds(2)));
    EXPECT_THAT(*loss, ::aside::testing::StatusIs(
                           absl::StatusCode::kUnavailable,
                           HasSubstr("expired before a renewal succeeded")));
  }

  for (int i = 0; i < cluster_->size(); ++i) {
    ASSERT_OK(cluster_->StartMember(i));
  }
  ASSERT_OK(cluster_->WaitServing(absl::Seconds(20)));
  absl::Status put;
  ASSERT_TRUE(Eventually(
      [&] {
        put = client->Put(prefix_ + "k", "after").status();
        return put.ok();
      },
      absl::Seconds(5)))
      << put;
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, client->Get(prefix_ + "k"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "after");
}

// A member that holds its connections open and answers nothing (stopped,
// or cut off by a partition): reads move on to another member within
// their deadline, and a watch on it notices through HTTP/2 pings and
// resumes elsewhere without losing an event.
TEST_F(EtcdClientTest, AHungMemberIsLeftForAnother) {
  ASSERT_OK_AND_ASSIGN(const int leader, cluster_->Leader());
  const int hung = (leader + 1) % cluster_->size();
  EtcdClientOptions options;
  options.endpoints = {cluster_->endpoint(hung)};
  for (int i = 0; i < cluster_->size(); ++i) {
    if (i != hung) {
      options.endpoints.push_back(cluster_->endpoint(i));
    }
  }
  options.dial_timeout = absl::Milliseconds(500);
  options.request_timeout = absl::Seconds(3);
  options.keepalive_time = absl::Seconds(1);
  options.keepalive_timeout = absl::Seconds(1);
  options.endpoint_order = EndpointOrder::kListed;
  auto client = NewClient(options);
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(const int64_t start, client->Put(prefix_ + "k", "0"));
  WatchLog log;
  auto watch = client->WatchPrefix({.prefix = prefix_, .start_revision = start},
                                   log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(10)));
  ASSERT_EQ(watch->endpoint(), cluster_->endpoint(hung));

  cluster_->Pause(hung);
  const absl::Time paused = absl::Now();
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, client->Get(prefix_ + "k"));
  EXPECT_LT(absl::Now() - paused, options.request_timeout);
  ASSERT_TRUE(kv.has_value());
  // A write sent to the hung member before the client leaves it ends with
  // its outcome unknown; conditioned on the previous value, a retry writes
  // at most once.
  for (int i = 1; i <= 3; ++i) {
    const std::string key = prefix_ + "k";
    ASSERT_TRUE(Eventually(
        [&] {
          absl::StatusOr<TxnResult> r =
              client->Txn({Compare::Value(key, absl::StrCat(i - 1))},
                          {Op::Put(key, absl::StrCat(i))}, {Op::Get(key)});
          if (!r.ok()) {
            return false;
          }
          return r->succeeded ||
                 (r->reads.size() == 1 && r->reads[0].size() == 1 &&
                  r->reads[0][0].value == absl::StrCat(i));
        },
        absl::Seconds(15)))
        << i;
  }
  ASSERT_TRUE(log.WaitForEvents(4, absl::Seconds(15)));
  const std::vector<Event> events = log.events();
  ASSERT_EQ(events.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(events[i].kv.value, absl::StrCat(i));
  }
  EXPECT_NE(watch->endpoint(), cluster_->endpoint(hung));
  cluster_->Resume(hung);
}

// The same without keep-alive pings (etcd's default refuses them more often
// than every 5 s): the watch asks its silent member for a progress report,
// leaves it when no answer comes within dial_timeout, and resumes on another
// member without losing or repeating an event; calls then start elsewhere
// too. A lease renewal gives up on the member in time to renew the lease
// through another.
TEST_F(EtcdClientTest, AFrozenMemberIsLeftWithoutKeepAlivePings) {
  ASSERT_OK_AND_ASSIGN(const int leader, cluster_->Leader());
  const int frozen = (leader + 1) % cluster_->size();
  EtcdClientOptions options;
  options.endpoints = {cluster_->endpoint(frozen)};
  std::vector<std::string> healthy;
  for (int i = 0; i < cluster_->size(); ++i) {
    if (i != frozen) {
      options.endpoints.push_back(cluster_->endpoint(i));
      healthy.push_back(cluster_->endpoint(i));
    }
  }
  options.dial_timeout = absl::Milliseconds(500);
  options.request_timeout = absl::Seconds(3);
  options.keepalive_time = absl::Hours(1);
  options.endpoint_order = EndpointOrder::kListed;
  auto client = NewClient(options);
  auto writer = NewClient({.endpoints = healthy});
  ASSERT_NE(client, nullptr);
  ASSERT_NE(writer, nullptr);
  ASSERT_OK_AND_ASSIGN(const int64_t start, client->Put(prefix_ + "k", "0"));
  ASSERT_OK_AND_ASSIGN(Lease lease, client->LeaseGrant(absl::Seconds(3)));
  ASSERT_OK(client->Put(prefix_ + "leased", "x", lease.id));
  std::atomic<bool> lost{false};
  auto keep_alive =
      client->KeepAlive(lease, [&](absl::Status) { lost = true; });
  WatchLog log;
  auto watch = client->WatchPrefix({.prefix = prefix_, .start_revision = start},
                                   log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(2, absl::Seconds(10)));
  ASSERT_EQ(watch->endpoint(), cluster_->endpoint(frozen));

  cluster_->Pause(frozen);
  const absl::Time frozen_at = absl::Now();
  ASSERT_OK(writer->Put(prefix_ + "k", "1").status());
  // A probe after 500 ms of silence, dial_timeout for its answer.
  const absl::Duration bound =
      options.watch_probe_interval + options.dial_timeout + absl::Seconds(1);
  ASSERT_TRUE(log.WaitForEvents(3, bound - (absl::Now() - frozen_at)))
      << "the watch on the frozen member got nothing within "
      << absl::FormatDuration(bound);
  std::cout << "the watch left the frozen member after "
            << absl::FormatDuration(absl::Now() - frozen_at) << "\n";
  EXPECT_NE(watch->endpoint(), cluster_->endpoint(frozen));
  EXPECT_EQ(log.disconnections(), 1);
  // Calls no longer start at the frozen member.
  const absl::Time sent = absl::Now();
  ASSERT_OK(client->Put(prefix_ + "k", "2").status());
  EXPECT_LT(absl::Now() - sent, options.dial_timeout);
  ASSERT_TRUE(log.WaitForEvents(4, absl::Seconds(5)));
  const std::vector<Event> events = log.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kv.value, "0");
  EXPECT_EQ(events[1].kv.key, prefix_ + "leased");
  EXPECT_EQ(events[2].kv.value, "1");
  EXPECT_EQ(events[3].kv.value, "2");

  // Two TTLs with the member still frozen: the lease lives on.
  const absl::Time until = frozen_at + 2 * lease.ttl;
  while (absl::Now() < until && !lost) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_FALSE(lost);
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> leased,
                       writer->Get(prefix_ + "leased"));
  EXPECT_TRUE(leased.has_value());
  cluster_->Resume(frozen);
}

// A watch with nothing to deliver is probed twice a second: the answers
// neither end it nor show up as batches.
TEST_F(EtcdClientTest, AnIdleWatchIsProbedQuietly) {
  auto client = NewClient({.keepalive_time = absl::Hours(1)});
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(const int64_t start, client->Put(prefix_ + "k", "0"));
  WatchLog log;
  auto watch = client->WatchPrefix({.prefix = prefix_, .start_revision = start},
                                   log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(10)));
  const std::string endpoint = watch->endpoint();
  // The store moves past the watch's next revision, outside its prefix: an
  // answer to a probe carries that revision but is no progress report.
  ASSERT_OK(client->Put("/elsewhere" + prefix_, "x").status());
  // Over several probes (every 500 ms of silence).
  const absl::Time until = absl::Now() + absl::Seconds(3);
  while (absl::Now() < until) {
    EXPECT_TRUE(watch->connected());
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(log.disconnections(), 0);
  EXPECT_EQ(log.batches(), 1);
  EXPECT_EQ(watch->endpoint(), endpoint);
  ASSERT_OK(client->Put(prefix_ + "k", "1").status());
  ASSERT_TRUE(log.WaitForEvents(2, absl::Seconds(5)));
  EXPECT_EQ(watch->next_revision(), log.events().back().kv.mod_revision + 1);
}

// A port that accepts connections but never speaks: the kernel completes
// the handshake from the listen backlog.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { close(fd_); }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(EtcdClientTest, UnreachableEndpointsFirstInTheListAreSkipped) {
  SilentListener silent;
  const std::string refused =
      absl::StrCat("127.0.0.1:", ::aside::testing::PickUnusedPort());
  EtcdClientOptions options;
  options.endpoints = {refused, silent.endpoint()};
  for (const std::string& e : cluster_->endpoints()) {
    options.endpoints.push_back(e);
  }
  options.dial_timeout = absl::Milliseconds(300);
  options.request_timeout = absl::Seconds(3);
  options.endpoint_order = EndpointOrder::kListed;
  auto client = NewClient(options);
  ASSERT_NE(client, nullptr);

  const absl::Time started = absl::Now();
  ASSERT_OK_AND_ASSIGN(const int64_t revision, client->Put(prefix_ + "k", "v"));
  EXPECT_LT(absl::Now() - started, absl::Seconds(2));
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, client->Get(prefix_ + "k"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->mod_revision, revision);

  // A watch also finds its way past them.
  WatchLog log;
  auto watch = client->WatchPrefix(
      {.prefix = prefix_, .start_revision = revision}, log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(10)));
  EXPECT_EQ(cluster_->IndexOf(watch->endpoint()) >= 0, true)
      << watch->endpoint();
}

// With authentication on: the client logs in, sends its token on calls and
// watches, and logs in again when the token expires (here after 1 s idle).
TEST(EtcdClientAuthTest, LogsInAndLogsInAgainWhenTheTokenExpires) {
  EtcdCluster::Options cluster_options;
  cluster_options.extra_args = {"--auth-token-ttl", "1"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdCluster> cluster,
                       EtcdCluster::Start(cluster_options));
  ASSERT_OK(cluster->Etcdctl({"user", "add", "root:secret"}));
  ASSERT_OK(cluster->Etcdctl({"user", "grant-role", "root", "root"}));
  ASSERT_OK(cluster->Etcdctl({"auth", "enable"}));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> client,
                       EtcdClient::Create({.endpoints = cluster->endpoints(),
                                           .username = "root",
                                           .password = "secret"}));
  ASSERT_OK_AND_ASSIGN(const int64_t first, client->Put("/auth/k", "1"));
  WatchLog log;
  auto watch = client->WatchPrefix(
      {.prefix = "/auth/", .start_revision = first}, log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(10)));

  absl::SleepFor(absl::Seconds(3));  // the token expires
  ASSERT_OK(client->Put("/auth/k", "2"));
  ASSERT_OK_AND_ASSIGN(std::optional<KeyValue> kv, client->Get("/auth/k"));
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(kv->value, "2");
  ASSERT_TRUE(log.WaitForEvents(2, absl::Seconds(10)));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> anonymous,
                       EtcdClient::Create({.endpoints = cluster->endpoints()}));
  EXPECT_FALSE(anonymous->Get("/auth/k").ok());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> wrong,
                       EtcdClient::Create({.endpoints = cluster->endpoints(),
                                           .username = "root",
                                           .password = "wrong"}));
  absl::Status refused = wrong->Get("/auth/k").status();
  EXPECT_FALSE(refused.ok());
  EXPECT_THAT(refused.message(), HasSubstr("Authenticate as 'root'"));
}

// Mutual TLS: the client verifies the members against the CA and presents
// its own certificate; without either it gets nowhere.
TEST(EtcdClientTlsTest, TalksToMembersThatRequireClientCertificates) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdCluster> cluster,
                       EtcdCluster::Start({.tls = true}));
  const TlsOptions tls = {.ca_file = cluster->ca_file(),
                          .cert_file = cluster->client_cert_file(),
                          .key_file = cluster->client_key_file()};
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<EtcdClient> client,
      EtcdClient::Create({.endpoints = cluster->endpoints(), .tls = tls}));
  ASSERT_OK_AND_ASSIGN(const int64_t revision, client->Put("/tls/k", "v"));
  WatchLog log;
  auto watch = client->WatchPrefix(
      {.prefix = "/tls/", .start_revision = revision}, log.Handlers());
  ASSERT_TRUE(log.WaitForEvents(1, absl::Seconds(10)));
  ASSERT_OK_AND_ASSIGN(
      std::string out,
      cluster->Etcdctl({"get", "--print-value-only", "/tls/k"}));
  EXPECT_EQ(out, "v\n");

  const EtcdClientOptions quick = {.endpoints = cluster->endpoints(),
                                   .dial_timeout = absl::Milliseconds(500),
                                   .request_timeout = absl::Seconds(1)};
  EtcdClientOptions plaintext = quick;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> plain,
                       EtcdClient::Create(plaintext));
  EXPECT_FALSE(plain->Get("/tls/k").ok());
  EtcdClientOptions anonymous = quick;
  anonymous.tls = TlsOptions{.ca_file = cluster->ca_file()};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<EtcdClient> no_certificate,
                       EtcdClient::Create(anonymous));
  EXPECT_FALSE(no_certificate->Get("/tls/k").ok());
}

TEST(EtcdSpreadTest, ClientsSpreadOverTheEndpoints) {
  // Pods of a Deployment: one host name each, the same process id.
  std::vector<int> pods(3, 0);
  for (int i = 0; i < 60; ++i) {
    ++pods[SpreadIndex(absl::StrCat("aside-7d9f8c-", i), 1, 3)];
  }
  // Processes on one host.
  std::vector<int> processes(3, 0);
  for (int pid = 100; pid < 160; ++pid) {
    ++processes[SpreadIndex("host", pid, 3)];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(pods[i], 10) << i;
    EXPECT_GE(processes[i], 10) << i;
  }
  // The same every time; always an index.
  EXPECT_EQ(SpreadIndex("aside-0", 1, 5), SpreadIndex("aside-0", 1, 5));
  EXPECT_EQ(SpreadIndex("aside-0", 1, 1), 0u);
  EXPECT_EQ(SpreadIndex("", 0, 0), 0u);
}

TEST(EtcdClientOptionsTest, RejectsWhatCannotWork) {
  EXPECT_THAT(EtcdClient::Create({}),
              ::aside::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("no endpoints")));
  EXPECT_THAT(EtcdClient::Create({.endpoints = {"http://127.0.0.1:2379"}}),
              ::aside::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("host:port")));
  EXPECT_THAT(
      EtcdClient::Create({.endpoints = {"127.0.0.1:2379"},
                          .tls = TlsOptions{.cert_file = "/nonexistent"}}),
      ::aside::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("together")));
}

TEST(EtcdClientPrefixEndTest, IncrementsTheLastByteThatCan) {
  EXPECT_EQ(EtcdClient::PrefixEnd("a/"), "a0");
  EXPECT_EQ(EtcdClient::PrefixEnd("a\xff"), "b");
  EXPECT_EQ(EtcdClient::PrefixEnd("\xff\xff"), std::string(1, '\0'));
  EXPECT_EQ(EtcdClient::PrefixEnd(""), std::string(1, '\0'));
}

}  // namespace
}  // namespace aside::server::etcd
