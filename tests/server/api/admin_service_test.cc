// aside.v1.Admin over real gRPC against an in-process server with a real
// state store: every operation, every error case, authorisation, and
// durability across a restart.
#include "server/api/admin_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/lb/v1/load_balancer.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/process.h"
#include "tests/testing/status_matchers.h"

namespace aside::server {
namespace {

using ::testing::HasSubstr;

constexpr char kAdminToken[] = "admin-token-0123456789";
constexpr char kReadToken[] = "read-token-0123456789";
// A backend's credential: DrainBackends of its own address only. The test's
// client connects from 127.0.0.1, so that is the caller's own address.
constexpr char kSelfDrainToken[] = "self-drain-token-0123456789";

#define ASSERT_GRPC_OK(expr)                              \
  do {                                                    \
    const grpc::Status status_ = (expr);                  \
    ASSERT_TRUE(status_.ok()) << status_.error_message(); \
  } while (0)

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = dir_.WriteFile(
        "tokens",
        absl::StrCat("# tokens\n", kAdminToken, " admin\n", kReadToken,
                     " read\n", kSelfDrainToken, " self-drain pods\n"));
    Start();
  }

  void TearDown() override { Stop(); }

  void Start(const std::string& extra_config = "") {
    absl::StatusOr<ServerConfig> config = ParseConfig(
        absl::StrCat("state_dir: ", dir_.path(), "/state\n",
                     "listen: 127.0.0.1:0\nmetrics: \"\"\n",
                     "load_reports: {auth: open}\n", "admin: {token_file: \"",
                     token_file_, "\"}\n", R"(
groups:
  - name: from-file
    health_check: {kind: none}
    backends: [127.0.0.1:7001]
)",
                     extra_config),
        "test.yaml");
    ASSERT_OK(config);
    auto server = AsideServer::Create(*config);
    ASSERT_OK(server);
    server_ = *std::move(server);
    ASSERT_OK(server_->Start());
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    admin_ = v1::Admin::NewStub(channel_);
    lb_ = v1::LoadBalancer::NewStub(channel_);
  }

  void Stop() {
    if (server_ != nullptr) {
      server_->Shutdown(absl::Seconds(1));
      server_->Wait();
      server_.reset();
    }
  }

  std::unique_ptr<grpc::ClientContext> Context(
      const char* token = kAdminToken) {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
    if (token != nullptr) {
      c->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    }
    return c;
  }

  static v1::Group FromJson(const std::string& json) {
    v1::Group g;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &g).ok())
        << json;
    return g;
  }

  grpc::Status Create(const std::string& json, v1::Group* out = nullptr,
                      const char* token = kAdminToken) {
    v1::CreateGroupRequest request;
    *request.mutable_group() = FromJson(json);
    v1::Group response;
    return admin_->CreateGroup(Context(token).get(), request,
                               out != nullptr ? out : &response);
  }

  grpc::Status Get(const std::string& name, v1::Group* out,
                   const char* token = kAdminToken) {
    v1::GetGroupRequest request;
    request.set_name(name);
    return admin_->GetGroup(Context(token).get(), request, out);
  }

  grpc::Status Drain(const std::string& group,
                     std::vector<std::string> addresses, bool drained,
                     v1::Group* out = nullptr,
                     const char* token = kAdminToken) {
    v1::DrainBackendsRequest request;
    request.set_group(group);
    for (auto& a : addresses) request.add_addresses(a);
    request.set_drained(drained);
    v1::Group response;
    return admin_->DrainBackends(Context(token).get(), request,
                                 out != nullptr ? out : &response);
  }

  grpc::Status Pick(const std::string& group, v1::PickResponse* out) {
    v1::PickRequest request;
    request.set_group(group);
    return lb_->Pick(Context(nullptr).get(), request, out);
  }

  aside::testing::TempDir dir_;
  std::string token_file_;
  std::unique_ptr<AsideServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<v1::LoadBalancer::Stub> lb_;
};

TEST_F(AdminTest, CreateGetListAndPick) {
  v1::Group created;
  grpc::Status s = Create(R"({"name":"web","policy":{"weightedRoundRobin":{}},
      "healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001","weight":3},
                  {"address":"127.0.0.1:8002"}]})",
                          &created);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(created.source(), v1::GROUP_SOURCE_STORE);
  EXPECT_GT(created.generation(), 0u);
  EXPECT_EQ(created.state_size(), 2);
  EXPECT_EQ(created.ready_count(), 2u);

  v1::Group got;
  ASSERT_TRUE(Get("web", &got, kReadToken).ok());
  EXPECT_EQ(got.backends_size(), 2);
  EXPECT_EQ(got.backends(0).weight(), 3u);

  v1::ListGroupsResponse list;
  ASSERT_TRUE(admin_->ListGroups(Context(kReadToken).get(), {}, &list).ok());
  ASSERT_EQ(list.groups_size(), 2);
  EXPECT_EQ(list.groups(0).name(), "from-file");
  EXPECT_EQ(list.groups(0).source(), v1::GROUP_SOURCE_FILE);
  EXPECT_EQ(list.groups(1).name(), "web");
  EXPECT_EQ(list.groups(1).backends_size(), 0);  // summaries only

  v1::PickResponse pick;
  ASSERT_TRUE(Pick("web", &pick).ok());
  EXPECT_EQ(pick.generation(), created.generation());
}

