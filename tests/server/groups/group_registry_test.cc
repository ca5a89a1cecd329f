// Groups on a fake clock with a manual rebuild scheduler: rebuilds take a
// generation only for a published change, and timed rebuilds (merge window,
// slow start, ejection expiry) happen when the clock says so. No sockets, no
// sleeps.
#include "server/groups/group_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "lib/clock.h"
#include "server/groups/group_publisher.h"
#include "server/groups/group_table_builder.h"
#include "server/groups/rebuild_scheduler.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::StatusIs;
using ::testing::HasSubstr;

Backend Member(const std::string& address, uint32_t weight = 100) {
  Backend b;
  b.address = address;
  b.weight = weight;
  return b;
}

GroupSpec Spec(std::vector<Backend> backends) {
  GroupSpec spec;
  spec.name = "web";
  spec.policy.kind = PolicyKind::kWeightedRoundRobin;
  spec.health_check.kind = HealthCheckSpec::Kind::kNone;
  spec.backends = std::move(backends);
  return spec;
}

class GroupRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(registry_, GroupRegistry::Create(nullptr, 1000, 100));
    registry_->set_inputs({.scheduler = &scheduler_, .clock = &clock_});
  }

  GroupPtr Add(GroupSpec spec) {
    EXPECT_OK(registry_->Add(std::move(spec)));
    return registry_->Find("web");
  }

  uint32_t Weight(const GroupPtr& g, const std::string& address) {
    TableConstPtr t = g->table();
    return t->member(static_cast<uint32_t>(t->Find(address))).weight;
  }
  bool Ready(const GroupPtr& g, const std::string& address) {
    TableConstPtr t = g->table();
    return t->member(static_cast<uint32_t>(t->Find(address))).ready;
  }

  // Moves the clock to the next pending rebuild and runs it.
  bool RunNext() {
    std::optional<int64_t> due = scheduler_.NextDue();
    if (!due) {
      return false;
    }
    if (*due > clock_.NowNanos()) {
      clock_.Advance(absl::Nanoseconds(*due - clock_.NowNanos()));
    }
    return scheduler_.RunDue() > 0;
  }

  FakeClock clock_;
  RebuildScheduler scheduler_{&clock_, RebuildScheduler::Mode::kManual};
  std::unique_ptr<GroupRegistry> registry_;
};

TEST_F(GroupRegistryTest, NoOpRebuildTakesNoGeneration) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")}));
  TableConstPtr first = g->table();
  const uint64_t taken = registry_->generations().last();
  EXPECT_EQ(first->generation(), taken);

  // Nothing changed: the same table stays published and no generation is
  // used up.
  const uint64_t rebuilds = g->rebuilds();
  for (int i = 0; i < 5; ++i) {
    g->Rebuild();
  }
  EXPECT_EQ(g->table(), first);
  EXPECT_EQ(registry_->generations().last(), taken);
  EXPECT_EQ(g->rebuilds(), rebuilds + 5);

  // A real change publishes the next generation.
  GroupSpec spec = g->spec();
  spec.backends[1].drained = true;
  ASSERT_OK(g->Update(spec));
  EXPECT_EQ(g->table()->generation(), taken + 1);
  EXPECT_FALSE(Ready(g, "10.0.0.2:80"));
}

// Records the generations a listener is told of.
class GenerationListener : public Group::Listener {
 public:
  explicit GenerationListener(bool every) : every_(every) {}
  void OnPublish(Group& /*group*/, const TableConstPtr& table) override {
    seen.push_back(table->generation());
  }
  void OnRemoved(Group&, uint64_t) override { removed = true; }
  bool every_publication() const override { return every_; }
  std::vector<uint64_t> seen;
  bool removed = false;

 private:
  const bool every_;
};

