// Watch over real gRPC against an in-process server: full then delta
// updates, convergence of many subscribers, slow readers, unknown and
// deleted groups reported per group (and picked up when they appear),
// resumption and shutdown.
#include "server/api/watch.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "aside/v1/admin.grpc.pb.h"
#include "aside/v1/lookaside.grpc.pb.h"
#include "lib/sync.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "watch-test-token-0123";

// What a subscriber holds of one group after applying updates.
struct AppliedTable {
  uint64_t generation = 0;
  std::map<std::string, v1::TableBackend> backends;
  bool removed = false;
  int fulls = 0;
  int deltas = 0;
  // The generation a resuming subscriber said it holds (0: none).
  uint64_t resumed_from = 0;

  // Applies one update; returns false when it does not fit (a delta whose
  // base is not what is held, or a generation going backwards).
  bool Apply(const v1::GroupUpdate& u) {
    if (u.generation() < generation) {
      return false;
    }
    switch (u.update_case()) {
      case v1::GroupUpdate::kFull:
        removed = false;
        backends.clear();
        for (const auto& b : u.full().backends()) {
          backends[b.backend().address()] = b;
        }
        ++fulls;
        break;
      case v1::GroupUpdate::kDelta:
        if (u.delta().base_generation() != generation &&
            u.delta().base_generation() != u.generation() &&
            !(generation == 0 && u.delta().base_generation() == resumed_from)) {
          return false;
        }
        for (const auto& b : u.delta().upserted()) {
          backends[b.backend().address()] = b;
        }
        for (const auto& a : u.delta().removed()) {
          backends.erase(a);
        }
        ++deltas;
        break;
      case v1::GroupUpdate::kRemoved:
        removed = true;
        break;
      default:
        return false;
    }
    generation = u.generation();
    return true;
  }
};

// A subscriber reading on its own thread.
class Subscriber {
 public:
  Subscriber(v1::LoadBalancer::Stub* stub, std::vector<std::string> groups,
             std::map<std::string, uint64_t> known = {}) {
    v1::WatchRequest request;
    for (auto& g : groups) request.add_groups(g);
    for (auto& [g, gen] : known) {
      (*request.mutable_known_generations())[g] = gen;
      aside::MutexLock lock(&mu_);
      tables_[g].resumed_from = gen;  // what a resuming subscriber holds
    }
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(60));
    reader_ = stub->Watch(&context_, request);
    thread_ = std::thread([this] { Run(); });
  }
  ~Subscriber() {
    context_.TryCancel();
    thread_.join();
  }

  // Waits until `group` is at least at `generation`.
  bool WaitFor(const std::string& group, uint64_t generation,
               absl::Duration timeout = absl::Seconds(20)) {
    aside::MutexLock lock(&mu_);
    auto reached = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      auto it = tables_.find(group);
      return done_ ||
             (it != tables_.end() && it->second.generation >= generation);
    };
    mu_.AwaitWithTimeout(aside::Cond(&reached), timeout);
    auto it = tables_.find(group);
    return it != tables_.end() && it->second.generation >= generation;
  }
  // Waits until an update received so far or later satisfies `match`.
  bool WaitForUpdate(const std::function<bool(const v1::GroupUpdate&)>& match,
                     absl::Duration timeout = absl::Seconds(20)) {
    aside::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      for (const v1::GroupUpdate& u : updates_) {
        if (match(u)) {
          return true;
        }
      }
      return done_;
    };
    mu_.AwaitWithTimeout(aside::Cond(&seen), timeout);
    for (const v1::GroupUpdate& u : updates_) {
      if (match(u)) {
        return true;
      }
    }
    return false;
  }
  bool done() {
    aside::MutexLock lock(&mu_);
    return done_;
  }
  bool WaitDone(absl::Duration timeout = absl::Seconds(20)) {
    aside::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(aside::Cond(&done_), timeout);
  }

  AppliedTable table(const std::string& group) {
    aside::MutexLock lock(&mu_);
    return tables_[group];
  }
  grpc::Status status() {
    aside::MutexLock lock(&mu_);
    return status_;
  }
  bool ordered() {
    aside::MutexLock lock(&mu_);
    return ordered_;
  }
  std::vector<v1::GroupUpdate> updates() {
    aside::MutexLock lock(&mu_);
    return updates_;
  }

 private:
  void Run() {
    v1::GroupUpdate u;
    while (reader_->Read(&u)) {
      aside::MutexLock lock(&mu_);
      updates_.push_back(u);
      ordered_ = tables_[u.group()].Apply(u) && ordered_;
    }
    grpc::Status s = reader_->Finish();
    aside::MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
  }

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> reader_;
  std::thread thread_;
  aside::Mutex mu_;
  std::map<std::string, AppliedTable> tables_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GroupUpdate> updates_ ABSL_GUARDED_BY(mu_);
  bool ordered_ ABSL_GUARDED_BY(mu_) = true;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

class WatchTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(""); }
  void TearDown() override {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
    }
  }

  void Start(const std::string& extra) {
    const std::string tokens =
        dir_.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    std::string backends;
    for (int i = 1; i <= 20; ++i) {
      absl::StrAppend(&backends, "      - 127.0.0.1:", 9000 + i, "\n");
    }
    absl::StatusOr<ServerConfig> config =
        ParseConfig(absl::StrCat("state_dir: ", dir_.path(), "/state\n",
                                 "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                                 "admin: {token_file: ", tokens, "}\n", extra),
                    "t.yaml");
    ASSERT_OK(config);
    auto server = AsideServer::Create(*config);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->Start());
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    lb_ = v1::LoadBalancer::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);
    std::string json;
    v1::CreateGroupRequest create;
    create.mutable_group()->set_name("web");
    create.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    for (int i = 1; i <= 20; ++i) {
      create.mutable_group()->add_backends()->set_address(
          absl::StrCat("127.0.0.1:", 9000 + i));
    }
    v1::Group g;
    ASSERT_TRUE(admin_->CreateGroup(Context().get(), create, &g).ok());
    create.mutable_group()->set_name("api");
    ASSERT_TRUE(admin_->CreateGroup(Context().get(), create, &g).ok());
  }

  // Creates a group of three backends; returns its generation.
  uint64_t CreateGroup(const std::string& name) {
    v1::CreateGroupRequest create;
    create.mutable_group()->set_name(name);
    create.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    for (int i = 1; i <= 3; ++i) {
      create.mutable_group()->add_backends()->set_address(
          absl::StrCat("127.0.0.1:", 9100 + i));
    }
    v1::Group g;
    grpc::Status s = admin_->CreateGroup(Context().get(), create, &g);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return g.generation();
  }

  void DeleteGroup(const std::string& name) {
    v1::DeleteGroupRequest del;
    del.set_name(name);
    v1::DeleteGroupResponse deleted;
    grpc::Status s = admin_->DeleteGroup(Context().get(), del, &deleted);
    EXPECT_TRUE(s.ok()) << s.error_message();
  }

  std::unique_ptr<grpc::ClientContext> Context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
    c->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    return c;
  }

  uint64_t Drain(const std::string& group, int backend, bool drained) {
    v1::DrainBackendsRequest r;
    r.set_group(group);
    r.add_addresses(absl::StrCat("127.0.0.1:", 9000 + backend));
    r.set_drained(drained);
    v1::Group g;
    grpc::Status s = admin_->DrainBackends(Context().get(), r, &g);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return g.generation();
  }

  uint64_t Generation(const std::string& group) {
    return server_->groups().Find(group)->table()->generation();
  }

  aside::testing::TempDir dir_;
  std::unique_ptr<AsideServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