TEST_F(AdminTest, GetGroupShowsOpenGrpclbStreamsAndTheirClientStats) {
  // One grpclb client of the file group.
  auto lb = grpc::lb::v1::LoadBalancer::NewStub(channel_);
  auto context = Context(nullptr);
  auto stream = lb->BalanceLoad(context.get());
  grpc::lb::v1::LoadBalanceRequest request;
  request.mutable_initial_request()->set_name("from-file.lb.test:443");
  ASSERT_TRUE(stream->Write(request));
  grpc::lb::v1::LoadBalanceResponse response;
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_initial_response());
  v1::Group got;
  ASSERT_TRUE(Get("from-file", &got).ok());
  EXPECT_EQ(got.client_stats().streams(), 1u);
  EXPECT_FALSE(got.client_stats().has_last_report());

  grpc::lb::v1::LoadBalanceRequest stats;
  stats.mutable_client_stats()->set_num_calls_started(7);
  ASSERT_TRUE(stream->Write(stats));
  // The report is folded in when the server reads it: poll, bounded.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (got.client_stats().calls_started() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE(Get("from-file", &got).ok());
  }
  EXPECT_EQ(got.client_stats().calls_started(), 7u);
  EXPECT_EQ(got.client_stats().streams(), 1u);
  EXPECT_TRUE(got.client_stats().has_last_report());

  stream->WritesDone();
  while (stream->Read(&response)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  // Closed streams no longer count; the totals stay.
  while (got.client_stats().streams() != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    ASSERT_TRUE(Get("from-file", &got).ok());
  }
  EXPECT_EQ(got.client_stats().streams(), 0u);
  EXPECT_EQ(got.client_stats().calls_started(), 7u);
}

TEST_F(AdminTest, BackendsAddRemoveDrainAndGenerationsIncrease) {
  ASSERT_TRUE(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"}]})")
                  .ok());
  v1::Group g;
  ASSERT_TRUE(Get("web", &g).ok());
  uint64_t generation = g.generation();

  v1::AddBackendsRequest add;
  add.set_group("web");
  add.add_backends()->set_address("127.0.0.1:8002");
  add.add_backends()->set_address("[::1]:8003");
  ASSERT_TRUE(admin_->AddBackends(Context().get(), add, &g).ok());
  EXPECT_EQ(g.backends_size(), 3);
  EXPECT_GT(g.generation(), generation);
  generation = g.generation();

  ASSERT_TRUE(Drain("web", {"127.0.0.1:8001", "[0::1]:8003"}, true, &g).ok());
  EXPECT_GT(g.generation(), generation);
  generation = g.generation();
  EXPECT_EQ(g.ready_count(), 1u);
  for (int i = 0; i < 10; ++i) {
    v1::PickResponse pick;
    ASSERT_TRUE(Pick("web", &pick).ok());
    EXPECT_EQ(pick.backends(0).address(), "127.0.0.1:8002");
  }

  v1::RemoveBackendsRequest remove;
  remove.set_group("web");
  remove.add_addresses("127.0.0.1:8002");
  ASSERT_TRUE(admin_->RemoveBackends(Context().get(), remove, &g).ok());
  EXPECT_GT(g.generation(), generation);
  v1::PickResponse pick;
  grpc::Status s = Pick("web", &pick);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);

  ASSERT_TRUE(Drain("web", {"127.0.0.1:8001"}, false, &g).ok());
  ASSERT_TRUE(Pick("web", &pick).ok());
  EXPECT_EQ(pick.backends(0).address(), "127.0.0.1:8001");
}

