// One contract over every Store (server/store/store.h): the SQLite file and
// etcd (a real 3-member cluster on loopback) go through the same cases: round
// trips, deletes, durability across a reopen, the session key created once.
// Conditional writes are checked where the store has revisions. Then
// StoreSync's ordering rules: an older change never overwrites a newer one,
// generations follow revisions, a bad value keeps the last good definition,
// a snapshot removes what is gone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/status_macros.h"
#include "server/base/metrics.h"
#include "server/groups/group_registry.h"
#include "server/schema/group_spec_proto.h"
#include "server/store/etcd_store.h"
#include "server/store/sqlite_store.h"
#include "server/store/store_sync.h"
#include "tests/testing/etcd_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::aside::testing::EtcdCluster;
using ::aside::testing::StatusIs;
using ::aside::testing::TempDir;
using ::testing::HasSubstr;

v1::Group MakeGroup(const std::string& name, int port) {
  v1::Group g;
  g.set_name(name);
  g.mutable_health_check()->set_kind(v1::HealthCheck::NONE);
  g.add_backends()->set_address(absl::StrCat("127.0.0.1:", port));
  return g;
}

const StoredGroup* Find(const StoreSnapshot& s, const std::string& name) {
  for (const StoredGroup& g : s.groups) {
    if (g.definition.name() == name) {
      return &g;
    }
  }
  return nullptr;
}

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") {
      absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
          EtcdCluster::Start();
      if (!cluster.ok() && absl::IsNotFound(cluster.status())) {
        GTEST_SKIP() << cluster.status();
      }
      ASSERT_OK(cluster.status());
      cluster_ = *std::move(cluster);
    }
    Reopen();
  }

  // A fresh Store over the same data (a restart).
  void Reopen() {
    store_.reset();
    if (GetParam() == "etcd") {
      StoreConfig config;
      config.type = "etcd";
      config.endpoints = cluster_->endpoints();
      config.prefix = "/contract/";
      ASSERT_OK_AND_ASSIGN(store_, EtcdStore::Create(config, &metrics_));
    } else {
      ASSERT_OK_AND_ASSIGN(store_, SqliteStore::Open(dir_.path(), 1 << 24));
    }
  }

  TempDir dir_;
  Metrics metrics_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContractTest, WrittenGroupsLoadAndSurviveAReopen) {
  ASSERT_OK_AND_ASSIGN(int64_t first, store_->PutGroup(MakeGroup("a", 1), 0));
  ASSERT_OK_AND_ASSIGN(int64_t second, store_->PutGroup(MakeGroup("b", 2), 0));
  if (store_->revision_generations()) {
    EXPECT_GT(second, first);
  }
  Reopen();
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].definition.name(), "a");
  EXPECT_EQ(s.groups[0].definition.backends(0).address(), "127.0.0.1:1");
  EXPECT_EQ(s.groups[0].revision, first);
  EXPECT_EQ(s.groups[1].revision, second);
  if (store_->revision_generations()) {
    EXPECT_GE(s.revision, second);
  }
}

TEST_P(StoreContractTest, UpdatesReplaceAndDeletesRemove) {
  ASSERT_OK_AND_ASSIGN(int64_t created, store_->PutGroup(MakeGroup("a", 1), 0));
  ASSERT_OK_AND_ASSIGN(int64_t updated,
                       store_->PutGroup(MakeGroup("a", 2), created));
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  ASSERT_NE(Find(s, "a"), nullptr);
  EXPECT_EQ(Find(s, "a")->definition.backends(0).address(), "127.0.0.1:2");
  ASSERT_OK(store_->DeleteGroup("a", updated).status());
  Reopen();
  ASSERT_OK_AND_ASSIGN(s, store_->Load());
  EXPECT_EQ(Find(s, "a"), nullptr);
}

TEST_P(StoreContractTest, TheSessionKeyIsCreatedOnce) {
  const std::string first(32, 'k');
  const std::string second(32, 'z');
  ASSERT_OK_AND_ASSIGN(std::string key, store_->SessionKey(first));
  EXPECT_EQ(key, first);
  Reopen();
  ASSERT_OK_AND_ASSIGN(key, store_->SessionKey(second));
  EXPECT_EQ(key, first);
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  EXPECT_EQ(s.session_key, first);
}