TEST_F(WatchTest, FullTableFirstThenDeltas) {
  Subscriber sub(lb_.get(), {"web", "api"});
  ASSERT_TRUE(sub.WaitFor("web", Generation("web")));
  ASSERT_TRUE(sub.WaitFor("api", Generation("api")));
  AppliedTable web = sub.table("web");
  EXPECT_EQ(web.fulls, 1);
  EXPECT_EQ(web.backends.size(), 20u);
  EXPECT_TRUE(web.backends.at("127.0.0.1:9003").ready());

  const uint64_t g = Drain("web", 3, true);
  ASSERT_TRUE(sub.WaitFor("web", g));
  web = sub.table("web");
  EXPECT_EQ(web.fulls, 1);
  EXPECT_EQ(web.deltas, 1);
  EXPECT_FALSE(web.backends.at("127.0.0.1:9003").ready());
  EXPECT_TRUE(web.backends.at("127.0.0.1:9003").backend().drained());
  // The delta carried only the changed backend.
  const auto updates = sub.updates();
  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().delta().upserted_size(), 1);
  EXPECT_TRUE(sub.ordered());
}

class WatchFanoutTest : public WatchTest,
                        public ::testing::WithParamInterface<int> {};

TEST_P(WatchFanoutTest, EverySubscriberConvergesOnTheSameGeneration) {
  const int n = GetParam();
  // Subscribers spread over connections as separate services would be (the
  // server caps concurrent streams per connection at 100).
  std::vector<std::unique_ptr<v1::LoadBalancer::Stub>> stubs;
  std::vector<std::unique_ptr<Subscriber>> subs;
  for (int i = 0; i < n; ++i) {
    if (i % 50 == 0) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.use_local_subchannel_pool", 1);
      stubs.push_back(v1::LoadBalancer::NewStub(grpc::CreateCustomChannel(
          "127.0.0.1:" + std::to_string(server_->grpc_port()),
          grpc::InsecureChannelCredentials(), args)));
    }
    subs.push_back(std::make_unique<Subscriber>(
        stubs.back().get(), std::vector<std::string>{"web"}));
  }
  // A burst of changes: subscribers may skip intermediate generations but
  // never see them out of order, and all end on the last one.
  uint64_t last = 0;
  for (int i = 1; i <= 10; ++i) {
    last = Drain("web", i, i % 2 == 0);
  }
  for (auto& s : subs) {
    ASSERT_TRUE(s->WaitFor("web", last));
    EXPECT_TRUE(s->ordered());
    const AppliedTable t = s->table("web");
    EXPECT_EQ(t.generation, last);
    for (int i = 1; i <= 10; ++i) {
      EXPECT_EQ(t.backends.at(absl::StrCat("127.0.0.1:", 9000 + i)).ready(),
                i % 2 != 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Subscribers, WatchFanoutTest,
                         ::testing::Values(1, 10, 200));

bool IsAbsent(const v1::GroupUpdate& u, const std::string& group,
              v1::GroupRemoved::Cause cause) {
  return u.group() == group && u.has_removed() &&
         u.removed().cause() == cause &&
         u.removed().code() == static_cast<int>(grpc::StatusCode::NOT_FOUND);
}

TEST_F(WatchTest, ADeletedGroupIsReportedInTheStreamAndItsReturnFollows) {
  Subscriber sub(lb_.get(), {"web", "api"});
  ASSERT_TRUE(sub.WaitFor("web", Generation("web")));
  ASSERT_TRUE(sub.WaitFor("api", Generation("api")));
  const uint64_t before = Generation("web");
  DeleteGroup("web");
  ASSERT_TRUE(sub.WaitForUpdate([](const v1::GroupUpdate& u) {
    return IsAbsent(u, "web", v1::GroupRemoved::CAUSE_DELETED);
  }));
  EXPECT_TRUE(sub.table("web").removed);
  EXPECT_GT(sub.table("web").generation, before);
  for (const v1::GroupUpdate& u : sub.updates()) {
    if (u.has_removed()) {
      EXPECT_THAT(u.removed().reason(), HasSubstr("'web'"));
    }
  }
  // The other group keeps its stream.
  const uint64_t g = Drain("api", 2, true);
  ASSERT_TRUE(sub.WaitFor("api", g));
  EXPECT_EQ(sub.table("api").fulls, 1);
  EXPECT_EQ(sub.table("api").deltas, 1);
  // Re-created: its full table follows on the same stream.
  const uint64_t recreated = CreateGroup("web");
  ASSERT_TRUE(sub.WaitFor("web", recreated));
  const AppliedTable web = sub.table("web");
  EXPECT_FALSE(web.removed);
  EXPECT_EQ(web.fulls, 2);
  EXPECT_EQ(web.backends.size(), 3u);
  // And it is followed like any group.
  const uint64_t again = Drain("web", 101, true);
  ASSERT_TRUE(sub.WaitFor("web", again));
  EXPECT_EQ(sub.table("web").deltas, 1);
  EXPECT_TRUE(sub.ordered());
  EXPECT_FALSE(sub.done());
}

TEST_F(WatchTest, AnUnknownGroupIsReportedAndTheKnownOneKeepsItsUpdates) {
  Subscriber sub(lb_.get(), {"web", "later"});
  ASSERT_TRUE(sub.WaitFor("web", Generation("web")));
  ASSERT_TRUE(sub.WaitForUpdate([](const v1::GroupUpdate& u) {
    return IsAbsent(u, "later", v1::GroupRemoved::CAUSE_NOT_FOUND);
  }));
  EXPECT_EQ(sub.table("later").generation, 0u);
  for (int i = 1; i <= 3; ++i) {
    const uint64_t g = Drain("web", i, true);
    ASSERT_TRUE(sub.WaitFor("web", g));
  }
  EXPECT_EQ(sub.table("web").fulls, 1);
  EXPECT_EQ(sub.table("web").deltas, 3);
  // The unknown group was reported once, not on every change.
  int reports = 0;
  for (const v1::GroupUpdate& u : sub.updates()) {
    reports += u.group() == "later" ? 1 : 0;
  }
  EXPECT_EQ(reports, 1);
  // Created later: the stream picks it up.
  const uint64_t created = CreateGroup("later");
  ASSERT_TRUE(sub.WaitFor("later", created));
  EXPECT_EQ(sub.table("later").fulls, 1);
  EXPECT_FALSE(sub.table("later").removed);
  EXPECT_TRUE(sub.ordered());
  EXPECT_FALSE(sub.done());
}

// A stream whose every group is unknown stays open (see the Watch rpc's
// comment) and delivers the group once it exists.
TEST_F(WatchTest, AStreamOfOnlyUnknownGroupsWaitsForThem) {
  Subscriber sub(lb_.get(), {"first", "second"});
  ASSERT_TRUE(sub.WaitForUpdate([](const v1::GroupUpdate& u) {
    return IsAbsent(u, "second", v1::GroupRemoved::CAUSE_NOT_FOUND);
  }));
  ASSERT_TRUE(sub.WaitForUpdate([](const v1::GroupUpdate& u) {
    return IsAbsent(u, "first", v1::GroupRemoved::CAUSE_NOT_FOUND);
  }));
  const uint64_t created = CreateGroup("second");
  ASSERT_TRUE(sub.WaitFor("second", created));
  EXPECT_FALSE(sub.done());
  EXPECT_EQ(sub.updates().size(), 3u);
}

// A group created while the stream subscribes is delivered whichever comes
// first: the stream's lookup or the registry's announcement.
TEST_F(WatchTest, AGroupCreatedAsTheStreamStartsIsDelivered) {
  for (int i = 0; i < 10; ++i) {
    const std::string name = absl::StrCat("racing-", i);
    uint64_t created = 0;
    std::thread create([&] { created = CreateGroup(name); });
    Subscriber sub(lb_.get(), {name});
    create.join();
    ASSERT_TRUE(sub.WaitFor(name, created)) << name;
    EXPECT_TRUE(sub.ordered());
    EXPECT_FALSE(sub.done());
  }
}

// Waiting for a group costs the server nothing while it waits: a cancelled
// stream is let go at once.
TEST_F(WatchTest, AStreamWaitingForAGroupEndsAtOnceWhenCancelled) {
  {
    Subscriber sub(lb_.get(), {"nowhere"});
    ASSERT_TRUE(sub.WaitForUpdate([](const v1::GroupUpdate& u) {
      return IsAbsent(u, "nowhere", v1::GroupRemoved::CAUSE_NOT_FOUND);
    }));
    EXPECT_EQ(server_->watch_hub().streams(), 1u);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (server_->watch_hub().streams() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(server_->watch_hub().streams(), 0u);
}

TEST_F(WatchTest, ResumingAtTheCurrentGenerationGetsAConfirmation) {
  const uint64_t g = Generation("web");
  Subscriber sub(lb_.get(), {"web"}, {{"web", g}});
  ASSERT_TRUE(sub.WaitFor("web", g));
  const auto updates = sub.updates();
  ASSERT_EQ(updates.size(), 1u);
  EXPECT_TRUE(updates[0].has_delta());
  EXPECT_EQ(updates[0].delta().upserted_size(), 0);
  // And a stale generation gets the full table.
  Subscriber stale(lb_.get(), {"web"}, {{"web", g - 5}});
  ASSERT_TRUE(stale.WaitFor("web", g));
  EXPECT_TRUE(stale.updates()[0].has_full());
}

// A subscriber that comes back a few generations behind (or whose writes
// fell behind) gets one delta from what it holds, not the whole table.
TEST_F(WatchTest, ResumingAFewGenerationsBehindGetsOneCombinedDelta) {
  const uint64_t held = Generation("web");
  Drain("web", 3, true);
  Drain("web", 4, true);
  const uint64_t now = Drain("web", 5, true);
  ASSERT_GT(now, held);
  Subscriber sub(lb_.get(), {"web"}, {{"web", held}});
  ASSERT_TRUE(sub.WaitFor("web", now));
  const auto updates = sub.updates();
  ASSERT_EQ(updates.size(), 1u);
  ASSERT_TRUE(updates[0].has_delta());
  EXPECT_EQ(updates[0].delta().base_generation(), held);
  EXPECT_EQ(updates[0].delta().upserted_size(), 3);
}

TEST_F(WatchTest, BadRequests) {
  Subscriber none(lb_.get(), {});
  ASSERT_TRUE(none.WaitDone());
  EXPECT_EQ(none.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Subscriber invalid(lb_.get(), {"web", "Not A Name"});
  ASSERT_TRUE(invalid.WaitDone());
  EXPECT_EQ(invalid.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(invalid.status().error_message(), HasSubstr("groups[1]"));
  Subscriber twice(lb_.get(), {"web", "web"});
  ASSERT_TRUE(twice.WaitDone());
  EXPECT_EQ(twice.status().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(WatchTest, ShutdownEndsStreamsWithUnavailable) {
  Subscriber sub(lb_.get(), {"web"});
  ASSERT_TRUE(sub.WaitFor("web", Generation("web")));
  server_->Shutdown(absl::Seconds(5));
  ASSERT_TRUE(sub.WaitDone());
  EXPECT_EQ(sub.status().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Resident memory of this process in KiB.
long RssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stol(line.substr(6));
    }
  }
  return 0;
}

// A server with one big group ("big": each full table is several hundred
// KiB), a subscriber that never reads (its stream stalls once HTTP/2 flow
// control is exhausted: the first full table already exceeds the window)
// and a healthy one, both streams open on the server (Start).
struct SlowReaderSetup {
  void Start(const std::string& stall_timeout) {
    const std::string tokens =
        dir.WriteSecret("tokens", absl::StrCat(kToken, " admin\n"));
    absl::StatusOr<ServerConfig> config = ParseConfig(
        absl::StrCat("state_dir: ", dir.path(), "/state\n",
                     "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                     "limits: {watch_stall_timeout: ", stall_timeout, "}\n",
                     "admin: {token_file: ", tokens, "}\n"),
        "t.yaml");
    ASSERT_OK(config);
    ASSERT_OK_AND_ASSIGN(server, AsideServer::Create(*config));
    ASSERT_OK(server->Start());
    const std::string target =
        "127.0.0.1:" + std::to_string(server->grpc_port());
    channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
    admin = v1::Admin::NewStub(channel);
    create.mutable_group()->set_name("big");
    create.mutable_group()->mutable_health_check()->set_kind(
        v1::HealthCheck::NONE);
    for (int i = 0; i < 5000; ++i) {
      v1::Backend* b = create.mutable_group()->add_backends();
      b->set_address(absl::StrCat("10.", i / 250, ".", i % 250 + 1, ".1:8080"));
      (*b->mutable_metadata())["padding"] = std::string(60, 'p');
    }
    ASSERT_TRUE(admin->CreateGroup(Context().get(), create, &group).ok());

    // The stalled subscriber: its own channel, never reads.
    stalled_channel = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), [] {
          grpc::ChannelArguments a;
          a.SetInt("grpc.use_local_subchannel_pool", 1);
          // Keep the flow-control window at its initial size.
          a.SetInt("grpc.http2.bdp_probe", 0);
          return a;
        }());
    stalled_stub = v1::LoadBalancer::NewStub(stalled_channel);
    v1::WatchRequest request;
    request.add_groups("big");
    stalled = stalled_stub->Watch(&stalled_context, request);

    lb = v1::LoadBalancer::NewStub(channel);
    healthy =
        std::make_unique<Subscriber>(lb.get(), std::vector<std::string>{"big"});
    ASSERT_TRUE(healthy->WaitFor("big", group.generation()));
    // The stalled call reaches the server asynchronously; the hub offers
    // no event for it, so poll (bounded).
    ASSERT_TRUE(StreamsBecome(2));
  }

  std::unique_ptr<grpc::ClientContext> Context() const {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(30));
    c->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    return c;
  }

  // Whether the hub holds `n` streams within 10 s.
  bool StreamsBecome(size_t n) const {
    for (const absl::Time until = absl::Now() + absl::Seconds(10);
         server->watch_hub().streams() != n && absl::Now() < until;) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return server->watch_hub().streams() == n;
  }

  aside::testing::TempDir dir;
  std::unique_ptr<AsideServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Admin::Stub> admin;
  v1::CreateGroupRequest create;
  v1::Group group;
  std::shared_ptr<grpc::Channel> stalled_channel;
  std::unique_ptr<v1::LoadBalancer::Stub> stalled_stub;
  grpc::ClientContext stalled_context;
  std::unique_ptr<grpc::ClientReader<v1::GroupUpdate>> stalled;
  std::unique_ptr<v1::LoadBalancer::Stub> lb;
  std::unique_ptr<Subscriber> healthy;
};

TEST(WatchSlowReaderTest, NeverReadingIsBoundedAndEndedAndHarmsNoOne) {
  SlowReaderSetup setup;
  setup.Start("1s");
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  AsideServer* const server = setup.server.get();
  v1::Group& g = setup.group;
  const v1::CreateGroupRequest& create = setup.create;
  Subscriber& healthy = *setup.healthy;
  auto context = [&] { return setup.Context(); };
  const long rss_before = RssKib();

  // Every change flips every backend, so each update is a whole table.
  uint64_t last = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  int changes = 0;
  while (server->watch_hub().streams() > 1 && absl::Now() < deadline) {
    v1::UpdateGroupRequest update;
    *update.mutable_group() = create.group();
    for (v1::Backend& b : *update.mutable_group()->mutable_backends()) {
      b.set_drained(changes % 2 == 0);
    }
    update.mutable_update_mask()->add_paths("backends");
    ASSERT_TRUE(setup.admin->UpdateGroup(context().get(), update, &g).ok());
    last = g.generation();
    ++changes;
    ASSERT_TRUE(healthy.WaitFor("big", last))
        << "healthy subscriber lagged at change " << changes << ": "
        << healthy.status().error_message() << " gen "
        << healthy.table("big").generation << " want " << last;
  }
  EXPECT_EQ(server->watch_hub().streams(), 1u)
      << "the stalled stream was not ended after " << changes << " changes";
  EXPECT_TRUE(healthy.ordered());
  // Bounded: the server held at most one pending table for the stalled
  // stream, not a backlog of every change.
  const long growth_mib = (RssKib() - rss_before) / 1024;
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer holds freed memory in its quarantine (256 MiB by
  // default) before reusing it, so every freed table shows in RSS.
  constexpr long kMaxGrowthMib = 200 + 256;
#else
  constexpr long kMaxGrowthMib = 200;
#endif
  EXPECT_LT(growth_mib, kMaxGrowthMib) << "after " << changes << " changes";
  RecordProperty("changes_until_ended", changes);
  setup.stalled_context.TryCancel();
  grpc::Status s = setup.stalled->Finish();
  EXPECT_TRUE(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
              s.error_code() == grpc::StatusCode::CANCELLED)
      << s.error_message();
  server->Shutdown(absl::Seconds(1));
  server->Wait();
}

// At shutdown a stream whose write is in flight ends after that write
// (UNAVAILABLE, not overtaken by a cancellation); one whose write never
// completes, as here, is cancelled by the hub rather than left to the
// server's grace. The hub alone is shut down, so nothing else ends it.
TEST(WatchSlowReaderTest, AStreamStuckInAWriteStillEndsAtShutdown) {
  SlowReaderSetup setup;
  setup.Start("1h");
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  setup.server->watch_hub().Shutdown();
  EXPECT_TRUE(setup.StreamsBecome(0))
      << setup.server->watch_hub().streams() << " streams left";
  ASSERT_TRUE(setup.healthy->WaitDone());
  EXPECT_EQ(setup.healthy->status().error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // The stalled client never reads what is buffered for it: it ends its
  // side itself.
  setup.stalled_context.TryCancel();
  (void)setup.stalled->Finish();
  setup.server->Shutdown(absl::Seconds(1));
  setup.server->Wait();
}

// A connection past limits.max_connection_age gets a GOAWAY; once the grace
// has passed the connection closes and its Watch streams end, leaving the
// hub (the stub then resumes on a new connection).
TEST(WatchConnectionAgeTest, StreamsEndWhenTheConnectionIsRetired) {
  aside::testing::TempDir dir;
  absl::StatusOr<ServerConfig> config =
      ParseConfig(absl::StrCat("state_dir: ", dir.path(), "/state\n",
                               "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                               "limits: {max_connection_age: 1s, "
                               "max_connection_age_grace: 100ms}\n"),
                  "t.yaml");
  ASSERT_OK(config);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<AsideServer> server,
                       AsideServer::Create(*config));
  ASSERT_OK(server->Start());
  auto stub = v1::LoadBalancer::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(20));
  v1::WatchRequest request;
  request.add_groups("absent");  // answered once, then the stream waits
  auto reader = stub->Watch(&context, request);
  v1::GroupUpdate update;
  ASSERT_TRUE(reader->Read(&update));
  EXPECT_TRUE(update.has_removed());
  EXPECT_EQ(server->watch_hub().streams(), 1u);
  while (reader->Read(&update)) {
  }
  const grpc::Status status = reader->Finish();
  EXPECT_NE(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << "the stream outlived its connection's age";
  EXPECT_NE(status.error_code(), grpc::StatusCode::OK);
  // The server learns of the end on its own thread: poll (bounded).
  for (const absl::Time until = absl::Now() + absl::Seconds(10);
       server->watch_hub().streams() != 0 && absl::Now() < until;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(server->watch_hub().streams(), 0u);
  server->Shutdown(absl::Seconds(1));
  server->Wait();
}

}  // namespace
}  // namespace aside::server