TEST_F(AdminTest, UpdateGroupWithAMask) {
  ASSERT_TRUE(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"},{"address":"127.0.0.1:8002"}]})")
                  .ok());
  v1::UpdateGroupRequest update;
  *update.mutable_group() =
      FromJson(R"({"name":"web","policy":{"weightedRoundRobin":{}},
                   "panicThreshold":0})");
  update.mutable_update_mask()->add_paths("policy");
  update.mutable_update_mask()->add_paths("panic_threshold");
  v1::Group g;
  grpc::Status s = admin_->UpdateGroup(Context().get(), update, &g);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(g.policy().has_weighted_round_robin());
  EXPECT_EQ(g.panic_threshold(), 0);
  EXPECT_EQ(g.backends_size(), 2);  // untouched

  update.mutable_update_mask()->Clear();
  update.mutable_update_mask()->add_paths("bogus");
  s = admin_->UpdateGroup(Context().get(), update, &g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("update_mask: unknown path 'bogus'"));
  // The name selects the group; what the server reports is not a setting.
  for (const char* path :
       {"name", "generation", "state", "policy.bogus", "backends.address"}) {
    update.mutable_update_mask()->Clear();
    update.mutable_update_mask()->add_paths(path);
    s = admin_->UpdateGroup(Context().get(), update, &g);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << path;
    EXPECT_THAT(s.error_message(),
                HasSubstr(absl::StrCat("update_mask: unknown path '", path)));
    EXPECT_THAT(s.error_message(), HasSubstr("orca"));
  }

  // A path inside a setting changes that field alone.
  *update.mutable_group() = FromJson(
      R"({"name":"web","healthCheck":{"kind":"TCP","interval":"7s"}})");
  update.mutable_update_mask()->Clear();
  update.mutable_update_mask()->add_paths("health_check.interval");
  s = admin_->UpdateGroup(Context().get(), update, &g);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(g.health_check().interval().seconds(), 7);
  EXPECT_EQ(g.health_check().kind(), v1::HealthCheck::NONE);
  EXPECT_TRUE(g.policy().has_weighted_round_robin());
  EXPECT_EQ(g.backends_size(), 2);
}

TEST_F(AdminTest, ValidationNamesTheFieldAndChangesNothing) {
  struct Case {
    const char* json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"name":"Bad Name"})", "group.name: group name 'Bad Name'"},
      {R"({"name":""})", "group.name: group name is empty"},
      {R"({"name":"g","backends":[{"address":"10.0.0.1"}]})",
       "group.backends[0].address: address '10.0.0.1': missing ':port'"},
      {R"({"name":"g","backends":[{"address":"10.0.0.1:0"}]})",
       "group.backends[0].address"},
      {R"({"name":"g","backends":[{"address":"10.0.0.1:70000"}]})",
       "out of range 1..65535"},
      {R"({"name":"g","backends":[{"address":"10.0.0.1:80","weight":10001}]})",
       "group.backends[0].weight: 10001 out of range 0..10000"},
      {R"({"name":"g","backends":[{"address":"10.0.0.1:80"},{"address":"10.0.0.1:80"}]})",
       "group.backends[1].address: 10.0.0.1:80 is listed twice"},
      {R"({"name":"g","backends":[{"address":"db.internal:80"}]})",
       "is a host name"},
      {R"({"name":"g","policy":{"maglev":{"tableSize":"65536"}}})",
       "group.policy.maglev.table_size: 65536 is not a prime"},
      {R"({"name":"g","policy":{"ketama":{"pointsPerWeight":0}}})",
       "group.policy.ketama.points_per_weight: 0 out of range"},
      {R"({"name":"g","policy":{"leastTime":{"alpha":1.5}}})",
       "group.policy.least_time.alpha"},
      {R"({"name":"g","policy":{"p2c":{"decay":"-1s"}}})",
       "group.policy.p2c.decay"},
      {R"({"name":"g","policy":{"p2c":{"decay":"999999999s"}}})",
       "group.policy.p2c.decay"},
      {R"({"name":"g","panicThreshold":101})",
       "group.panic_threshold: 101 out of range 0..100"},
      {R"({"name":"g","healthCheck":{"interval":"1s","timeout":"2s"}})",
       "group.health_check.timeout"},
      {R"({"name":"g","healthCheck":{"kind":"HTTP","http":{"path":"/a\r\nHost: x"}}})",
       "group.health_check.http.path"},
      {R"({"name":"g","healthCheck":{"kind":"HTTP","http":{"expectedStatuses":[{"from":200,"to":700}]}}})",
       "group.health_check.http.expected_statuses[0]"},
      {R"({"name":"g","healthCheck":{"rise":0}})",
       "group.health_check.rise: 0 out of range"},
      {R"({"name":"g","healthCheck":{"jitter":0.9}})",
       "group.health_check.jitter"},
      {R"({"name":"g","slowStart":"7200s"})", "group.slow_start"},
      {R"({"name":"g","outlierDetection":{"enabled":true,"maxEjectionPercent":200}})",
       "group.outlier_detection.max_ejection_percent"},
      {R"({"name":"g","dns":{"name":"svc.local"}})",
       "group.dns.port: 0 out of range 1..65535"},
  };
  for (const Case& c : cases) {
    grpc::Status s = Create(c.json);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.json;
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.json;
  }
  v1::ListGroupsResponse list;
  ASSERT_TRUE(admin_->ListGroups(Context().get(), {}, &list).ok());
  EXPECT_EQ(list.groups_size(), 1);  // only the file's group
}