TEST_P(StoreContractTest, AStaleConditionalWriteIsAbortedAndChangesNothing) {
  if (!store_->revision_generations()) {
    GTEST_SKIP() << "a store without revisions has one writer (this "
                    "process, whose Admin mutations are serialised)";
  }
  ASSERT_OK_AND_ASSIGN(int64_t created, store_->PutGroup(MakeGroup("a", 1), 0));
  ASSERT_OK(store_->PutGroup(MakeGroup("a", 2), created).status());
  EXPECT_THAT(store_->PutGroup(MakeGroup("a", 3), created),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("group 'a'")));
  EXPECT_THAT(store_->PutGroup(MakeGroup("a", 4), 0),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("group")));
  EXPECT_THAT(store_->DeleteGroup("a", created),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("group")));
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  ASSERT_NE(Find(s, "a"), nullptr);
  EXPECT_EQ(Find(s, "a")->definition.backends(0).address(), "127.0.0.1:2");
}

TEST_P(StoreContractTest, AnUnreachableStoreIsUnavailableNamingIt) {
  if (GetParam() != "etcd") {
    GTEST_SKIP() << "a local file is always reachable";
  }
  for (int i = 0; i < cluster_->size(); ++i) {
    cluster_->Kill(i);
  }
  StoreConfig config;
  config.type = "etcd";
  config.endpoints = cluster_->endpoints();
  config.dial_timeout = absl::Milliseconds(100);
  config.request_timeout = absl::Milliseconds(500);
  ASSERT_OK_AND_ASSIGN(auto store, EtcdStore::Create(config, &metrics_));
  EXPECT_THAT(store->PutGroup(MakeGroup("a", 1), 0),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(cluster_->endpoint(0))));
  EXPECT_THAT(store->Load(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("etcd")));
  EXPECT_THAT(store->state().last_error, HasSubstr(cluster_->endpoint(0)));
}

TEST_P(StoreContractTest, ReadGroupReturnsTheStoredDefinitionAndItsRevision) {
  ASSERT_OK_AND_ASSIGN(StoreChange absent, store_->ReadGroup("r"));
  EXPECT_FALSE(absent.definition.has_value());
  EXPECT_EQ(absent.revision, 0);
  ASSERT_OK_AND_ASSIGN(const int64_t written,
                       store_->PutGroup(MakeGroup("r", 4), 0));
  ASSERT_OK_AND_ASSIGN(StoreChange read, store_->ReadGroup("r"));
  ASSERT_TRUE(read.definition.has_value());
  EXPECT_EQ(read.definition->backends(0).address(), "127.0.0.1:4");
  EXPECT_EQ(read.revision, written);
  EXPECT_FALSE(read.bad_value);
}

// Group commit: one Store::Commit of many writes, each decided on its own.
TEST_P(StoreContractTest, ABatchCommitsEveryWriteAndSurvivesAReopen) {
  std::vector<StoreWrite> writes;
  for (int i = 0; i < 16; ++i) {
    writes.push_back({.name = absl::StrCat("g", i),
                      .definition = MakeGroup(absl::StrCat("g", i), 100 + i)});
  }
  std::vector<absl::StatusOr<int64_t>> results = store_->Commit(writes);
  ASSERT_EQ(results.size(), writes.size());
  for (const absl::StatusOr<int64_t>& r : results) {
    ASSERT_OK(r.status());
    // One transaction: one revision for all of them.
    EXPECT_EQ(*r, *results[0]);
  }
  Reopen();
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  ASSERT_EQ(s.groups.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    const StoredGroup* g = Find(s, absl::StrCat("g", i));
    ASSERT_NE(g, nullptr) << i;
    EXPECT_EQ(g->definition.backends(0).address(),
              absl::StrCat("127.0.0.1:", 100 + i));
  }
}

