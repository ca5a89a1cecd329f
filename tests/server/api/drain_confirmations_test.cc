// DrainConfirmations on its own: a Subscription keeps the newest
// generation confirmed (lower ones ignored, from any number of threads),
// and a waiter registering while subscribers confirm is always told,
// whichever of the two comes first. Changed() runs inside the Confirm or
// Unsubscribe that reached the waiter, so once every thread has joined a
// waiter that was not told has been missed: no test here waits for one.
#include "server/api/drain_confirmations.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace aside::server {
namespace {

using Subscription = DrainConfirmations::Subscription;
using SubscriptionPtr = DrainConfirmations::SubscriptionPtr;

DrainConfirmations::Subscriber Who(const std::string& peer) {
  return {DrainConfirmations::Edge::kWatch, "stub", peer};
}

// A drain wait as Admin.WaitDrained runs it: looks once when registered,
// then again on every Changed(); done once nobody is pending.
class TestWaiter final : public DrainConfirmations::Waiter {
 public:
  TestWaiter(DrainConfirmations* confirmations, std::string group,
             uint64_t generation)
      : confirmations_(confirmations),
        group_(std::move(group)),
        generation_(generation) {}

  uint64_t generation() const override { return generation_; }
  void Changed() override {
    changed_.fetch_add(1);
    Check();
  }

  void Check() {
    if (confirmations_->PendingCount(group_, generation_) == 0) {
      done_.store(true);
    }
  }
  bool done() const { return done_.load(); }
  int changed() const { return changed_.load(); }

 private:
  DrainConfirmations* const confirmations_;
  const std::string group_;
  const uint64_t generation_;
  std::atomic<bool> done_{false};
  std::atomic<int> changed_{0};
};

std::shared_ptr<TestWaiter> Wait(DrainConfirmations* c,
                                 const std::string& group,
                                 uint64_t generation) {
  auto w = std::make_shared<TestWaiter>(c, group, generation);
  c->AddWaiter(group, w);
  w->Check();
  return w;
}

TEST(DrainConfirmationsTest, LowerGenerationsAreIgnored) {
  DrainConfirmations c;
  SubscriptionPtr sub = c.Subscribe("g", Who("a"));
  sub->Confirm(5);
  sub->Confirm(3);
  sub->Confirm(5);
  EXPECT_EQ(sub->confirmed(), 5u);
  EXPECT_EQ(c.PendingCount("g", 5), 0u);
  EXPECT_EQ(c.PendingCount("g", 6), 1u);
  std::vector<DrainConfirmations::Pending> pending = c.PendingFor("g", 6);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].confirmed, 5u);
  EXPECT_EQ(pending[0].who.peer, "a");
}

TEST(DrainConfirmationsTest, ASubscriptionThatLeftChangesNothing) {
  DrainConfirmations c;
  SubscriptionPtr first = c.Subscribe("g", Who("a"));
  first->Confirm(4);
  EXPECT_EQ(c.subscribers("g"), 1u);
  std::vector<DrainConfirmations::Pending> pending = c.PendingFor("g", 5);
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].confirmed, 4u);
  EXPECT_EQ(pending[0].who.peer, "a");

  // Once it left, subscribing again starts over with a new Subscription;
  // the old one changes nothing, and unsubscribing it again is a no-op.
  c.Unsubscribe(*first);
  EXPECT_EQ(c.subscribers("g"), 0u);
  SubscriptionPtr later = c.Subscribe("g", Who("a"));
  EXPECT_NE(later, first);
  first->Confirm(9);
  c.Unsubscribe(*first);
  EXPECT_EQ(c.subscribers("g"), 1u);
  EXPECT_EQ(c.PendingCount("g", 1), 1u);
  c.Unsubscribe(*later);
  EXPECT_EQ(c.subscribers("g"), 0u);
}

TEST(DrainConfirmationsTest, WaiterIsToldOnceWhenReached) {
  DrainConfirmations c;
  SubscriptionPtr a = c.Subscribe("g", Who("a"));
  SubscriptionPtr b = c.Subscribe("g", Who("b"));
  std::shared_ptr<TestWaiter> w = Wait(&c, "g", 3);
  EXPECT_FALSE(w->done());

  a->Confirm(2);  // below the wait
  EXPECT_EQ(w->changed(), 0);
  a->Confirm(3);
  EXPECT_EQ(w->changed(), 1);
  EXPECT_FALSE(w->done());  // b holds it up
  a->Confirm(7);            // reached already
  EXPECT_EQ(w->changed(), 1);
  b->Confirm(4);
  EXPECT_EQ(w->changed(), 2);
  EXPECT_TRUE(w->done());
  c.RemoveWaiter("g", w.get());
}

TEST(DrainConfirmationsTest, OnlyTheGroupsWaitersAreTold) {
  DrainConfirmations c;
  SubscriptionPtr a = c.Subscribe("a", Who("a"));
  SubscriptionPtr b = c.Subscribe("b", Who("b"));
  std::shared_ptr<TestWaiter> w = Wait(&c, "b", 1);
  a->Confirm(1);
  EXPECT_EQ(w->changed(), 0);
  b->Confirm(1);
  EXPECT_EQ(w->changed(), 1);
  EXPECT_TRUE(w->done());
  c.RemoveWaiter("b", w.get());
}

