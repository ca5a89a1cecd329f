// The Admin mutation queue's admission: refusals by queue length and by
// the oldest write's wait (on a FakeClock), each with a retry hint, and
// admission again once the queue drains.
#include "server/api/mutation_queue.h"

#include <gtest/gtest.h>

#include <atomic>

#include "absl/cleanup/cleanup.h"
#include "absl/time/time.h"
#include "lib/clock.h"
#include "lib/sync.h"

namespace aside::server {
namespace {

// Jobs that block until the test opens the gate, counting how many ran.
class Gate {
 public:
  void Open() {
    aside::MutexLock lock(&mu_);
    open_ = true;
  }
  void Pass() {
    aside::MutexLock lock(&mu_);
    ++entered_;
    mu_.AwaitWithTimeout(aside::Cond(&open_), absl::Seconds(30));
    ++done_;
  }
  bool AwaitEntered(int n) {
    aside::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [&] {
          mu_.AssertHeld();
          return entered_ >= n;
        },
        absl::Seconds(10));
  }
  bool AwaitDone(int n) {
    aside::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        [&] {
          mu_.AssertHeld();
          return done_ >= n;
        },
        absl::Seconds(10));
  }

 private:
  aside::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int entered_ ABSL_GUARDED_BY(mu_) = 0;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(MutationQueueTest, AFullQueueRefusesWithAHintUntilItDrains) {
  FakeClock clock;
  Gate gate;
  MutationQueue queue({.max_workers = 2,
                       .max_queued = 3,
                       .max_wait = absl::Hours(1),
                       .clock = &clock});
  absl::Cleanup open = [&] { gate.Open(); };  // before the queue ends
  // Two run (and block), three wait: the queue is full.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(queue.Admit().admitted) << i;
    queue.Run([&] { gate.Pass(); });
  }
  ASSERT_TRUE(gate.AwaitEntered(2));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(queue.Admit().admitted) << i;
    queue.Run([&] { gate.Pass(); });
  }
  MutationQueue::Stats stats = queue.stats();
  EXPECT_EQ(stats.workers, 2u);
  EXPECT_EQ(stats.running, 2u);
  EXPECT_EQ(stats.queued, 3u);

  MutationQueue::Admission a = queue.Admit();
  EXPECT_FALSE(a.admitted);
  EXPECT_NE(a.reason.find("admin.max_queued_writes"), std::string::npos)
      << a.reason;
  EXPECT_GE(a.retry_after, MutationQueue::kMinRetryHint);
  EXPECT_LE(a.retry_after, MutationQueue::kMaxRetryHint);
  EXPECT_EQ(queue.stats().refused, 1u);

  gate.Open();
  ASSERT_TRUE(gate.AwaitDone(5));
  EXPECT_TRUE(queue.Admit(3).admitted);
  // More at once than the queue holds: refused whatever the queue is.
  EXPECT_FALSE(queue.Admit(4).admitted);
}

TEST(MutationQueueTest, AnOldWaitingWriteRefusesNewOnesUntilItRuns) {
  FakeClock clock;
  Gate gate;
  MutationQueue queue({.max_workers = 1,
                       .max_queued = 100,
                       .max_wait = absl::Seconds(1),
                       .clock = &clock});
  absl::Cleanup open = [&] { gate.Open(); };
  queue.Run([&] { gate.Pass(); });
  ASSERT_TRUE(gate.AwaitEntered(1));
  queue.Run([&] { gate.Pass(); });  // waits behind the first
  clock.Advance(absl::Milliseconds(999));
  EXPECT_TRUE(queue.Admit().admitted);
  clock.Advance(absl::Milliseconds(1));
  MutationQueue::Admission a = queue.Admit();
  EXPECT_FALSE(a.admitted);
  EXPECT_NE(a.reason.find("admin.max_write_wait"), std::string::npos)
      << a.reason;
  gate.Open();
  ASSERT_TRUE(gate.AwaitDone(2));
  EXPECT_TRUE(queue.Admit().admitted);
}

TEST(MutationQueueTest, TheHintFollowsHowLongJobsTook) {
  FakeClock clock;
  Gate gate;
  MutationQueue queue({.max_workers = 1,
                       .max_queued = 1,
                       .max_wait = absl::Hours(1),
                       .clock = &clock});
  absl::Cleanup open = [&] { gate.Open(); };
  // One job that takes 200 ms of the clock teaches the queue its pace.
  std::atomic<bool> advanced{false};
  queue.Run([&] {
    clock.Advance(absl::Milliseconds(200));
    advanced = true;
  });
  queue.Run([&] { gate.Pass(); });
  ASSERT_TRUE(gate.AwaitEntered(1));
  ASSERT_TRUE(advanced);
  queue.Run([&] { gate.Pass(); });  // the one waiting
  MutationQueue::Admission a = queue.Admit();
  ASSERT_FALSE(a.admitted);
  // Two jobs ahead of a retry (the waiting one and the retry itself), one
  // worker, 200 ms each.
  EXPECT_EQ(a.retry_after, absl::Milliseconds(400));
  gate.Open();
  ASSERT_TRUE(gate.AwaitDone(2));
}

}  // namespace
}  // namespace aside::server
