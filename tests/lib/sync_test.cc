// aside::Mutex's waits: Await, AwaitWithTimeout and AwaitUntil wake on a
// change made under the mutex, time out when nothing changes, and a waiter
// may destroy the mutex as soon as its condition holds.
#include "lib/sync.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

namespace aside {
namespace {

TEST(MutexTest, AwaitWakesOnAChangeUnderTheLock) {
  Mutex mu;
  bool ready = false;
  std::thread setter([&] {
    MutexLock lock(&mu);
    ready = true;
  });
  {
    MutexLock lock(&mu);
    mu.Await(Cond(&ready));
    EXPECT_TRUE(ready);
  }
  setter.join();
}

TEST(MutexTest, AwaitWithTimeoutReturnsFalseWhenNothingChanges) {
  Mutex mu;
  bool ready = false;
  MutexLock lock(&mu);
  EXPECT_FALSE(mu.AwaitWithTimeout(Cond(&ready), absl::Milliseconds(10)));
  ready = true;
  EXPECT_TRUE(mu.AwaitWithTimeout(Cond(&ready), absl::ZeroDuration()));
}

TEST(MutexTest, AwaitUntilHonoursTheDeadline) {
  Mutex mu;
  bool ready = false;
  MutexLock lock(&mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(
      mu.AwaitUntil(Cond(&ready), start + std::chrono::milliseconds(20)));
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(20));
  // A deadline in the past still evaluates the condition.
  ready = true;
  EXPECT_TRUE(mu.AwaitUntil(Cond(&ready), start));
}

TEST(MutexTest, AwaitUntilWakesBeforeTheDeadline) {
  Mutex mu;
  int value = 0;
  std::thread setter([&] {
    MutexLock lock(&mu);
    value = 7;
  });
  {
    MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitUntil(
        [&] {
          mu.AssertHeld();
          return value == 7;
        },
        std::chrono::steady_clock::now() + std::chrono::hours(1)));
  }
  setter.join();
}

// A thread that changes state and then waits releases the mutex in the
// wait, not in Unlock: the other waiters are told all the same. Here each
// thread, in turn, changes what the other waits for and then waits in the
// same critical section; without that, each would sleep out its timeout
// (and the second wait of this thread ends before the other's, false).
TEST(MutexTest, AChangeFollowedByAWaitWakesTheOtherWaiters) {
  Mutex mu;
  bool ready = false;  // guarded by mu
  int step = 0;        // guarded by mu
  std::thread other([&] {
    MutexLock lock(&mu);
    ready = true;
    if (mu.AwaitWithTimeout(
            [&] {
              mu.AssertHeld();
              return step >= 1;
            },
            absl::Seconds(20))) {
      step = 2;
    }
  });
  {
    MutexLock lock(&mu);
    ASSERT_TRUE(mu.AwaitWithTimeout(Cond(&ready), absl::Seconds(5)));
    step = 1;
    EXPECT_TRUE(mu.AwaitWithTimeout(
        [&] {
          mu.AssertHeld();
          return step == 2;
        },
        absl::Seconds(10)));
  }
  other.join();
}

// The waiter owns the mutex and frees it once its condition holds, while
// the thread that made the condition true is still in Unlock. Under
// ThreadSanitizer or AddressSanitizer a notification sent after the unlock
// would touch freed memory.
TEST(MutexTest, WaiterMayDestroyTheMutexOnceTheConditionHolds) {
  struct Done {
    Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
  };
  for (int i = 0; i < 200; ++i) {
    auto state = std::make_unique<Done>();
    Done* raw = state.get();
    std::thread setter([raw] {
      MutexLock lock(&raw->mu);
      raw->done = true;
    });
    {
      MutexLock lock(&state->mu);
      state->mu.Await(Cond(&state->done));
    }
    state.reset();
    setter.join();
  }
}

}  // namespace
}  // namespace aside