TEST_F(AdminTest, UnknownEnumValuesAreRejected) {
  v1::CreateGroupRequest request;
  request.mutable_group()->set_name("g");
  request.mutable_group()->mutable_health_check()->set_kind(
      static_cast<v1::HealthCheck::Kind>(42));
  v1::Group out;
  grpc::Status s = admin_->CreateGroup(Context().get(), request, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("group.health_check.kind: unknown"));
}

TEST_F(AdminTest, WeightSumPastTwoToTheThirtyTwoIsRejected) {
  // 10000 backends is the cap per group; weights 10000 each sum to 1e8, so the
  // sum check is exercised through the validator directly.
  GroupSpec spec;
  spec.name = "huge";
  for (int i = 0; i < 5; ++i) {
    Backend b;
    b.address = absl::StrCat("10.0.0.", i + 1, ":80");
    b.weight = 10000;
    spec.backends.push_back(b);
  }
  EXPECT_OK(ValidateGroupSpec(spec));
  spec.backends.resize(kMaxBackendsPerGroup + 1, spec.backends[0]);
  EXPECT_THAT(ValidateGroupSpec(spec),
              aside::testing::StatusIs(absl::StatusCode::kResourceExhausted,
                                       HasSubstr("at most 10000")));
}

TEST_F(AdminTest, ConflictsAndMissingThings) {
  ASSERT_TRUE(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"}]})")
                  .ok());
  grpc::Status s = Create(R"({"name":"web"})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("group 'web' already exists"));

  v1::AddBackendsRequest add;
  add.set_group("web");
  add.add_backends()->set_address("127.0.0.1:8001");
  v1::Group g;
  s = admin_->AddBackends(Context().get(), add, &g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("127.0.0.1:8001 is already in"));

  add.set_group("nope");
  s = admin_->AddBackends(Context().get(), add, &g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  s = Drain("web", {"127.0.0.1:9999"}, true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("127.0.0.1:9999 is not in group"));
  s = Drain("web", {}, true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Drain("web", {"not-an-address"}, true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("addresses[0]"));

  v1::DeleteGroupRequest del;
  del.set_name("nope");
  v1::DeleteGroupResponse deleted;
  s = admin_->DeleteGroup(Context().get(), del, &deleted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AdminTest, FileGroupsAreReadOnly) {
  grpc::Status s = Drain("from-file", {"127.0.0.1:7001"}, true);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(),
              HasSubstr("declared in the config file test.yaml"));
  v1::DeleteGroupRequest del;
  del.set_name("from-file");
  v1::DeleteGroupResponse deleted;
  s = admin_->DeleteGroup(Context().get(), del, &deleted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  v1::Group g;
  EXPECT_TRUE(Get("from-file", &g).ok());
}

TEST_F(AdminTest, EchoedNamesAreCutAndEscaped) {
  v1::Group g;
  std::string long_name(10000, 'x');
  long_name += "\r\n";
  grpc::Status s = Get(long_name, &g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("... (10002 bytes)' not found"));
  EXPECT_LT(s.error_message().size(), 200u) << s.error_message();
  s = Get(std::string("a\0\n", 3), &g);
  EXPECT_THAT(s.error_message(), HasSubstr("group 'a\\000\\n' not found"));
}

TEST_F(AdminTest, AliasesCannotTakeAnotherGroupsClients) {
  Stop();
  Start(R"(
  - name: file-web
    health_check: {kind: none}
    aliases: [web.example]
    backends: [127.0.0.1:7002]
)");
  struct Case {
    std::string json;
    std::string message;
  };
  const Case cases[] = {
      {R"({"name":"evil","aliases":["from-file"]})",
       "group.aliases[0]: alias 'from-file' is already the name of group "
       "'from-file' (config file test.yaml)"},
      {R"({"name":"evil","aliases":["ok.example","web.example"]})",
       "group.aliases[1]: alias 'web.example' is already an alias of group "
       "'file-web' (config file test.yaml)"},
      {R"({"name":"evil","aliases":["web.example:443"]})",
       "alias 'web.example:443' overlaps alias 'web.example' of group "
       "'file-web'"},
      {R"({"name":"evil","aliases":["from-file.svc.cluster.local"]})",
       "would take the clients of group 'from-file'"},
      {R"({"name":"web.example"})",
       "group.name: name 'web.example' is already an alias of group "
       "'file-web' (config file test.yaml)"},
      // DNS names: case and a trailing dot do not make another name.
      {R"({"name":"evil","aliases":["FROM-FILE"]})",
       "group.aliases[0]: alias 'FROM-FILE' is already the name of group "
       "'from-file'"},
      {R"({"name":"evil","aliases":["From-File.example.internal"]})",
       "would take the clients of group 'from-file'"},
      {R"({"name":"evil","aliases":["Web.Example."]})",
       "group.aliases[0]: alias 'Web.Example.' is already an alias of group "
       "'file-web'"},
  };
  for (const Case& c : cases) {
    grpc::Status s = Create(c.json);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << c.json;
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.json;
  }
  v1::Group g;
  EXPECT_EQ(Get("evil", &g).error_code(), grpc::StatusCode::NOT_FOUND);

  // Between Admin groups too, on create and on update.
  ASSERT_TRUE(Create(R"({"name":"a","healthCheck":{"kind":"NONE"},
                         "aliases":["shared.example"]})")
                  .ok());
  ASSERT_TRUE(Create(R"({"name":"b","healthCheck":{"kind":"NONE"}})").ok());
  grpc::Status s = Create(R"({"name":"c","aliases":["shared.example"]})");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(
      s.error_message(),
      HasSubstr("alias 'shared.example' is already an alias of group 'a' "
                "(created through Admin)"));
  v1::UpdateGroupRequest update;
  *update.mutable_group() =
      FromJson(R"({"name":"b","aliases":["shared.example"]})");
  update.mutable_update_mask()->add_paths("aliases");
  v1::Group updated;
  s = admin_->UpdateGroup(Context().get(), update, &updated);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(s.error_message(), HasSubstr("already an alias of group 'a'"));
  ASSERT_TRUE(Get("b", &g).ok());
  EXPECT_EQ(g.aliases_size(), 0);
  // A group may keep (and re-send) its own aliases; a freed alias is free.
  *update.mutable_group() =
      FromJson(R"({"name":"a","aliases":["shared.example","a2.example"]})");
  EXPECT_TRUE(admin_->UpdateGroup(Context().get(), update, &updated).ok());
  v1::DeleteGroupRequest del;
  del.set_name("a");
  v1::DeleteGroupResponse deleted;
  ASSERT_TRUE(admin_->DeleteGroup(Context().get(), del, &deleted).ok());
  *update.mutable_group() =
      FromJson(R"({"name":"b","aliases":["shared.example"]})");
  EXPECT_TRUE(admin_->UpdateGroup(Context().get(), update, &updated).ok());
}

TEST_F(AdminTest, ConcurrentCreatesOfOneAliasLetExactlyOneWin) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  std::atomic<int> taken{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      grpc::Status s = Create(absl::StrCat(
          R"({"name":"g)", i, R"(","healthCheck":{"kind":"NONE"},)",
          R"("aliases":["shared.example"]})"));
      (s.ok() ? ok : taken)++;
      EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::ALREADY_EXISTS)
          << s.error_message();
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(taken.load(), kThreads - 1);
}

TEST_F(AdminTest, DeleteRemovesTheGroup) {
  ASSERT_TRUE(Create(R"({"name":"web","healthCheck":{"kind":"NONE"}})").ok());
  v1::DeleteGroupRequest del;
  del.set_name("web");
  v1::DeleteGroupResponse deleted;
  ASSERT_TRUE(admin_->DeleteGroup(Context().get(), del, &deleted).ok());
  EXPECT_GT(deleted.generation(), 0u);
  v1::Group g;
  EXPECT_EQ(Get("web", &g).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::PickResponse pick;
  EXPECT_EQ(Pick("web", &pick).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AdminTest, Authorisation) {
  v1::Group g;
  // No token.
  grpc::Status s = Create(R"({"name":"web"})", &g, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  s = Get("from-file", &g, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Unknown token.
  s = Create(R"({"name":"web"})", &g, "wrong-token-0123456789");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Read-only token may read but not write.
  EXPECT_TRUE(Get("from-file", &g, kReadToken).ok());
  s = Create(R"({"name":"web"})", &g, kReadToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("role 'read'"));
  // Not "Bearer".
  auto context = Context(nullptr);
  context->AddMetadata("authorization", absl::StrCat("Basic ", kAdminToken));
  v1::GetGroupRequest get;
  get.set_name("from-file");
  EXPECT_EQ(admin_->GetGroup(context.get(), get, &g).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Pick stays open.
  v1::PickResponse pick;
  EXPECT_TRUE(Pick("from-file", &pick).ok());
}

// The backends of group "web" by address, with whether each is drained.
std::map<std::string, bool> DrainedByAddress(const v1::Group& g) {
  std::map<std::string, bool> out;
  for (const v1::Backend& b : g.backends()) {
    out[b.address()] = b.drained();
  }
  return out;
}

TEST_F(AdminTest, ASelfDrainTokenDrainsAndUndrainsItsOwnAddress) {
  ASSERT_GRPC_OK(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"},{"address":"127.0.0.1:8002"},
                  {"address":"127.0.0.2:8001"}]})"));
  v1::Group g;
  // Any port of the caller's IP: the backend's port is not the port the
  // call comes from.
  ASSERT_GRPC_OK(Drain("web", {"127.0.0.1:8001", "127.0.0.1:8002"}, true, &g,
                       kSelfDrainToken));
  EXPECT_EQ(DrainedByAddress(g),
            (std::map<std::string, bool>{{"127.0.0.1:8001", true},
                                         {"127.0.0.1:8002", true},
                                         {"127.0.0.2:8001", false}}));
  ASSERT_GRPC_OK(Get("web", &g));
  EXPECT_EQ(g.ready_count(), 1u);
  v1::PickResponse pick;
  ASSERT_GRPC_OK(Pick("web", &pick));
  EXPECT_EQ(pick.backends(0).address(), "127.0.0.2:8001");

  ASSERT_GRPC_OK(Drain("web", {"127.0.0.1:8002"}, false, &g, kSelfDrainToken));
  ASSERT_GRPC_OK(Get("web", &g));
  EXPECT_EQ(DrainedByAddress(g),
            (std::map<std::string, bool>{{"127.0.0.1:8001", true},
                                         {"127.0.0.1:8002", false},
                                         {"127.0.0.2:8001", false}}));
}

TEST_F(AdminTest, ASelfDrainTokenMayNotDrainAnotherAddress) {
  ASSERT_GRPC_OK(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"},{"address":"127.0.0.2:8001"}]})"));
  v1::Group before;
  ASSERT_GRPC_OK(Get("web", &before));

  // One address of another host refuses the whole call, own ones included.
  grpc::Status s = Drain("web", {"127.0.0.1:8001", "127.0.0.2:8001"}, true,
                         nullptr, kSelfDrainToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(),
              HasSubstr("a self-drain credential drains only the caller's own "
                        "address 127.0.0.1; 127.0.0.2:8001 is another"));
  s = Drain("web", {"127.0.0.2:8001"}, false, nullptr, kSelfDrainToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // A host name may resolve to anything: not the caller's own (refused
  // before the group is looked at).
  s = Drain("web", {"localhost:8003"}, true, nullptr, kSelfDrainToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(s.error_message(), HasSubstr("localhost:8003 is another"));
  // Another group's backend at the caller's own IP is the caller's: only
  // the file's groups are refused, as they are for admin.
  s = Drain("from-file", {"127.0.0.1:7001"}, true, nullptr, kSelfDrainToken);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  v1::Group after;
  ASSERT_GRPC_OK(Get("web", &after));
  EXPECT_EQ(after.generation(), before.generation());
  EXPECT_EQ(DrainedByAddress(after), DrainedByAddress(before));
  // An admin token drains any address.
  ASSERT_GRPC_OK(Drain("web", {"127.0.0.2:8001"}, true));
}

TEST_F(AdminTest, ASelfDrainTokenMayCallNothingElse) {
  ASSERT_GRPC_OK(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"}]})"));
  const auto denied = [](const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("role 'self-drain'"));
  };
  auto ctx = [this] { return Context(kSelfDrainToken); };
  v1::Group g;
  denied(Create(R"({"name":"api","healthCheck":{"kind":"NONE"}})", &g,
                kSelfDrainToken));
  denied(Get("web", &g, kSelfDrainToken));
  v1::UpdateGroupRequest update;
  update.mutable_group()->set_name("web");
  denied(admin_->UpdateGroup(ctx().get(), update, &g));
  v1::DeleteGroupRequest del;
  del.set_name("web");
  v1::DeleteGroupResponse deleted;
  denied(admin_->DeleteGroup(ctx().get(), del, &deleted));
  v1::ListGroupsResponse groups;
  denied(admin_->ListGroups(ctx().get(), {}, &groups));
  v1::AddBackendsRequest add;
  add.set_group("web");
  add.add_backends()->set_address("127.0.0.1:8002");
  denied(admin_->AddBackends(ctx().get(), add, &g));
  v1::RemoveBackendsRequest remove;
  remove.set_group("web");
  remove.add_addresses("127.0.0.1:8001");
  denied(admin_->RemoveBackends(ctx().get(), remove, &g));
  v1::ListTargetsResponse targets;
  denied(admin_->ListTargets(ctx().get(), {}, &targets));
  v1::ListMembersResponse members;
  denied(admin_->ListMembers(ctx().get(), {}, &members));
  // Not even its own drain through the batch call.
  v1::ApplyGroupChangesRequest batch;
  auto* drain = batch.add_changes()->mutable_drain_backends();
  drain->set_group("web");
  drain->add_addresses("127.0.0.1:8001");
  drain->set_drained(true);
  v1::ApplyGroupChangesResponse results;
  denied(admin_->ApplyGroupChanges(ctx().get(), batch, &results));

  ASSERT_GRPC_OK(Get("web", &g));
  EXPECT_EQ(g.backends_size(), 1);
  EXPECT_FALSE(g.backends(0).drained());
}

TEST_F(AdminTest, WithoutCredentialsConfiguredAdminIsClosed) {
  Stop();
  token_file_ = "";
  Start();
  v1::Group g;
  grpc::Status s = Create(R"({"name":"web"})", &g);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(s.error_message(), HasSubstr("no credentials are configured"));
}

TEST_F(AdminTest, MutationsSurviveARestart) {
  ASSERT_TRUE(Create(R"({"name":"web","healthCheck":{"kind":"NONE"},
      "backends":[{"address":"127.0.0.1:8001"},{"address":"127.0.0.1:8002"}]})")
                  .ok());
  v1::Group before;
  ASSERT_TRUE(Drain("web", {"127.0.0.1:8002"}, true, &before).ok());
  ASSERT_TRUE(Create(R"({"name":"gone","healthCheck":{"kind":"NONE"}})").ok());
  v1::DeleteGroupRequest del;
  del.set_name("gone");
  v1::DeleteGroupResponse deleted;
  ASSERT_TRUE(admin_->DeleteGroup(Context().get(), del, &deleted).ok());

  Stop();
  Start();
  v1::Group after;
  ASSERT_TRUE(Get("web", &after).ok());
  EXPECT_EQ(after.backends_size(), 2);
  EXPECT_TRUE(after.backends(1).drained());
  EXPECT_EQ(after.source(), v1::GROUP_SOURCE_STORE);
  EXPECT_GT(after.generation(), before.generation());
  EXPECT_GT(after.generation(), deleted.generation());
  v1::Group gone;
  EXPECT_EQ(Get("gone", &gone).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AdminTest, AFullStoreFailsTheMutationAndLeavesMemoryUnchanged) {
  Stop();
  // The smallest cap the config allows; fill it with one big group.
  Start("limits: {max_state_bytes: 65536}\n");
  std::string backends;
  for (int i = 0; i < 2000; ++i) {
    absl::StrAppend(&backends, i == 0 ? "" : ",", "{\"address\":\"10.1.",
                    i / 200, ".", i % 200 + 1,
                    ":8080\",\"metadata\":{\"padding\":\"",
                    std::string(40, 'x'), "\"}}");
  }
  grpc::Status s = Create(absl::StrCat(
      R"({"name":"big","healthCheck":{"kind":"NONE"},"backends":[)", backends,
      "]}"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("aside.db"));
  v1::Group g;
  EXPECT_EQ(Get("big", &g).error_code(), grpc::StatusCode::NOT_FOUND);
  // Small changes still work.
  EXPECT_TRUE(Create(R"({"name":"small","healthCheck":{"kind":"NONE"}})").ok());
}

// A change of ApplyGroupChanges from its protobuf JSON.
v1::GroupChange Change(const std::string& json) {
  v1::GroupChange c;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &c).ok())
      << json;
  return c;
}

TEST_F(AdminTest, ApplyGroupChangesAnswersEachChangeOnItsOwn) {
  v1::ApplyGroupChangesRequest request;
  *request.add_changes() = Change(R"({"createGroup":{"group":{"name":"web",
      "healthCheck":{"kind":"NONE"},"backends":[{"address":"127.0.0.1:8001"},
      {"address":"127.0.0.1:8002"}]}}})");
  *request.add_changes() = Change(
      R"({"drainBackends":{"group":"web","addresses":["127.0.0.1:8002"],
      "drained":true}})");
  *request.add_changes() = Change(
      R"({"createGroup":{"group":{"name":"api","healthCheck":{"kind":"NONE"}}}})");
  // Fails alone: the address is not in the group.
  *request.add_changes() = Change(
      R"({"drainBackends":{"group":"web","addresses":["127.0.0.1:9999"],
      "drained":true}})");
  *request.add_changes() = Change(
      R"({"addBackends":{"group":"nope","backends":[{"address":"127.0.0.1:1"}]}})");
  request.add_changes();  // nothing set
  *request.add_changes() = Change(
      R"({"removeBackends":{"group":"from-file","addresses":["127.0.0.1:7001"]}})");
  *request.add_changes() = Change(
      R"({"addBackends":{"group":"web","backends":[{"address":"127.0.0.1:8003"}]}})");
  *request.add_changes() = Change(R"({"deleteGroup":{"name":"api"}})");
  v1::ApplyGroupChangesResponse response;
  ASSERT_GRPC_OK(
      admin_->ApplyGroupChanges(Context().get(), request, &response));
  ASSERT_EQ(response.results_size(), request.changes_size());
  const std::vector<grpc::StatusCode> want = {
      grpc::StatusCode::OK,
      grpc::StatusCode::OK,
      grpc::StatusCode::OK,
      grpc::StatusCode::NOT_FOUND,
      grpc::StatusCode::NOT_FOUND,
      grpc::StatusCode::INVALID_ARGUMENT,
      grpc::StatusCode::FAILED_PRECONDITION,
      grpc::StatusCode::OK,
      grpc::StatusCode::OK};
  for (int i = 0; i < response.results_size(); ++i) {
    EXPECT_EQ(response.results(i).code(), want[i])
        << i << ": " << response.results(i).message();
  }
  EXPECT_EQ(response.results(0).group(), "web");
  EXPECT_THAT(response.results(3).message(), HasSubstr("127.0.0.1:9999"));
  EXPECT_THAT(response.results(4).message(), HasSubstr("nope"));
  EXPECT_THAT(response.results(5).message(), HasSubstr("drain_backends"));
  EXPECT_THAT(response.results(6).message(), HasSubstr("file"));
  // One group's changes apply in order: each a later generation.
  EXPECT_GT(response.results(1).generation(), response.results(0).generation());
  EXPECT_GT(response.results(7).generation(), response.results(1).generation());
  EXPECT_GT(response.results(8).generation(), 0u);
  // What the successful changes did, and nothing of the failed ones.
  v1::Group web;
  ASSERT_GRPC_OK(Get("web", &web));
  ASSERT_EQ(web.backends_size(), 3);
  EXPECT_FALSE(web.backends(0).drained());
  EXPECT_TRUE(web.backends(1).drained());
  EXPECT_EQ(web.generation(), response.results(7).generation());
  v1::Group gone;
  EXPECT_EQ(Get("api", &gone).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::Group file;
  ASSERT_GRPC_OK(Get("from-file", &file));
  EXPECT_EQ(file.backends_size(), 1);
}