TEST(DrainConfirmationsTest, LeavingReleasesTheWait) {
  DrainConfirmations c;
  SubscriptionPtr a = c.Subscribe("g", Who("a"));
  a->Confirm(1);
  std::shared_ptr<TestWaiter> w = Wait(&c, "g", 5);
  EXPECT_FALSE(w->done());
  c.Unsubscribe(*a);
  EXPECT_TRUE(w->done());
  c.RemoveWaiter("g", w.get());
}

// Several threads confirm the same subscriptions, in no particular order,
// while another registers waiters for every generation: each waiter is
// done as soon as the threads are, and each subscription holds the
// highest generation confirmed.
TEST(DrainConfirmationsTest, ConcurrentConfirmNeverMissesAWaiter) {
  constexpr int kRounds = 200;
  constexpr int kSubscribers = 3;
  constexpr int kConfirmers = 3;
  constexpr uint64_t kGenerations = 40;
  DrainConfirmations c;
  for (int round = 0; round < kRounds; ++round) {
    const std::string group = "g" + std::to_string(round);
    std::vector<SubscriptionPtr> subs;
    for (int i = 0; i < kSubscribers; ++i) {
      subs.push_back(c.Subscribe(group, Who(std::to_string(i))));
    }
    std::atomic<int> ready{0};
    auto start_together = [&ready] {
      ready.fetch_add(1);
      while (ready.load() < kConfirmers + 1) {
        std::this_thread::yield();
      }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kConfirmers; ++t) {
      threads.emplace_back([&, t] {
        start_together();
        // Thread t runs a different order: rising, falling, or
        // interleaved, so lower generations come after higher ones.
        for (uint64_t k = 0; k < kGenerations; ++k) {
          uint64_t g = k + 1;
          if (t % 3 == 1) {
            g = kGenerations - k;
          } else if (t % 3 == 2) {
            g = (k * 7) % kGenerations + 1;
          }
          for (const SubscriptionPtr& s : subs) {
            s->Confirm(g);
          }
        }
      });
    }
    std::vector<std::shared_ptr<TestWaiter>> waiters;
    threads.emplace_back([&] {
      start_together();
      for (uint64_t g = kGenerations; g >= 1; --g) {
        waiters.push_back(Wait(&c, group, g));
      }
    });
    for (std::thread& t : threads) {
      t.join();
    }
    for (const SubscriptionPtr& s : subs) {
      EXPECT_EQ(s->confirmed(), kGenerations);
    }
    EXPECT_EQ(c.PendingCount(group, kGenerations), 0u);
    for (const std::shared_ptr<TestWaiter>& w : waiters) {
      ASSERT_TRUE(w->done()) << "round " << round << ": waiter for "
                             << w->generation() << " was never told";
      c.RemoveWaiter(group, w.get());
    }
    for (const SubscriptionPtr& s : subs) {
      c.Unsubscribe(*s);
    }
    EXPECT_EQ(c.subscribers(group), 0u);
  }
}

// One thread confirms generation after generation while another registers
// a waiter for each, in step: Confirm(g) runs as the waiter for g
// registers, with no other waiter (so Confirm may take its lock-free way
// out), which is where a wakeup would be lost. The waiter is checked once
// that Confirm returned, and removed before the next.
TEST(DrainConfirmationsTest, WaiterRegisteringWhileConfirmingIsTold) {
  constexpr uint64_t kGenerations = 2000;
  DrainConfirmations c;
  SubscriptionPtr sub = c.Subscribe("g", Who("a"));
  // The generation whose waiter is registering, and the newest whose
  // Confirm returned.
  std::atomic<uint64_t> registering{0};
  std::atomic<uint64_t> confirmed{0};
  std::thread confirm([&] {
    for (uint64_t g = 1; g <= kGenerations; ++g) {
      while (registering.load() < g) {
        std::this_thread::yield();
      }
      sub->Confirm(g);
      confirmed.store(g);
    }
  });
  for (uint64_t g = 1; g <= kGenerations; ++g) {
    registering.store(g);
    std::shared_ptr<TestWaiter> w = Wait(&c, "g", g);
    while (confirmed.load() < g) {
      std::this_thread::yield();
    }
    ASSERT_TRUE(w->done()) << "the waiter for " << g << " was never told";
    c.RemoveWaiter("g", w.get());
  }
  confirm.join();
}

// A subscriber leaving while it confirms: a waiter its last Confirm
// reached is told by one of the two.
TEST(DrainConfirmationsTest, ConfirmRacingUnsubscribeStillTells) {
  constexpr int kRounds = 500;
  DrainConfirmations c;
  for (int round = 0; round < kRounds; ++round) {
    const std::string group = "g" + std::to_string(round);
    SubscriptionPtr sub = c.Subscribe(group, Who("a"));
    std::shared_ptr<TestWaiter> w = Wait(&c, group, 1);
    ASSERT_FALSE(w->done());
    std::atomic<int> ready{0};
    auto start_together = [&ready] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
        std::this_thread::yield();
      }
    };
    std::thread confirm([&] {
      start_together();
      sub->Confirm(1);
    });
    std::thread leave([&] {
      start_together();
      c.Unsubscribe(*sub);
    });
    confirm.join();
    leave.join();
    ASSERT_TRUE(w->done()) << "round " << round;
    c.RemoveWaiter(group, w.get());
  }
}

}  // namespace
}  // namespace aside::server