TEST_F(GroupRegistryTest, PublicationsWithinTheWindowReachTheEdgesAsOne) {
  registry_->set_inputs({.scheduler = &scheduler_,
                         .clock = &clock_,
                         .publish_window = absl::Milliseconds(5)});
  GroupPtr g = Add(Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")}));
  GenerationListener edge(/*every=*/false);
  GenerationListener record(/*every=*/true);
  g->AddListener(&edge);
  g->AddListener(&record);
  clock_.Advance(absl::Seconds(1));  // a quiet window since the group's start
  auto drain = [&](bool drained) {
    GroupSpec spec = g->spec();
    spec.backends[1].drained = drained;
    ASSERT_OK(g->Update(spec));
  };

  // The first change after a quiet window goes out at once.
  drain(true);
  const uint64_t first = g->table()->generation();
  EXPECT_THAT(edge.seen, ::testing::ElementsAre(first));
  // Three more within the window: picks and the record see each at once,
  // the edges nothing yet.
  clock_.Advance(absl::Milliseconds(1));
  drain(false);
  drain(true);
  drain(false);
  const uint64_t last = g->table()->generation();
  EXPECT_EQ(last, first + 3);
  EXPECT_TRUE(Ready(g, "10.0.0.2:80"));
  EXPECT_EQ(record.seen.size(), 4u);
  EXPECT_EQ(edge.seen.size(), 1u);
  // Nothing before the window's end...
  EXPECT_EQ(scheduler_.NextDue(), clock_.NowNanos() + 4'000'000);
  clock_.Advance(absl::Milliseconds(3));
  EXPECT_EQ(scheduler_.RunDue(), 0u);
  EXPECT_EQ(edge.seen.size(), 1u);
  // ...and at it, the newest table, once.
  ASSERT_TRUE(RunNext());
  EXPECT_THAT(edge.seen, ::testing::ElementsAre(first, last));
  EXPECT_FALSE(scheduler_.NextDue().has_value());

  // The window after a flush holds the next change too; a quiet one does
  // not.
  clock_.Advance(absl::Milliseconds(2));
  drain(true);
  EXPECT_EQ(edge.seen.size(), 2u);
  ASSERT_TRUE(RunNext());
  EXPECT_EQ(edge.seen.back(), g->table()->generation());
  clock_.Advance(absl::Milliseconds(50));
  drain(false);
  EXPECT_EQ(edge.seen.back(), g->table()->generation());
  EXPECT_EQ(edge.seen.size(), 4u);
  EXPECT_EQ(record.seen.size(), 6u);

  // A removal tells the edges at once and drops what was held.
  clock_.Advance(absl::Milliseconds(1));
  drain(true);
  ASSERT_OK(registry_->Remove("web"));
  EXPECT_TRUE(edge.removed);
  while (RunNext()) {
  }
  EXPECT_EQ(edge.seen.size(), 4u);
  g->RemoveListener(&edge);
  g->RemoveListener(&record);
}

TEST_F(GroupRegistryTest, WithoutAWindowEveryPublicationReachesTheEdges) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")}));
  GenerationListener edge(/*every=*/false);
  g->AddListener(&edge);
  for (bool drained : {true, false, true}) {
    GroupSpec spec = g->spec();
    spec.backends[1].drained = drained;
    ASSERT_OK(g->Update(spec));
  }
  EXPECT_EQ(edge.seen.size(), 3u);
  EXPECT_FALSE(scheduler_.NextDue().has_value());
  g->RemoveListener(&edge);
}

// Calls back into its group from OnPublish: an update through the
// registry (once) and, on the next publication, its own removal. Under the
// group's or the registry's locks either would deadlock.
class ReentrantListener : public Group::Listener {
 public:
  ReentrantListener(GroupRegistry* registry, GroupPublisher* publisher)
      : registry_(registry), publisher_(publisher) {}
  void OnPublish(Group& group, const TableConstPtr& table) override {
    seen.push_back(table->generation());
    on_publisher_thread.push_back(publisher_ == nullptr ||
                                  publisher_->OnThread());
    if (seen.size() == 1) {
      GroupSpec spec = group.spec();
      spec.backends[0].weight += 1;
      update = registry_->Update(registry_->Find(group.name()), spec);
    } else {
      group.RemoveListener(this);
    }
  }
  void OnRemoved(Group&, uint64_t) override {}
  std::vector<uint64_t> seen;
  std::vector<bool> on_publisher_thread;
  absl::Status update = absl::UnknownError("not called");