TEST_F(AdminTest, ApplyGroupChangesRefusesABadListAsAWhole) {
  v1::ApplyGroupChangesRequest request;
  v1::ApplyGroupChangesResponse response;
  grpc::Status s =
      admin_->ApplyGroupChanges(Context().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("changes: 0 entries"));
  for (int i = 0; i <= kMaxChangesPerRequest; ++i) {
    *request.add_changes() = Change(
        R"({"createGroup":{"group":{"name":"many","healthCheck":{"kind":"NONE"}}}})");
  }
  s = admin_->ApplyGroupChanges(Context().get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("1001 entries"));
  request.mutable_changes()->DeleteSubrange(1, kMaxChangesPerRequest);
  s = admin_->ApplyGroupChanges(Context(kReadToken).get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  s = admin_->ApplyGroupChanges(Context(nullptr).get(), request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::Group g;
  EXPECT_EQ(Get("many", &g).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AdminTest, ApplyGroupChangesOfManyGroupsShareCommitsAndSurviveARestart) {
  constexpr int kGroups = 300;
  v1::ApplyGroupChangesRequest request;
  for (int i = 0; i < kGroups; ++i) {
    *request.add_changes() = Change(absl::StrCat(
        R"({"createGroup":{"group":{"name":"g)", i,
        R"(","healthCheck":{"kind":"NONE"},"backends":[{"address":"127.0.0.1:)",
        8000 + i, R"("}]}}})"));
  }
  for (int i = 0; i < kGroups; i += 2) {
    *request.add_changes() = Change(absl::StrCat(
        R"({"drainBackends":{"group":"g)", i, R"(","addresses":["127.0.0.1:)",
        8000 + i, R"("],"drained":true}})"));
  }
  v1::ApplyGroupChangesResponse response;
  ASSERT_GRPC_OK(
      admin_->ApplyGroupChanges(Context().get(), request, &response));
  ASSERT_EQ(response.results_size(), request.changes_size());
  for (const v1::GroupChangeResult& r : response.results()) {
    ASSERT_EQ(r.code(), 0) << r.group() << ": " << r.message();
  }
  Stop();
  Start();
  for (int i = 0; i < kGroups; ++i) {
    v1::Group g;
    ASSERT_GRPC_OK(Get(absl::StrCat("g", i), &g));
    ASSERT_EQ(g.backends_size(), 1);
    EXPECT_EQ(g.backends(0).drained(), i % 2 == 0) << i;
  }
}

}  // namespace
}  // namespace aside::server