TEST_P(StoreContractTest,
       AConflictInABatchAbortsThatWriteAloneAndTheRestCommit) {
  if (!store_->revision_generations()) {
    GTEST_SKIP() << "a store without revisions has one writer: nothing in a "
                    "batch can conflict";
  }
  ASSERT_OK_AND_ASSIGN(int64_t a, store_->PutGroup(MakeGroup("a", 1), 0));
  ASSERT_OK_AND_ASSIGN(int64_t b, store_->PutGroup(MakeGroup("b", 1), 0));
  ASSERT_OK_AND_ASSIGN(int64_t c, store_->PutGroup(MakeGroup("c", 1), 0));
  ASSERT_OK_AND_ASSIGN(int64_t b2, store_->PutGroup(MakeGroup("b", 2), b));
  std::vector<absl::StatusOr<int64_t>> results = store_->Commit({
      {.name = "a", .definition = MakeGroup("a", 10), .expected_revision = a},
      // Stale: b moved on to b2.
      {.name = "b", .definition = MakeGroup("b", 10), .expected_revision = b},
      {.name = "c", .expected_revision = c},
      // Stale: a create of a group that exists.
      {.name = "a2", .definition = MakeGroup("a2", 10)},
      {.name = "d", .definition = MakeGroup("d", 10)},
  });
  ASSERT_EQ(results.size(), 5u);
  ASSERT_OK(results[0].status());
  EXPECT_THAT(results[1],
              StatusIs(absl::StatusCode::kAborted, HasSubstr("group 'b'")));
  ASSERT_OK(results[2].status());
  ASSERT_OK(results[3].status());
  ASSERT_OK(results[4].status());
  EXPECT_GT(*results[0], b2);
  EXPECT_EQ(*results[2], *results[0]);
  EXPECT_EQ(*results[4], *results[0]);
  results = store_->Commit({
      {.name = "a2", .definition = MakeGroup("a2", 11)},
      {.name = "e", .definition = MakeGroup("e", 11)},
  });
  EXPECT_THAT(results[0],
              StatusIs(absl::StatusCode::kAborted, HasSubstr("group 'a2'")));
  ASSERT_OK(results[1].status());
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  EXPECT_EQ(Find(s, "a")->definition.backends(0).address(), "127.0.0.1:10");
  EXPECT_EQ(Find(s, "b")->definition.backends(0).address(), "127.0.0.1:2");
  EXPECT_EQ(Find(s, "b")->revision, b2);
  EXPECT_EQ(Find(s, "c"), nullptr);
  EXPECT_EQ(Find(s, "a2")->definition.backends(0).address(), "127.0.0.1:10");
  EXPECT_NE(Find(s, "d"), nullptr);
  EXPECT_NE(Find(s, "e"), nullptr);
}

// A Store whose Commit waits until the test opens it: so that writes queue
// behind a commit in flight, as they do behind a slow disk or etcd.
class GatedStore final : public Store {
 public:
  explicit GatedStore(Store* inner) : inner_(inner) {}
  void Open() {
    aside::MutexLock lock(&mu_);
    open_ = true;
  }
  int commits() {
    aside::MutexLock lock(&mu_);
    return commits_;
  }
  std::vector<absl::StatusOr<int64_t>> Commit(
      const std::vector<StoreWrite>& writes) override {
    {
      aside::MutexLock lock(&mu_);
      ++commits_;
      mu_.AwaitWithTimeout(aside::Cond(&open_), absl::Seconds(30));
    }
    return inner_->Commit(writes);
  }
  std::string type() const override { return inner_->type(); }
  std::string location() const override { return inner_->location(); }
  absl::StatusOr<StoreSnapshot> Load() override { return inner_->Load(); }
  absl::StatusOr<StoreChange> ReadGroup(const std::string& name) override {
    return inner_->ReadGroup(name);
  }
  absl::StatusOr<int64_t> PutGroup(const v1::Group& g, int64_t r) override {
    return inner_->PutGroup(g, r);
  }
  absl::StatusOr<int64_t> DeleteGroup(const std::string& n,
                                      int64_t r) override {
    return inner_->DeleteGroup(n, r);
  }
  absl::Status RaiseGenerationFloor(uint64_t f) override {
    return inner_->RaiseGenerationFloor(f);
  }
  absl::StatusOr<std::string> SessionKey(const std::string& p) override {
    return inner_->SessionKey(p);
  }
  bool revision_generations() const override {
    return inner_->revision_generations();
  }
  bool starts_unavailable() const override {
    return inner_->starts_unavailable();
  }
  void Follow(std::optional<int64_t> r, FeedHandlers h) override {
    inner_->Follow(r, std::move(h));
  }
  void StopFollowing() override { inner_->StopFollowing(); }
  StoreState state() const override { return inner_->state(); }

 private:
  Store* const inner_;
  aside::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
  int commits_ ABSL_GUARDED_BY(mu_) = 0;
};