 private:
  GroupRegistry* const registry_;
  GroupPublisher* const publisher_;
};

TEST_F(GroupRegistryTest, ListenersAreToldWithNoGroupLockHeld) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")}));
  ReentrantListener listener(registry_.get(), nullptr);
  g->AddListener(&listener);
  GroupSpec spec = g->spec();
  spec.backends[1].drained = true;
  ASSERT_OK(registry_->Update(g, spec));
  // The listener's own update was told to it after the first, in order,
  // once the first call returned; then it left.
  ASSERT_OK(listener.update);
  ASSERT_EQ(listener.seen.size(), 2u);
  EXPECT_LT(listener.seen[0], listener.seen[1]);
  EXPECT_EQ(listener.seen[1], g->table()->generation());
  ASSERT_OK(registry_->Update(g, g->spec()));
  EXPECT_EQ(listener.seen.size(), 2u);
}

TEST_F(GroupRegistryTest, ThePublisherTellsEveryPublicationInOrder) {
  GroupPublisher publisher;
  registry_->set_inputs(
      {.scheduler = &scheduler_, .clock = &clock_, .publisher = &publisher});
  GroupPtr g = Add(Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")}));
  GenerationListener record(/*every=*/true);
  ReentrantListener reentrant(registry_.get(), &publisher);
  g->AddListener(&record);
  g->AddListener(&reentrant);
  // Four writers at once: each publication reaches the record once, in
  // generation order, on the publisher's thread.
  constexpr int kWriters = 4;
  constexpr int kWrites = 50;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kWrites; ++i) {
        GroupSpec spec = g->spec();
        spec.backends[1].weight = static_cast<uint32_t>(1 + w * kWrites + i);
        EXPECT_OK(registry_->Update(g, spec));
      }
    });
  }
  for (std::thread& t : writers) {
    t.join();
  }
  ASSERT_TRUE(publisher.AwaitIdle(absl::Seconds(30)));
  // The writers' updates and the reentrant listener's one.
  ASSERT_EQ(record.seen.size(), kWriters * kWrites + 1u);
  EXPECT_TRUE(std::is_sorted(record.seen.begin(), record.seen.end()));
  EXPECT_EQ(std::adjacent_find(record.seen.begin(), record.seen.end()),
            record.seen.end());
  EXPECT_EQ(record.seen.back(), g->table()->generation());
  ASSERT_OK(reentrant.update);
  EXPECT_EQ(reentrant.seen.size(), 2u);
  EXPECT_THAT(reentrant.on_publisher_thread, ::testing::Each(true));
  g->RemoveListener(&record);
}

// Blocks in OnPublish until released.
class BlockingListener : public Group::Listener {
 public:
  void OnPublish(Group&, const TableConstPtr&) override {
    calls.fetch_add(1);
    entered.Notify();
    release.WaitForNotification();
  }
  void OnRemoved(Group&, uint64_t) override {}
  std::atomic<int> calls{0};
  absl::Notification entered;
  absl::Notification release;
};