// Sixteen writers at once through StoreSync: the fifteen that arrive while
// the first one's commit is in flight share the next commit; every one is
// acknowledged, applied and there after a restart; with revisions, a stale
// one among them is ABORTED alone.
TEST_P(StoreContractTest, ConcurrentWritersShareOneCommitEachAnsweredOnItsOwn) {
  constexpr int kWriters = 16;
  const bool revisions = store_->revision_generations();
  if (revisions) {
    // "w15" was created elsewhere, behind this sync's back: its writer's
    // create reaches the commit and loses there.
    ASSERT_OK(store_->PutGroup(MakeGroup("w15", 1), 0).status());
  }
  GatedStore gated(store_.get());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GroupRegistry> registry,
                       GroupRegistry::Create(&metrics_, 1000, 100));
  StoreSync sync(&gated, registry.get(), &metrics_);
  auto create = [](int i) -> StoreSync::Edit {
    return [i](const GroupSpec*) -> absl::StatusOr<std::optional<GroupSpec>> {
      ASIDE_ASSIGN_OR_RETURN(
          GroupSpec spec,
          GroupSpecFromProto("group",
                             MakeGroup(absl::StrCat("w", i), 200 + i)));
      spec.source = GroupSource::kStore;
      return std::optional<GroupSpec>(std::move(spec));
    };
  };
  std::vector<absl::StatusOr<StoreSync::Written>> results(
      kWriters, absl::UnknownError("not run"));
  auto write = [&](int i) {
    results[i] =
        sync.Mutate(absl::StrCat("w", i), 0,
                    StoreSync::OnConflict::kAbortOnConflict, create(i));
  };
  std::vector<std::thread> writers;
  writers.emplace_back(write, 0);
  ASSERT_TRUE(::aside::testing::Eventually([&] { return gated.commits() == 1; },
                                           absl::Seconds(10)));
  for (int i = 1; i < kWriters; ++i) {
    writers.emplace_back(write, i);
  }
  ASSERT_TRUE(::aside::testing::Eventually(
      [&] {
        return sync.committer().stats().queued ==
               static_cast<size_t>(kWriters - 1);
      },
      absl::Seconds(10)))
      << sync.committer().stats().queued;
  gated.Open();
  for (std::thread& t : writers) {
    t.join();
  }
  const GroupCommitter::Stats stats = sync.committer().stats();
  EXPECT_EQ(stats.commits, 2u);
  EXPECT_EQ(stats.largest_batch, static_cast<size_t>(kWriters - 1));
  for (int i = 0; i < kWriters; ++i) {
    const std::string name = absl::StrCat("w", i);
    if (revisions && i == kWriters - 1) {
      // Its condition (absent) failed in the batch: ABORTED alone, and
      // nothing of it written.
      EXPECT_THAT(results[i],
                  StatusIs(absl::StatusCode::kAborted, HasSubstr("group")))
          << name;
      continue;
    }
    ASSERT_OK(results[i].status()) << name;
    ASSERT_NE(registry->Find(name), nullptr) << name;
    EXPECT_EQ(registry->Find(name)->spec().backends[0].address,
              absl::StrCat("127.0.0.1:", 200 + i));
  }
  Reopen();
  ASSERT_OK_AND_ASSIGN(StoreSnapshot s, store_->Load());
  for (int i = 0; i < kWriters; ++i) {
    const StoredGroup* g = Find(s, absl::StrCat("w", i));
    ASSERT_NE(g, nullptr) << i;
    EXPECT_EQ(g->definition.backends(0).address(),
              revisions && i == kWriters - 1
                  ? "127.0.0.1:1"
                  : absl::StrCat("127.0.0.1:", 200 + i));
  }
}

// Writes to one group while a write of it is in flight: the commuting ones
// fold into one definition and one commit, each acknowledged at its
// revision; one that fails on the folded value, and one that does not
// commute, wait for rounds of their own, in arrival order.
TEST_P(StoreContractTest, ConcurrentEditsOfOneGroupFoldIntoOneWrite) {
  constexpr int kAdders = 8;
  GatedStore gated(store_.get());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GroupRegistry> registry,
                       GroupRegistry::Create(&metrics_, 1000, 100));
  StoreSync sync(&gated, registry.get(), &metrics_);
  const std::string kGroup = "f";
  auto address = [](int port) { return absl::StrCat("127.0.0.1:", port); };
  StoreSync::Edit create =
      [&](const GroupSpec*) -> absl::StatusOr<std::optional<GroupSpec>> {
    ASIDE_ASSIGN_OR_RETURN(GroupSpec spec,
                           GroupSpecFromProto("group", MakeGroup(kGroup, 1)));
    spec.source = GroupSource::kStore;
    return std::optional<GroupSpec>(std::move(spec));
  };
  auto add = [&](int port) -> StoreSync::Edit {
    return [&, port](const GroupSpec* current)
               -> absl::StatusOr<std::optional<GroupSpec>> {
      if (current == nullptr) return absl::NotFoundError("no group");
      GroupSpec spec = *current;
      for (const Backend& b : spec.backends) {
        if (b.address == address(port)) {
          return absl::AlreadyExistsError(address(port));
        }
      }
      spec.backends.push_back(Backend{.address = address(port)});
      return std::optional<GroupSpec>(std::move(spec));
    };
  };
  // Replaces the backends: does not commute.
  StoreSync::Edit replace = [&](const GroupSpec* current)
      -> absl::StatusOr<std::optional<GroupSpec>> {
    if (current == nullptr) return absl::NotFoundError("no group");
    GroupSpec spec = *current;
    spec.backends = {Backend{.address = address(1)}};
    return std::optional<GroupSpec>(std::move(spec));
  };
  // In arrival order: the create (its commit held at the gate), kAdders
  // adders, an adder of a backend the first adder adds, the replacement,
  // one more adder.
  std::vector<StoreSync::Edit> edits = {create};
  std::vector<StoreSync::OnConflict> on_conflict = {
      StoreSync::OnConflict::kAbortOnConflict};
  for (int i = 1; i <= kAdders; ++i) {
    edits.push_back(add(300 + i));
    on_conflict.push_back(StoreSync::OnConflict::kRetryOnConflict);
  }
  const size_t duplicate = edits.size();
  edits.push_back(add(301));
  on_conflict.push_back(StoreSync::OnConflict::kRetryOnConflict);
  const size_t replacement = edits.size();
  edits.push_back(replace);
  on_conflict.push_back(StoreSync::OnConflict::kAbortOnConflict);
  const size_t last = edits.size();
  edits.push_back(add(400));
  on_conflict.push_back(StoreSync::OnConflict::kRetryOnConflict);

  std::vector<absl::StatusOr<StoreSync::Written>> results(
      edits.size(), absl::UnknownError("not run"));
  std::vector<std::thread> writers;
  for (size_t i = 0; i < edits.size(); ++i) {
    writers.emplace_back([&, i] {
      results[i] = sync.Mutate(kGroup, 0, on_conflict[i], edits[i]);
    });
    if (i == 0) {
      ASSERT_TRUE(::aside::testing::Eventually(
          [&] { return gated.commits() == 1; }, absl::Seconds(10)));
    }
    // The create's call waits too, until its round ends.
    ASSERT_TRUE(::aside::testing::Eventually(
        [&] { return sync.fold_stats().waiting == i + 1; }, absl::Seconds(10)))
        << sync.fold_stats().waiting;
  }
  gated.Open();
  for (std::thread& t : writers) {
    t.join();
  }
  ASSERT_OK(results[0].status());
  // The adders: one write, one commit, one revision.
  for (int i = 1; i <= kAdders; ++i) {
    ASSERT_OK(results[i].status()) << i;
    EXPECT_EQ(results[i]->revision, results[1]->revision) << i;
  }
  if (store_->revision_generations()) {
    EXPECT_GT(results[1]->revision, results[0]->revision);
  }
  // Refused on the group as stored, in a round of its own.
  EXPECT_THAT(results[duplicate],
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr(":301")));
  ASSERT_OK(results[replacement].status());
  ASSERT_OK(results[last].status());
  const GroupCommitter::Stats commits = sync.committer().stats();
  EXPECT_EQ(commits.commits, 4u);  // create, adders, replacement, last
  EXPECT_EQ(commits.writes, 4u);
  EXPECT_EQ(sync.fold_stats().folded, static_cast<uint64_t>(kAdders - 1));
  EXPECT_EQ(sync.fold_stats().waiting, 0u);
  EXPECT_EQ(metrics_.store_writes_folded.Value(),
            static_cast<double>(kAdders - 1));
  auto addresses = [](const std::vector<Backend>& backends) {
    std::vector<std::string> out;
    for (const Backend& b : backends) out.push_back(b.address);
    return out;
  };
  ASSERT_NE(registry->Find(kGroup), nullptr);
  EXPECT_THAT(addresses(registry->Find(kGroup)->spec().backends),
              ::testing::ElementsAre(address(1), address(400)));
  Reopen();
  ASSERT_OK_AND_ASSIGN(StoreSnapshot snapshot, store_->Load());
  const StoredGroup* stored = Find(snapshot, kGroup);
  ASSERT_NE(stored, nullptr);
  ASSERT_EQ(stored->definition.backends_size(), 2);
  EXPECT_EQ(stored->definition.backends(1).address(), address(400));
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreContractTest,
                         ::testing::Values("sqlite", "etcd"),
                         [](const auto& info) { return info.param; });