// Runs `remove` on a thread while `listener` is in a call: it must not
// return before the call is released (a bounded look), and must after.
void ExpectRemovalWaitsForTheCall(BlockingListener& listener,
                                  const std::function<void()>& remove) {
  absl::Notification removed;
  std::thread remover([&] {
    remove();
    removed.Notify();
  });
  EXPECT_FALSE(removed.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  listener.release.Notify();
  EXPECT_TRUE(removed.WaitForNotificationWithTimeout(absl::Seconds(30)));
  remover.join();
}

TEST_F(GroupRegistryTest, RemoveListenerWaitsForACallInProgress) {
  GroupPublisher publisher;
  registry_->set_inputs(
      {.scheduler = &scheduler_, .clock = &clock_, .publisher = &publisher});
  GroupPtr g = Add(Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")}));
  BlockingListener listener;
  g->AddListener(&listener);
  ASSERT_OK(registry_->Update(g, g->spec()));  // returns before the telling
  ASSERT_TRUE(
      listener.entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  // Publications go on while a listener is slow.
  ASSERT_OK(registry_->Update(g, g->spec()));
  ExpectRemovalWaitsForTheCall(listener, [&] { g->RemoveListener(&listener); });
  // Once RemoveListener returned, nothing reaches it (the second
  // publication did only if its round began before the removal).
  const int calls = listener.calls.load();
  EXPECT_LE(calls, 2);
  ASSERT_OK(registry_->Update(g, g->spec()));
  ASSERT_TRUE(publisher.AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(listener.calls.load(), calls);
}

// Records what a listener of every group hears, in order.
class EveryGroupRecorder : public Group::Listener {
 public:
  explicit EveryGroupRecorder(GroupRegistry* registry) : registry_(registry) {}
  void OnAdded(Group& group, const TableConstPtr& table) override {
    heard.push_back(absl::StrCat("added ", group.name()));
    found_by_name.push_back(registry_->Find(group.name()).get() == &group);
    generations.push_back(table->generation());
  }
  void OnPublish(Group& group, const TableConstPtr& table) override {
    heard.push_back(absl::StrCat("published ", group.name()));
    generations.push_back(table->generation());
  }
  void OnRemoved(Group& group, uint64_t generation) override {
    heard.push_back(absl::StrCat("removed ", group.name()));
    generations.push_back(generation);
  }
  std::vector<std::string> heard;
  std::vector<bool> found_by_name;
  std::vector<uint64_t> generations;

 private:
  GroupRegistry* const registry_;
};

TEST_F(GroupRegistryTest, ListenersOfEveryGroupHearEachFromItsAdditionOn) {
  GroupPtr web = Add(Spec({Member("10.0.0.1:80")}));
  EveryGroupRecorder recorder(registry_.get());
  registry_->AddListener(&recorder);
  // A group there before: its next publication.
  ASSERT_OK(registry_->Update(web, Spec({Member("10.0.0.9:80")})));
  // A group added later: its first table (once Find returns it), a
  // publication and its removal.
  GroupSpec api = Spec({Member("10.0.0.2:80")});
  api.name = "api";
  ASSERT_OK(registry_->Add(api));
  // A refused addition is not told.
  EXPECT_FALSE(registry_->Add(api).ok());
  GroupPtr g = registry_->Find("api");
  ASSERT_NE(g, nullptr);
  GroupSpec api2 = Spec({Member("10.0.0.3:80")});
  api2.name = "api";
  ASSERT_OK(registry_->Update(g, api2));
  ASSERT_OK_AND_ASSIGN(const uint64_t removal, registry_->Remove("api"));
  EXPECT_THAT(recorder.heard,
              ::testing::ElementsAre("published web", "added api",
                                     "published api", "removed api"));
  EXPECT_THAT(recorder.found_by_name, ::testing::ElementsAre(true));
  EXPECT_TRUE(
      std::is_sorted(recorder.generations.begin(), recorder.generations.end()));
  EXPECT_EQ(recorder.generations.back(), removal);

  // Gone: nothing more reaches it.
  registry_->RemoveListener(&recorder);
  GroupSpec later = Spec({Member("10.0.0.4:80")});
  later.name = "later";
  ASSERT_OK(registry_->Add(later));
  ASSERT_OK(registry_->Update(web, Spec({Member("10.0.0.5:80")})));
  EXPECT_EQ(recorder.heard.size(), 4u);
}

// Adds a group of its own when told of the first: under a registry lock
// that would deadlock.
class AddingListener : public Group::Listener {
 public:
  explicit AddingListener(GroupRegistry* registry) : registry_(registry) {}
  void OnAdded(Group& group, const TableConstPtr&) override {
    names.push_back(group.name());
    if (names.size() == 1) {
      GroupSpec spec = group.spec();
      spec.name = "second";
      added = registry_->Add(spec);
    }
  }
  void OnPublish(Group&, const TableConstPtr&) override {}
  void OnRemoved(Group&, uint64_t) override {}
  std::vector<std::string> names;
  absl::Status added = absl::UnknownError("not called");

 private:
  GroupRegistry* const registry_;
};

TEST_F(GroupRegistryTest, ListenersOfEveryGroupAreToldWithNoRegistryLockHeld) {
  for (const bool with_publisher : {false, true}) {
    SCOPED_TRACE(with_publisher ? "publisher" : "inline");
    ASSERT_OK_AND_ASSIGN(registry_, GroupRegistry::Create(nullptr, 1000, 100));
    GroupPublisher publisher;
    registry_->set_inputs({.scheduler = &scheduler_,
                           .clock = &clock_,
                           .publisher = with_publisher ? &publisher : nullptr});
    AddingListener listener(registry_.get());
    registry_->AddListener(&listener);
    Add(Spec({Member("10.0.0.1:80")}));
    ASSERT_TRUE(publisher.AwaitIdle(absl::Seconds(30)));
    ASSERT_OK(listener.added);
    EXPECT_THAT(listener.names, ::testing::ElementsAre("web", "second"));
    EXPECT_NE(registry_->Find("second"), nullptr);
    registry_->RemoveListener(&listener);
  }
}

TEST_F(GroupRegistryTest,
       RemovingAListenerOfEveryGroupWaitsForACallInProgress) {
  GroupPublisher publisher;
  registry_->set_inputs(
      {.scheduler = &scheduler_, .clock = &clock_, .publisher = &publisher});
  GroupPtr g = Add(Spec({Member("10.0.0.1:80")}));
  BlockingListener listener;
  registry_->AddListener(&listener);
  ASSERT_OK(registry_->Update(g, g->spec()));  // returns before the telling
  ASSERT_TRUE(
      listener.entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ExpectRemovalWaitsForTheCall(listener,
                               [&] { registry_->RemoveListener(&listener); });
  ASSERT_OK(registry_->Update(g, g->spec()));
  ASSERT_TRUE(publisher.AwaitIdle(absl::Seconds(30)));
  EXPECT_EQ(listener.calls.load(), 1);
}

// A listener of every group that takes a lock of its own in each call (as
// the Watch hub does).
class LockingListener : public Group::Listener {
 public:
  explicit LockingListener(absl::Mutex* mu) : mu_(mu) {}
  void OnPublish(Group&, const TableConstPtr&) override {
    entered.Notify();
    absl::MutexLock lock(mu_);
  }
  void OnRemoved(Group&, uint64_t) override {}
  absl::Notification entered;

 private:
  absl::Mutex* const mu_;
};

TEST_F(GroupRegistryTest, LeavingAGroupDoesNotWaitForListenersOfEveryGroup) {
  GroupPublisher publisher;
  registry_->set_inputs(
      {.scheduler = &scheduler_, .clock = &clock_, .publisher = &publisher});
  GroupPtr g = Add(Spec({Member("10.0.0.1:80")}));
  absl::Mutex mu;
  LockingListener every(&mu);
  registry_->AddListener(&every);
  GenerationListener own(false);
  g->AddListener(&own);
  absl::Notification left;
  std::thread leaver;
  {
    // Held, as a hub holds its lock while a stream leaves a group.
    absl::MutexLock lock(&mu);
    ASSERT_OK(registry_->Update(g, g->spec()));
    ASSERT_TRUE(
        every.entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
    leaver = std::thread([&] {
      g->RemoveListener(&own);
      left.Notify();
    });
    EXPECT_TRUE(left.WaitForNotificationWithTimeout(absl::Seconds(30)));
  }
  leaver.join();
  EXPECT_EQ(own.seen.size(), 1u);
  registry_->RemoveListener(&every);
}

TEST_F(GroupRegistryTest, ReapplyingTheSpecPublishesOnlyExplicitUpdates) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80")}));
  TableConstPtr first = g->table();
  // A rebuild re-applies the current spec: nothing changed, nothing is
  // published.
  g->Rebuild();
  EXPECT_EQ(g->table(), first);
  EXPECT_EQ(registry_->generations().last(), first->generation());

  // An explicit update with the same spec is an acknowledged mutation: it
  // gets a generation newer than any before, so a caller can wait for it.
  ASSERT_OK(g->Update(g->spec()));
  EXPECT_EQ(g->table()->generation(), first->generation() + 1);
}

TEST_F(GroupRegistryTest, RequestsInsideTheMergeWindowFoldIntoOneRebuild) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80")}));
  for (int i = 0; i < 3; ++i) {
    scheduler_.Schedule(g, absl::Milliseconds(20));
    clock_.Advance(absl::Milliseconds(5));
  }
  EXPECT_EQ(scheduler_.RunDue(), 0u);  // 15 ms in: not yet
  clock_.Advance(absl::Milliseconds(5));
  EXPECT_EQ(scheduler_.RunDue(), 1u);  // the first request's window ends
  EXPECT_EQ(scheduler_.rebuilds(), 1u);
  EXPECT_FALSE(scheduler_.NextDue().has_value());
  // An earlier request moves the rebuild forward.
  scheduler_.Schedule(g, absl::Seconds(10));
  scheduler_.Schedule(g, absl::Milliseconds(1));
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_EQ(scheduler_.RunDue(), 1u);
}

TEST_F(GroupRegistryTest, SlowStartRampsWithTheClock) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80")}));
  GroupSpec spec = g->spec();
  spec.slow_start = absl::Seconds(10);
  spec.backends.push_back(Member("10.0.0.2:80"));
  ASSERT_OK(g->Update(spec));
  // The new member starts at 10 %, the old one is past its ramp (it joined
  // before slow start was on, at the same instant: also 10 %).
  EXPECT_EQ(Weight(g, "10.0.0.2:80"), 10u);

  std::vector<uint32_t> seen = {Weight(g, "10.0.0.2:80")};
  uint64_t generation = g->table()->generation();
  for (int step = 0; step < 20 && RunNext(); ++step) {
    const uint32_t w = Weight(g, "10.0.0.2:80");
    if (w != seen.back()) {
      seen.push_back(w);
      // Each visible step is one new generation, never more.
      EXPECT_EQ(g->table()->generation(), generation + 1);
      generation = g->table()->generation();
    }
  }
  EXPECT_EQ(seen.back(), 100u);
  EXPECT_GE(seen.size(), 9u);  // ramped in steps, not at once
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  // Ramp over: nothing more is scheduled, and rebuilding changes nothing.
  EXPECT_FALSE(scheduler_.NextDue().has_value());
  g->Rebuild();
  EXPECT_EQ(g->table()->generation(), generation);
}

TEST_F(GroupRegistryTest, EjectionEndsWhenItsTimeIsUp) {
  GroupSpec spec = Spec(
      {Member("10.0.0.1:80"), Member("10.0.0.2:80"), Member("10.0.0.3:80")});
  spec.panic_threshold = 0;
  spec.outlier.enabled = true;
  spec.outlier.consecutive_failures = 3;
  spec.outlier.max_ejection_percent = 50;
  spec.outlier.base_ejection_time = absl::Seconds(30);
  GroupPtr g = Add(spec);

  g->OnLoadReport("10.0.0.2:80", 5, 5, 5, absl::ZeroDuration(),
                  absl::ZeroDuration());
  ASSERT_EQ(scheduler_.RunDue(), 1u);  // asked for at once
  EXPECT_FALSE(Ready(g, "10.0.0.2:80"));
  const uint64_t ejected_generation = g->table()->generation();

  // The expiry is scheduled; just before it nothing changes.
  ASSERT_TRUE(scheduler_.NextDue().has_value());
  EXPECT_EQ(*scheduler_.NextDue(), clock_.NowNanos() + 30'000'000'000);
  clock_.Advance(absl::Seconds(29));
  EXPECT_EQ(scheduler_.RunDue(), 0u);
  EXPECT_FALSE(Ready(g, "10.0.0.2:80"));
  // At its end the backend is back, in one new generation.
  ASSERT_TRUE(RunNext());
  EXPECT_TRUE(Ready(g, "10.0.0.2:80"));
  EXPECT_EQ(g->table()->generation(), ejected_generation + 1);
}

// A publication carries the table and the spec that made it, and what the
// edges built from them: the spec's forms stay while the spec does, the
// rest go with their publication.
TEST_F(GroupRegistryTest, APublicationCarriesItsSpecAndTheFormsBuiltFromIt) {
  GroupSpec spec = Spec({Member("10.0.0.1:80"), Member("10.0.0.2:80")});
  spec.panic_threshold = 0;
  spec.outlier.enabled = true;
  spec.outlier.consecutive_failures = 3;
  spec.outlier.max_ejection_percent = 50;
  GroupPtr g = Add(spec);
  std::shared_ptr<const Group::Publication> first = g->published();
  EXPECT_EQ(first->table, g->table());
  EXPECT_EQ(first->spec, g->spec_snapshot());
  auto make = [] { return std::make_shared<const std::string>("form"); };
  std::weak_ptr<const std::string> table_form =
      first->forms.Get<std::string>("t", 0, make);
  const std::shared_ptr<const std::string> spec_form =
      first->spec_forms->Get<std::string>("s", 0, make);

  // An ejection: a new table from the same spec.
  g->OnLoadReport("10.0.0.2:80", 5, 5, 5, absl::ZeroDuration(),
                  absl::ZeroDuration());
  ASSERT_EQ(scheduler_.RunDue(), 1u);
  std::shared_ptr<const Group::Publication> ejected = g->published();
  ASSERT_NE(ejected->table, first->table);
  EXPECT_FALSE(Ready(g, "10.0.0.2:80"));
  EXPECT_EQ(ejected->spec, first->spec);
  EXPECT_EQ(ejected->spec_forms, first->spec_forms);
  EXPECT_EQ(ejected->spec_forms->Get<std::string>("s", 0, make), spec_form);
  EXPECT_EQ(ejected->forms.size(), 0u);
  first.reset();
  EXPECT_TRUE(table_form.expired())
      << "a superseded publication's forms are let go";

  // A new spec: its forms start afresh.
  spec.backends[0].weight = 300;
  ASSERT_OK(g->Update(spec));
  std::shared_ptr<const Group::Publication> updated = g->published();
  EXPECT_EQ(updated->spec, g->spec_snapshot());
  EXPECT_NE(updated->spec_forms, ejected->spec_forms);
  EXPECT_EQ(updated->spec_forms->size(), 0u);
}

TEST_F(GroupRegistryTest, AwaitRebuildsIsBounded) {
  GroupPtr g = Add(Spec({Member("10.0.0.1:80")}));
  const uint64_t done = g->rebuilds();
  EXPECT_FALSE(g->AwaitRebuilds(done + 1, absl::Milliseconds(1)));
  g->Rebuild();
  EXPECT_TRUE(g->AwaitRebuilds(done + 1, absl::Milliseconds(1)));
}

GroupSpec Named(const std::string& name, std::vector<std::string> aliases,
                GroupSource source = GroupSource::kStore) {
  GroupSpec spec = Spec({Member("10.0.0.1:80")});
  spec.name = name;
  spec.aliases = std::move(aliases);
  spec.source = source;
  spec.file = source == GroupSource::kFile ? "aside.yaml" : "";
  return spec;
}

TEST_F(GroupRegistryTest, NamesAndAliasesAreOneNamespace) {
  ASSERT_OK(registry_->Add(Named("web", {"www.example"}, GroupSource::kFile)));
  EXPECT_THAT(registry_->Add(Named("evil", {"web"})),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("aliases[0]: alias 'web' is already the name "
                                 "of group 'web' (config file aside.yaml)")));
  EXPECT_THAT(registry_->Add(Named("evil", {"www.example"})),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("already an alias of group 'web'")));
  EXPECT_THAT(registry_->Add(Named("evil", {"web.default.svc"})),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("would take the clients of group 'web'")));
  EXPECT_THAT(registry_->Add(Named("www.example", {})),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("name 'www.example' is already an alias")));
  EXPECT_EQ(registry_->Find("evil"), nullptr);
  // What the refused groups tried to take still resolves as before.
  EXPECT_EQ(registry_->size(), 1u);

  ASSERT_OK(registry_->Add(Named("api", {"api.example"})));
  GroupPtr api = registry_->Find("api");
  EXPECT_THAT(registry_->Update(api, Named("api", {"www.example:443"})),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("overlaps alias 'www.example'")));
  EXPECT_EQ(api->spec().aliases, std::vector<std::string>{"api.example"});
  ASSERT_OK(registry_->Update(api, Named("api", {"api.example", "api2"})));
  ASSERT_OK(registry_->Remove("api"));
  // Removed: its aliases are free again.
  ASSERT_OK(registry_->Add(Named("other", {"api2"})));
}