// StoreSync's rules, fed directly (the store is never contacted: an etcd
// store that is created connects only on its first call).
class StoreSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreConfig config;
    config.type = "etcd";
    config.endpoints = {"127.0.0.1:1"};
    ASSERT_OK_AND_ASSIGN(store_, EtcdStore::Create(config, &metrics_));
    ASSERT_OK_AND_ASSIGN(registry_,
                         GroupRegistry::Create(&metrics_, 1000, 100));
    sync_ =
        std::make_unique<StoreSync>(store_.get(), registry_.get(), &metrics_);
  }

  std::string Backend(const std::string& name) {
    GroupPtr g = registry_->Find(name);
    return g == nullptr ? "" : g->spec().backends[0].address;
  }
  uint64_t Generation(const std::string& name) {
    return registry_->Find(name)->table()->generation();
  }

  Metrics metrics_;
  std::unique_ptr<EtcdStore> store_;
  std::unique_ptr<GroupRegistry> registry_;
  std::unique_ptr<StoreSync> sync_;
};

TEST_F(StoreSyncTest, GenerationsFollowRevisionsAndOlderChangesAreIgnored) {
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 1), .revision = 5}});
  EXPECT_EQ(Generation("a"), uint64_t{5} << 20);
  EXPECT_EQ(GenerationForRevision(5), uint64_t{5} << 20);
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 2), .revision = 9}});
  EXPECT_EQ(Backend("a"), "127.0.0.1:2");
  EXPECT_EQ(Generation("a"), uint64_t{9} << 20);
  // The Admin thread of the write at 7 arrives late: ignored.
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 3), .revision = 7}});
  EXPECT_EQ(Backend("a"), "127.0.0.1:2");
  EXPECT_EQ(sync_->revision("a"), 9);
  // A late create after a deletion does not bring the group back.
  sync_->ApplyChanges({{.name = "a", .revision = 11}});
  EXPECT_EQ(registry_->Find("a"), nullptr);
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 4), .revision = 10}});
  EXPECT_EQ(registry_->Find("a"), nullptr);
  EXPECT_EQ(sync_->revision("a"), 0);
}

TEST_F(StoreSyncTest, ADefinitionReplacedInTheSameBatchIsNeverPublished) {
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 1), .revision = 5},
       {.name = "b", .definition = MakeGroup("b", 1), .revision = 5},
       {.name = "a", .definition = MakeGroup("a", 2), .revision = 6}});
  EXPECT_EQ(Backend("a"), "127.0.0.1:2");
  EXPECT_EQ(Generation("a"), uint64_t{6} << 20);
  EXPECT_EQ(Backend("b"), "127.0.0.1:1");
  EXPECT_THAT(metrics_.Render(),
              HasSubstr("aside_store_changes_superseded_total 1"));
  // When the last definition does not convert, the one before it is the
  // last good one, and is applied.
  v1::Group invalid = MakeGroup("a", 1);
  invalid.mutable_backends(0)->set_weight(20000);
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 3), .revision = 7},
       {.name = "a", .definition = invalid, .revision = 8}});
  EXPECT_EQ(Backend("a"), "127.0.0.1:3");
  EXPECT_EQ(Generation("a"), uint64_t{7} << 20);
  EXPECT_EQ(sync_->revision("a"), 8);
}

TEST_F(StoreSyncTest, ABadValueKeepsTheLastGoodDefinition) {
  sync_->ApplyChanges(
      {{.name = "a", .definition = MakeGroup("a", 1), .revision = 3}});
  sync_->ApplyChanges({{.name = "a", .revision = 4, .bad_value = true}});
  EXPECT_EQ(Backend("a"), "127.0.0.1:1");
  // Admin may overwrite the bad value: its revision is the one to
  // condition on.
  EXPECT_EQ(sync_->revision("a"), 4);
  // A definition that converts but does not validate is counted too.
  v1::Group invalid = MakeGroup("a", 1);
  invalid.mutable_backends(0)->set_weight(20000);
  sync_->ApplyChanges({{.name = "a", .definition = invalid, .revision = 6}});
  EXPECT_EQ(Backend("a"), "127.0.0.1:1");
  EXPECT_THAT(metrics_.Render(),
              HasSubstr("aside_store_errors_total{kind=\"bad_value\"} 1"));
}

TEST_F(StoreSyncTest, ASnapshotReplacesEverything) {
  sync_->ApplyChanges(
      {{.name = "kept", .definition = MakeGroup("kept", 1), .revision = 2},
       {.name = "gone", .definition = MakeGroup("gone", 2), .revision = 3},
       {.name = "changed",
        .definition = MakeGroup("changed", 3),
        .revision = 4}});
  const uint64_t kept_generation = Generation("kept");
  StoreSnapshot snapshot;
  snapshot.revision = 20;
  snapshot.groups.push_back({MakeGroup("kept", 1), 2});
  snapshot.groups.push_back({MakeGroup("changed", 4), 15});
  snapshot.groups.push_back({MakeGroup("new", 5), 18});
  sync_->ApplySnapshot(snapshot);
  EXPECT_EQ(registry_->Find("gone"), nullptr);
  EXPECT_EQ(Backend("changed"), "127.0.0.1:4");
  EXPECT_EQ(Generation("changed"), uint64_t{15} << 20);
  EXPECT_EQ(Backend("new"), "127.0.0.1:5");
  // Unchanged groups are not republished.
  EXPECT_EQ(Generation("kept"), kept_generation);
}

TEST_F(StoreSyncTest, ConfigFileGroupsWinOverStoredOnes) {
  GroupSpec file;
  file.name = "web";
  file.source = GroupSource::kFile;
  file.file = "aside.yaml";
  file.health_check.kind = HealthCheckSpec::Kind::kNone;
  ASSERT_OK(registry_->Add(file));
  sync_->ApplyChanges(
      {{.name = "web", .definition = MakeGroup("web", 1), .revision = 3}});
  EXPECT_EQ(registry_->Find("web")->spec().source, GroupSource::kFile);
  EXPECT_TRUE(registry_->Find("web")->spec().backends.empty());
}

// StoreSync::Mutate against a real etcd: a second client writes behind the
// replica's back (this sync does not follow the store, so its view stays
// behind, as a replica's does between a write elsewhere and its watch).
class StoreMutateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
        EtcdCluster::Start({.members = 1});
    if (!cluster.ok() && absl::IsNotFound(cluster.status())) {
      GTEST_SKIP() << cluster.status();
    }
    ASSERT_OK(cluster.status());
    cluster_ = *std::move(cluster);
    StoreConfig config;
    config.type = "etcd";
    config.endpoints = cluster_->endpoints();
    config.prefix = "/mutate/";
    ASSERT_OK_AND_ASSIGN(store_, EtcdStore::Create(config, &metrics_));
    ASSERT_OK_AND_ASSIGN(other_, EtcdStore::Create(config, nullptr));
    ASSERT_OK_AND_ASSIGN(registry_,
                         GroupRegistry::Create(&metrics_, 1000, 100));
    sync_ =
        std::make_unique<StoreSync>(store_.get(), registry_.get(), &metrics_);
  }

  // An edit that drains 127.0.0.1:1, counting its runs.
  StoreSync::Edit DrainFirst(int* runs) {
    return [runs](const GroupSpec* current)
               -> absl::StatusOr<std::optional<GroupSpec>> {
      ++*runs;
      if (current == nullptr) {
        return absl::NotFoundError("no group");
      }
      GroupSpec next = *current;
      next.backends[0].drained = true;
      return std::optional<GroupSpec>(std::move(next));
    };
  }
  StoreSync::Edit Create(v1::Group g) {
    return [g](const GroupSpec*) -> absl::StatusOr<std::optional<GroupSpec>> {
      ASIDE_ASSIGN_OR_RETURN(GroupSpec spec, GroupSpecFromProto("group", g));
      spec.source = GroupSource::kStore;
      return std::optional<GroupSpec>(std::move(spec));
    };
  }
  v1::Group Stored(const std::string& name) {
    absl::StatusOr<StoreChange> read = other_->ReadGroup(name);
    return read.ok() && read->definition.has_value() ? *read->definition
                                                     : v1::Group();
  }

  Metrics metrics_;
  std::unique_ptr<EtcdCluster> cluster_;
  std::unique_ptr<EtcdStore> store_, other_;
  std::unique_ptr<GroupRegistry> registry_;
  std::unique_ptr<StoreSync> sync_;
};