TEST_F(GroupRegistryTest, RacingAddsOfOneAliasLetExactlyOneWin) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::atomic<int> added{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      if (registry_->Add(Named(absl::StrCat("g", i), {"shared"})).ok()) {
        ++added;
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(added.load(), 1);
}

TEST(GroupTableBuilderTest, DeclaredMembersWinOverDiscoveredOnes) {
  std::vector<Backend> merged =
      MergeMembers({Member("10.0.0.1:80", 5)},
                   {Member("10.0.0.1:80", 7), Member("10.0.0.9:80", 7)});
  ASSERT_EQ(merged.size(), 2u);
  EXPECT_EQ(merged[0].weight, 5u);
  EXPECT_EQ(merged[1].address, "10.0.0.9:80");
}

TEST(GroupTableBuilderTest, ReadinessAndWeightsFollowTheStatuses) {
  GroupSpec spec = Spec(
      {Member("10.0.0.3:80"), Member("10.0.0.1:80"), Member("10.0.0.2:80")});
  spec.backends[2].drained = true;
  spec.slow_start = absl::Seconds(10);
  std::vector<MemberStatus> statuses(3);
  statuses[0].ejected = true;
  statuses[1].ramp_since = 0;  // halfway through its ramp at t = 5 s
  statuses[1].health = HealthState::kHealthy;
  TableSpec ts =
      BuildTableSpec(spec, spec.backends, statuses, nullptr, 5'000'000'000);
  ASSERT_EQ(ts.members.size(), 3u);
  EXPECT_EQ(ts.members[0].backend.address, "10.0.0.1:80");  // sorted
  EXPECT_TRUE(ts.members[0].ready);
  EXPECT_LT(ts.members[0].weight, 100u);
  EXPECT_GT(ts.members[0].weight, 10u);
  EXPECT_FALSE(ts.members[1].ready);  // drained
  EXPECT_FALSE(ts.members[2].ready);  // ejected
  EXPECT_EQ(ts.members[2].weight, 100u);

  // The same inputs make the same table; any visible difference does not.
  ASSERT_OK_AND_ASSIGN(TableConstPtr table,
                       Table::Create(ts, nullptr, nullptr));
  EXPECT_TRUE(SameTable(ts, *table));
  TableSpec other = ts;
  other.members[2].ready = true;
  EXPECT_FALSE(SameTable(other, *table));
  other = ts;
  other.panic_threshold = 10;
  EXPECT_FALSE(SameTable(other, *table));
  other = ts;
  other.members.pop_back();
  EXPECT_FALSE(SameTable(other, *table));
}

}  // namespace
}  // namespace aside::server