TEST_F(StoreMutateTest, ALostRaceIsRetriedOnTheStoredValueNeverOverIt) {
  ASSERT_OK_AND_ASSIGN(
      StoreSync::Written created,
      sync_->Mutate("a", 0, StoreSync::OnConflict::kAbortOnConflict,
                    Create(MakeGroup("a", 1))));
  // Another replica adds a backend; this one has not seen it.
  v1::Group two = MakeGroup("a", 1);
  two.add_backends()->set_address("127.0.0.1:2");
  ASSERT_OK_AND_ASSIGN(const int64_t behind,
                       other_->PutGroup(two, created.revision));
  int runs = 0;
  ASSERT_OK_AND_ASSIGN(
      StoreSync::Written drained,
      sync_->Mutate("a", 0, StoreSync::OnConflict::kRetryOnConflict,
                    DrainFirst(&runs)));
  EXPECT_EQ(runs, 2);  // the local view lost, the stored one won
  EXPECT_GT(drained.revision, behind);
  const v1::Group stored = Stored("a");
  ASSERT_EQ(stored.backends_size(), 2);  // the other write is kept
  EXPECT_TRUE(stored.backends(0).drained());
  EXPECT_EQ(registry_->Find("a")->spec().backends.size(), 2u);
}

TEST_F(StoreMutateTest, AChangeLandingBetweenReadAndWriteAbortsAReplacement) {
  ASSERT_OK_AND_ASSIGN(
      StoreSync::Written created,
      sync_->Mutate("a", 0, StoreSync::OnConflict::kAbortOnConflict,
                    Create(MakeGroup("a", 1))));
  // While the edit runs, the feed applies a newer revision written
  // elsewhere (the interleaving that used to write a stale definition
  // under the newer revision's condition).
  int runs = 0;
  absl::StatusOr<StoreSync::Written> result = sync_->Mutate(
      "a", 0, StoreSync::OnConflict::kAbortOnConflict,
      [&](const GroupSpec* current)
          -> absl::StatusOr<std::optional<GroupSpec>> {
        ++runs;
        v1::Group newer = MakeGroup("a", 3);
        absl::StatusOr<int64_t> w = other_->PutGroup(newer, created.revision);
        EXPECT_OK(w.status());
        sync_->ApplyChanges(
            {{.name = "a", .definition = newer, .revision = w.ok() ? *w : 0}});
        GroupSpec next = *current;
        next.backends[0].drained = true;
        return std::optional<GroupSpec>(std::move(next));
      });
  EXPECT_THAT(result.status(),
              StatusIs(absl::StatusCode::kAborted, HasSubstr("revision")));
  EXPECT_EQ(runs, 1);
  // The newer write stands; the stale edit was not applied over it.
  const v1::Group stored = Stored("a");
  ASSERT_EQ(stored.backends_size(), 1);
  EXPECT_EQ(stored.backends(0).address(), "127.0.0.1:3");
  EXPECT_FALSE(stored.backends(0).drained());
}

TEST_F(StoreMutateTest, AGroupWrittenElsewhereIsReadFromTheStoreNotRefused) {
  ASSERT_OK(other_->PutGroup(MakeGroup("b", 1), 0).status());
  int runs = 0;
  ASSERT_OK_AND_ASSIGN(
      StoreSync::Written drained,
      sync_->Mutate("b", 0, StoreSync::OnConflict::kAbortOnConflict,
                    DrainFirst(&runs)));
  EXPECT_EQ(runs, 2);  // NOT_FOUND here, then the store's own value
  EXPECT_TRUE(Stored("b").backends(0).drained());
  // The caller's precondition: a revision that is not the stored one.
  runs = 0;
  EXPECT_THAT(
      sync_
          ->Mutate("b", drained.revision - 1,
                   StoreSync::OnConflict::kRetryOnConflict, DrainFirst(&runs))
          .status(),
      StatusIs(absl::StatusCode::kAborted,
               HasSubstr(absl::StrCat("store revision ", drained.revision))));
  EXPECT_EQ(runs, 0);
  EXPECT_OK(sync_
                ->Mutate("b", drained.revision,
                         StoreSync::OnConflict::kAbortOnConflict,
                         DrainFirst(&runs))
                .status());
}

}  // namespace
}  // namespace aside::server
